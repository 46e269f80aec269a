"""Whole-store verification: its fast path means exactly what the rules say.

``verify_store`` reads the journal in blocks with one pattern and a few bytes comparisons per
line. These tests hold it against a plain reading of spec section 3, record by record with
unbounded memory (``_reference``), on valid journals and on every mutation tried: every byte
of a record flipped, a line feed or NUL put in its place, lines deleted, duplicated, swapped.
They also check that the free space a writer keeps at the end of the file (NUL bytes) is not
data, and the pieces the fast path relies on (its integer pattern, one ``findall`` result per
line, the payload cache, lines split across reads).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.storage_helpers import TickClock, record_run
from tracelock.core.entry import (
    ADMIN_RUN,
    MAX_INTEGER,
    REDACTION_KIND,
    ChainChecker,
    EntryFormatError,
    encode_entry,
    parse_entry,
)
from tracelock.errors import CanonicalError
from tracelock.storage.directory import DirectoryStore, verify
from tracelock.storage.directory.journal import ENTRY, PAYLOAD, REDACTED, data_end, scan_records
from tracelock.storage.verify import verify_store

# ok, issue code, issue seq, entries accepted, whether an incomplete tail was noted
Outcome = tuple[bool, str | None, int | None, int, bool]


def _synced(journal: Path) -> int | None:
    """The synced mark beside ``journal`` (spec 3.4): the larger slot whose complement agrees."""
    try:
        data = (journal.parent / "journal.synced").read_bytes()
    except FileNotFoundError:
        return None
    slots = [struct.unpack_from("<QQ", data, start) for start in (0, 16) if len(data) >= start + 16]
    valid = [length for length, check in slots if length ^ check == (1 << 64) - 1]
    return max(valid) if valid else None


def _reference(journal: Path) -> Outcome:
    """Spec section 3 applied record by record, remembering every payload record seen."""
    fd = os.open(journal, os.O_RDONLY)
    try:
        synced = _synced(journal)
        checker = ChainChecker(0)
        stored: set[bytes] = set()
        erased: set[bytes] = set()
        redactions: set[bytes] = set()
        entries = 0
        tail = False
        end = data_end(fd)
        for item in scan_records(fd, 0, end):
            if isinstance(item, tuple):
                tail = True  # not part of the journal, unless it starts before the mark
                if synced is not None and item[0] < synced:
                    return (False, "JOURNAL_CORRUPT", checker.next_seq, entries, False)
                break
            seq, data = checker.next_seq, item.data
            if item.kind == PAYLOAD:
                if hashlib.sha256(data[66:]).hexdigest().encode() != data[1:65]:
                    return (False, "PAYLOAD_HASH_MISMATCH", seq, entries, False)
                stored.add(data[1:65])
                continue
            if item.kind == REDACTED:
                if data[66:].strip(b" "):
                    return (False, "PAYLOAD_HASH_MISMATCH", seq, entries, False)
                stored.add(data[1:65])
                erased.add(data[1:65])
                continue
            if item.kind != ENTRY:
                return (False, "JOURNAL_MALFORMED_RECORD", seq, entries, False)
            try:
                entry = parse_entry(data)
            except (EntryFormatError, CanonicalError):
                return (False, "JOURNAL_MALFORMED_ENTRY", seq, entries, False)
            issue = checker.check(entry)
            if issue is not None:
                return (False, issue.code, issue.seq, entries, False)
            if entry.payload is not None and entry.payload.encode() not in stored:
                return (False, "PAYLOAD_MISSING", entry.seq, entries, False)
            if entry.run == ADMIN_RUN and entry.kind == REDACTION_KIND and entry.meta:
                target = entry.meta.get("payload")
                if isinstance(target, str):
                    redactions.add(target.encode())
            entries += 1
        if synced is not None and end < synced:  # acknowledged bytes are missing
            return (False, "JOURNAL_CORRUPT", checker.next_seq, entries, False)
        if erased - redactions:
            return (False, "PAYLOAD_ERASED_WITHOUT_REDACTION", checker.next_seq, entries, tail)
        return (True, None, None, entries, tail)
    finally:
        os.close(fd)


def _fast(store: DirectoryStore) -> Outcome:
    report = verify_store(store)
    issue = report.issue
    tail = any("incomplete tail" in note for note in report.notes)
    if issue is None:
        return (True, None, None, report.entries, tail)
    assert "is not valid" not in issue.message, "the detailed checker found nothing wrong"
    return (False, issue.code, issue.seq, report.entries, tail)


def _build(store_dir: Path) -> list[bytes]:
    """A small journal with every kind of record: entries with and without meta (flat and
    nested), shared payloads, a run left open, a redaction and its erased payload record."""
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r0")
        secret = store.append("r1", "run.start", payload={"card": "4111"}, meta={"status": "running"})
        store.append("r1", "effect", payload={"tool": "t", "n": 0, "text": "x" * 200})  # r0's: stored once
        store.append("open", "run.start", meta={"agent": "a", "parent": {"run": "r0", "step": 2}})
        store.append("r1", "run.end", payload={"output": "r1"}, meta={"status": "completed"})
        store.append("open", "effect", payload={"input": "r0"})  # stored by r0, long before
        assert secret.payload is not None
        store.append(ADMIN_RUN, REDACTION_KIND, meta={"payload": secret.payload, "reason": "PII"})
        assert store.erase_payload(secret.payload)
        store.append("open", "effect", payload=None)
    return (store_dir / "journal.log").read_bytes().splitlines(keepends=True)


def _mutations(lines: list[bytes], targets: list[int]) -> Iterator[list[bytes]]:
    for target in targets:
        line = lines[target]
        for position in range(len(line) - 1):
            for replace in (line[position] ^ 0x01, line[position] ^ 0x20, 0x0A, 0x00):
                mutated = line[:position] + bytes([replace]) + line[position + 1 :]
                yield lines[:target] + [mutated] + lines[target + 1 :]
    for number in range(len(lines)):
        yield lines[:number] + lines[number + 1 :]
        yield lines[: number + 1] + lines[number:]
        if number + 1 < len(lines):
            yield lines[:number] + [lines[number + 1], lines[number]] + lines[number + 2 :]


def _targets(lines: list[bytes]) -> list[int]:
    """One line of each shape: payload record, erased record, entries with flat, nested and
    no meta, a terminal entry, the redaction entry."""

    def first(pattern: bytes) -> int:
        return next(n for n, line in enumerate(lines) if re.search(pattern, line))

    return [
        first(rb"^="),
        first(rb"^-"),
        first(rb'"kind":"run.start","meta":\{"agent"'),
        first(rb'"parent":\{'),
        first(rb'"kind":"effect","payload":"'),
        first(rb'"kind":"run.end"'),
        first(rb'"kind":"payload.redact"'),
    ]


def test_the_journal_under_test_verifies(store_dir: Path) -> None:
    lines = _build(store_dir)
    assert len(set(_targets(lines))) == 7
    with DirectoryStore(store_dir, read_only=True) as store:
        report = verify_store(store)
        assert report.ok, report.issue
        # Three runs; the store's admin chain is not counted as one.
        assert (report.entries, report.payloads, report.redacted, report.runs) == (11, 6, 1, 3)
        assert _fast(store) == _reference(store_dir / "journal.log")


def test_every_mutation_is_judged_as_the_rules_say(store_dir: Path) -> None:
    lines = _build(store_dir)
    journal = store_dir / "journal.log"
    failures = 0
    with DirectoryStore(store_dir, read_only=True) as store:
        for mutated in _mutations(lines, _targets(lines)):
            journal.write_bytes(b"".join(mutated))
            expected = _reference(journal)
            assert _fast(store) == expected, mutated
            failures += not expected[0]
    # Nearly all fail. Those that pass rewrite an entry whose hash no later entry holds (r0's
    # closing entry, the admin chain's only entry): only a signed checkpoint can tell, as for
    # the last entry of the journal.
    assert failures > 4500


@pytest.mark.parametrize("chunk", [1, 7, 64, 333])
def test_lines_split_across_reads(store_dir: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _build(store_dir)
    journal = store_dir / "journal.log"
    monkeypatch.setattr(verify, "_READ_CHUNK", chunk)
    rng = random.Random(chunk)
    cases = list(_mutations(lines, _targets(lines)[4:5]))
    with DirectoryStore(store_dir, read_only=True) as store:
        for mutated in [lines, lines + [b'{"i":0,"kind":"run.st'], *rng.sample(cases, 150)]:
            journal.write_bytes(b"".join(mutated))
            assert _fast(store) == _reference(journal)


def test_payloads_beyond_the_cache_are_found_through_the_index(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two-entry generations: nearly every reference misses the cache and is looked up through
    # the index (which is then checked against the file); a fresh handle for each mutation
    # keeps the index true to the file.
    monkeypatch.setattr(verify, "_GENERATION", 2)
    lines = _build(store_dir)
    journal = store_dir / "journal.log"
    for mutated in [lines, *_mutations(lines, [])]:
        journal.write_bytes(b"".join(mutated))
        for suffix in ("", "-wal", "-shm"):
            (store_dir / f"index.sqlite{suffix}").unlink(missing_ok=True)
        with DirectoryStore(store_dir, read_only=True) as store:
            assert _fast(store) == _reference(journal)


def test_cache_generations_turn_over_without_losing_recent_payloads(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify, "_GENERATION", 3)
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        for number in range(40):
            store.append(f"r{number}", "run.start", payload={"n": number % 7})
            store.append(f"r{number}", "run.end", payload={"n": number}, meta={"status": "completed"})
    looked_up: list[tuple[str, int]] = []
    with DirectoryStore(store_dir, read_only=True) as store:
        real = store.payload_state_before

        def spy(digest: str, before: int) -> str:
            looked_up.append((digest, before))
            return real(digest, before)

        monkeypatch.setattr(store, "payload_state_before", spy)
        report = verify_store(store)
    assert report.ok and report.entries == 80, report.issue
    assert looked_up  # some references left the cache and were found through the index
    # Each look-up counts only records before the entry that refers to the payload.
    offsets, offset = {}, 0
    for line in (store_dir / "journal.log").read_bytes().splitlines(keepends=True):
        offsets[offset] = line
        offset += len(line)
    for digest, before in looked_up:
        assert offsets[before].startswith(b'{"i":')
        assert b'"payload":"%s"' % digest.encode() in offsets[before]


# -- the free space at the end of the file ------------------------------------------------------


def test_nul_free_space_after_the_journal_is_not_data(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(5):
            record_run(store, f"r{number}")
    journal = store_dir / "journal.log"
    data = journal.read_bytes()
    with journal.open("ab") as handle:
        handle.write(b"\0" * 70_000)
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader)
    assert report.ok, report.issue
    assert report.notes == [] and report.entries == 20

    # A torn last record before the free space is still an incomplete tail, not the journal.
    journal.write_bytes(data + b'{"i":0,"kind":"run.st' + b"\0" * 4096)
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader)
    assert report.ok and report.entries == 20
    assert report.notes and "incomplete tail of 21 bytes" in report.notes[0]


@pytest.mark.parametrize("where", ["line", "inside-entry", "inside-payload", "before-padding"])
def test_a_nul_byte_inside_the_journal_is_a_failure(store_dir: Path, where: str) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(5):
            record_run(store, f"r{number}")
    journal = store_dir / "journal.log"
    lines = journal.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    entry = next(n for n in range(middle, len(lines)) if lines[n].startswith(b"{"))
    payload = next(n for n in range(middle, len(lines)) if lines[n].startswith(b"="))
    if where == "line":
        lines.insert(middle, b"\0\0\0\n")
    elif where == "inside-entry":
        lines[entry] = lines[entry][:30] + b"\0" + lines[entry][31:]
    elif where == "inside-payload":
        lines[payload] = lines[payload][:70] + b"\0" + lines[payload][71:]
    else:
        lines.insert(middle, b"\0" * 100)  # NUL bytes that run into the next record
    journal.write_bytes(b"".join(lines) + b"\0" * 5000)
    with DirectoryStore(store_dir, read_only=True) as reader:
        outcome = _fast(reader)
    assert not outcome[0]
    assert outcome == _reference(journal)


# -- what the fast path is built on -------------------------------------------------------------


@pytest.mark.parametrize("limit", [10, 19, 99, 100, 305, 1000, 4321, 20_000])
def test_the_integer_pattern_takes_exactly_zero_to_the_limit(limit: int) -> None:
    pattern = re.compile(verify._decimal_at_most(limit))
    for number in range(limit * 10 + 11):
        assert bool(pattern.fullmatch(str(number).encode())) == (number <= limit), number
    for text in (b"", b"00", b"01", b"-1", b"+1", b" 1", b"1 ", b"1_0", b"\xd9\xa1"):
        assert pattern.fullmatch(text) is None


def test_the_integer_pattern_at_2_to_the_53() -> None:
    pattern = re.compile(verify._INTEGER)
    rng = random.Random(53)
    samples = [0, 1, 9, 10, 10**15 - 1, 10**15, 10**16 - 1, MAX_INTEGER - 1, MAX_INTEGER]
    samples += [MAX_INTEGER + 1, MAX_INTEGER + 10, 2 * MAX_INTEGER, 10**16, 10**17]
    samples += [rng.randrange(0, 10**17) for _ in range(20_000)]
    samples += [MAX_INTEGER + rng.randrange(-(10**9), 10**9) for _ in range(20_000)]
    for number in samples:
        assert bool(pattern.fullmatch(str(number).encode())) == (number <= MAX_INTEGER), number


def test_findall_gives_one_result_per_line() -> None:
    rng = random.Random(8)
    entry = encode_entry(seq=0, run="r", i=0, kind="run.start", payload=None, prev=None, ts=5).line
    digest = hashlib.sha256(b'{"a":1}').hexdigest().encode()
    shapes = [
        entry,
        b"=" + digest + b' {"a":1}',
        b"-" + digest + b"       ",
        b"",
        b"garbage",
        b"\0\0",
        b"=" + digest + b" ",
        b"{" + entry,
        entry[:-1],
        b"  ",
    ]
    for _ in range(300):
        lines = [rng.choice(shapes) for _ in range(rng.randrange(1, 12))]
        data = b"\n".join(lines) + b"\n"
        found = verify._RECORD_LINE.findall(data, 0, len(data) - 1)
        assert len(found) == len(lines)
        for line, groups in zip(lines, found, strict=True):
            is_record = line in shapes[:3]
            assert groups[0] == (line if is_record else b"")
            assert any(groups) == is_record


def test_integer_members_at_the_limit(store_dir: Path) -> None:
    # ts is the only member a test can push to 2**53-1 (seq and i would need that many
    # entries); the last entry of the journal can be rewritten without breaking a chain.
    with DirectoryStore(store_dir) as store:
        record_run(store, "r")
        last = store.append("tail", "run.start")
    journal = store_dir / "journal.log"
    data = journal.read_bytes()
    assert data.endswith(last.line + b"\n")
    for ts, ok in ((MAX_INTEGER, True), (MAX_INTEGER + 1, False), (10**16, False)):
        line = last.line.replace(b'"ts":%d' % last.ts, b'"ts":%d' % ts)
        journal.write_bytes(data[: -len(last.line) - 1] + line + b"\n")
        with DirectoryStore(store_dir, read_only=True) as reader:
            report = verify_store(reader)
        assert report.ok == ok, report.issue
        if not ok:
            assert report.issue is not None and report.issue.code == "JOURNAL_MALFORMED_ENTRY"
            assert re.search(r"2\*\*53-1|safe integer", report.issue.message)


def _rewrite_end(store_dir: Path, lines: list[bytes], replaced: int = 1) -> Outcome:
    """Put ``lines`` in place of the last ``replaced`` lines of a closed store's journal and
    judge it both ways, with a handle opened before the rewrite (verification reads the
    file; the handle only answers payload look-ups)."""
    journal = store_dir / "journal.log"
    kept = journal.read_bytes().splitlines(keepends=True)[:-replaced]
    with DirectoryStore(store_dir, read_only=True) as reader:
        journal.write_bytes(b"".join(kept + [line + b"\n" for line in lines]))
        outcome = _fast(reader)
    assert outcome == _reference(journal)
    return outcome


def test_a_run_cannot_continue_after_its_end(store_dir: Path) -> None:
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r")
        end = store.entries("r")[-1]
        last = store.append("other", "run.start")
    after = encode_entry(
        seq=last.seq + 1, run="r", i=end.i + 1, kind="effect", payload=None, prev=end.hash, ts=9
    )
    outcome = _rewrite_end(store_dir, [last.line, after.line])
    assert outcome[:2] == (False, "JOURNAL_CHAIN_BROKEN")


def test_the_first_entry_of_a_run_has_no_prev(store_dir: Path) -> None:
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r")
        last = store.append("other", "run.start")
    line = last.line.replace(b'"prev":null', b'"prev":"%s"' % last.hash.encode())
    assert _rewrite_end(store_dir, [line])[:2] == (False, "JOURNAL_MALFORMED_ENTRY")


def test_hashes_are_lowercase_hex_even_when_an_erased_record_says_otherwise(
    store_dir: Path,
) -> None:
    # The fast path takes ``payload`` as any 64 characters and relies on its cache holding
    # only lowercase hex keys: an erased record's hash field is not checked to be hex, so
    # it must not make an uppercase ``payload`` look stored.
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r")
        last = store.append("other", "run.start", payload={"secret": 1})
    assert last.payload is not None
    journal = store_dir / "journal.log"
    lines = journal.read_bytes().splitlines()
    assert lines[-2].startswith(b"=" + last.payload.encode())
    upper = last.payload.upper().encode()
    erased = b"-" + upper + b" " * (len(lines[-2]) - 65)
    entry = last.line.replace(last.payload.encode(), upper)
    outcome = _rewrite_end(store_dir, [erased, entry], replaced=2)
    assert outcome[:2] == (False, "JOURNAL_MALFORMED_ENTRY")


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        (b'"kind":"run.start"', b'"kind":"run.starts"', True),
        (b'"kind":"run.start"', b'"kind":"run."', False),
        (b'"kind":"run.start"', b'"kind":"run..start"', False),
        (b'"kind":"run.start"', b'"kind":"Run.start"', False),
        (b'"kind":"run.start"', b'"kind":"9run"', False),
        (b'"run":"other"', b'"run":"o:t-h_e.r9"', True),
        (b'"run":"other"', b'"run":"-other"', False),
        (b'"run":"other"', b'"run":"ot her"', False),
        (b'"run":"other"', b'"run":"%s"' % (b"o" * 128), True),
        (b'"run":"other"', b'"run":"%s"' % (b"o" * 129), False),
        (b'"seq":', b'"seq":0', False),
        (b',"v":1}', b',"v":1} ', False),
        (b',"v":1}', b',"v":01}', False),
        (b"{", b" {", False),
    ],
)
def test_the_layout_is_exact(store_dir: Path, old: bytes, new: bytes, ok: bool) -> None:
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r")
        last = store.append("other", "run.start")
    line = last.line.replace(old, new, 1)
    assert line != last.line
    assert _rewrite_end(store_dir, [line])[0] == ok


@pytest.mark.parametrize(("spaces", "ok"), [(0, False), (1, True), (5, True)])
def test_an_erased_record_keeps_at_least_one_byte(store_dir: Path, spaces: int, ok: bool) -> None:
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r")
        last = store.append("other", "run.start")
    digest = hashlib.sha256(b"x").hexdigest().encode()
    erased = b"-" + digest + b" " + b" " * spaces
    redaction = encode_entry(
        seq=last.seq + 1,
        run=ADMIN_RUN,
        i=0,
        kind=REDACTION_KIND,
        payload=None,
        prev=None,
        ts=9,
        meta={"payload": digest.decode()},
    )
    outcome = _rewrite_end(store_dir, [last.line, erased, redaction.line])
    assert outcome[0] == ok, outcome


@pytest.mark.parametrize(
    "meta",
    [
        b'{"a":1,}',  # not JSON
        b'{"b":1,"a":2}',  # not canonical (member order)
        b'{"a":9007199254740993}',  # beyond the integers canonical JSON holds
        b"{}",  # empty
        b'{"a":{"b":[1,{"c":"}"}]}}',  # nested and canonical: valid
    ],
)
def test_meta_is_canonical_or_reported(store_dir: Path, meta: bytes) -> None:
    with DirectoryStore(store_dir) as store:
        record_run(store, "r")
        last = store.append("tail", "run.start", meta={"status": "running"})
    journal = store_dir / "journal.log"
    data = journal.read_bytes()
    line = last.line.replace(b'{"status":"running"}', meta)
    # The handle is opened before the rewrite: verification reads the file itself.
    with DirectoryStore(store_dir, read_only=True) as reader:
        journal.write_bytes(data[: -len(last.line) - 1] + line + b"\n")
        assert _fast(reader) == _reference(journal)
        report = verify_store(reader)
    assert report.ok == (meta.startswith(b'{"a":{')), report.issue
    if not report.ok:
        assert report.issue is not None and report.issue.code == "JOURNAL_MALFORMED_ENTRY"


def test_progress_is_reported_at_every_step(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "_PROGRESS_EVERY", 3)
    monkeypatch.setattr(verify, "_READ_CHUNK", 500)
    with DirectoryStore(store_dir) as store:
        for number in range(5):
            record_run(store, f"r{number}")
    seen: list[int] = []
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader, progress=seen.append)
    assert report.ok and report.entries == 20
    assert seen == [3, 6, 9, 12, 15, 18]


def test_a_malformed_entry_is_named_by_its_run_and_seq(store_dir: Path) -> None:
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        record_run(store, "r")
        last = store.append("other", "run.start")
    line = last.line.replace(b'"prev":null', b'"prev":"%s"' % last.hash.encode())
    journal = store_dir / "journal.log"
    data = journal.read_bytes()
    journal.write_bytes(data[: -len(last.line) - 1] + line + b"\n")
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader)
    assert report.issue is not None and report.issue.code == "JOURNAL_MALFORMED_ENTRY"
    assert report.issue.run == "other" and report.issue.seq == last.seq
    assert f"entry {last.seq} of run other" in report.issue.message
