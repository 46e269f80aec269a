"""Sealed journal segments: the durable start of ``journal.log`` compressed into
``sealed/*.seg``, its blocks punched out of the file, every offset keeping its meaning.

Real stores with a small ``seal_bytes`` so that a few hundred entries seal several times;
crash states of sealing built by hand from the module's own functions; another process
sealing under a handle that was open before; ``kill -9`` of a writer that seals often.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.storage.storage_helpers import TickClock
from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, Entry
from tracelock.storage.copy import ReplayClock, copy_store, verify_copy
from tracelock.storage.directory import DirectoryStore, sealed
from tracelock.storage.directory.journal import data_end
from tracelock.storage.directory.sealed import (
    FRAME_BYTES,
    SEALED_DIR,
    decode_segment,
    encode_segment,
    open_journal,
    segment_name,
)
from tracelock.storage.errors import PayloadRedactedError, SegmentCorruptError
from tracelock.storage.verify import verify_store

REPO = Path(__file__).resolve().parents[2]
#: Small enough that a few hundred entries seal several times.
SEAL = 16384
SEGMENT_CORRUPT = "JOURNAL_SEGMENT_CORRUPT"
_PATIENCE_S = 60.0

Appended = list[tuple[Entry, Any]]


# -- helpers ---------------------------------------------------------------------------------
def _open(store_dir: Path, seal_bytes: int | None = SEAL, **options: Any) -> DirectoryStore:
    return DirectoryStore(
        store_dir,
        clock=TickClock(),
        store_id=lambda: "sealed-test",
        seal_bytes=seal_bytes,
        **options,
    )


def _append_runs(
    store: DirectoryStore, runs: int, *, prefix: str = "r", words: int = 20
) -> Appended:
    """``runs`` runs of six entries each, every payload different (about ``words`` words
    long); returns what was appended."""
    appended: Appended = []
    for number in range(runs):
        run = f"{prefix}{number}"
        for step in range(6):
            payload = {"run": run, "step": step, "text": f"{run}/{step} " * (words + 7 * step)}
            kind = "run.start" if step == 0 else "run.end" if step == 5 else "effect"
            meta = {"status": "completed"} if step == 5 else None
            appended.append((store.append(run, kind, payload=payload, meta=meta), payload))
    return appended


def _segments(store_dir: Path) -> list[Path]:
    return sorted((store_dir / SEALED_DIR).glob("*.seg"))


def _segment_bytes(path: Path) -> bytes:
    return decode_segment(path, path.read_bytes())[1]


def _first_data(store_dir: Path) -> int:
    fd = os.open(store_dir / "journal.log", os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_DATA)
    finally:
        os.close(fd)


def _logical_journal(store_dir: Path) -> bytes:
    journal = open_journal(store_dir)
    try:
        return journal.pread(journal.size(), 0)
    finally:
        journal.close()


def _assert_reads_back(store: DirectoryStore, appended: Appended) -> None:
    for entry, payload in appended:
        assert store.entry_at(entry.seq) == entry
        assert entry.payload is not None and store.get_payload(entry.payload) == payload
    runs = {entry.run for entry, _ in appended}
    for run in runs:
        assert store.entries(run) == [entry for entry, _ in appended if entry.run == run]


def _assert_verifies(store_dir: Path) -> None:
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader, compare_index=True)
    assert report.ok, report.issue


def _sealed_store(store_dir: Path, runs: int = 40) -> Appended:
    with _open(store_dir) as store:
        appended = _append_runs(store, runs)
        assert store.seal_error is None
    assert len(_segments(store_dir)) >= 3
    return appended


# -- 1. sealing --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seal_bytes", "words", "frames"),
    [(SEAL, 20, 1), (2 * FRAME_BYTES + 1000, 240, 3)],
    ids=["one-frame-segments", "several-frame-segments"],
)
def test_sealing_frees_blocks_and_keeps_every_byte(
    tmp_path: Path, seal_bytes: int, words: int, frames: int
) -> None:
    sealed_dir, plain_dir = tmp_path / "sealed", tmp_path / "plain"
    with _open(sealed_dir, seal_bytes=seal_bytes) as store:
        appended = _append_runs(store, 40, words=words)
        assert store.seal_error is None
    with _open(plain_dir, seal_bytes=None) as plain:
        plain_appended = _append_runs(plain, 40, words=words)
    assert [entry for entry, _ in appended] == [entry for entry, _ in plain_appended]
    for path in _segments(sealed_dir):
        assert len(decode_segment(path, path.read_bytes())[0].frames) == frames

    assert len(_segments(sealed_dir)) >= 3
    sealed_stat = os.stat(sealed_dir / "journal.log")
    plain_stat = os.stat(plain_dir / "journal.log")
    assert sealed_stat.st_size == plain_stat.st_size
    assert sealed_stat.st_blocks < plain_stat.st_blocks
    assert _first_data(sealed_dir) > 0
    assert _first_data(plain_dir) == 0

    plain_bytes = (plain_dir / "journal.log").read_bytes()
    assert _logical_journal(sealed_dir) == plain_bytes
    assert (sealed_dir / "journal.log").read_bytes() != plain_bytes  # the holes read as NUL
    with DirectoryStore(sealed_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)


def test_the_segments_hold_consecutive_journal_bytes(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    _sealed_store(store_dir)
    logical = _logical_journal(store_dir)
    at = 0
    for path in _segments(store_dir):
        data = _segment_bytes(path)
        assert path.name == segment_name(at)
        assert data == logical[at : at + len(data)] and data.endswith(b"\n")
        at += len(data)
    assert 0 < at < len(logical)


# -- 2. reopening ------------------------------------------------------------------------------
def test_a_sealed_store_reopens_as_reader_and_as_writer(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    appended = _sealed_store(store_dir)
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)
    before = len(_segments(store_dir))
    with DirectoryStore(store_dir, seal_bytes=SEAL) as writer:
        _assert_reads_back(writer, appended)
        appended += _append_runs(writer, 30, prefix="more")
        assert writer.seal_error is None
        _assert_reads_back(writer, appended)
    assert len(_segments(store_dir)) > before
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)
    _assert_verifies(store_dir)


# -- 3. the index rebuilt through the segments --------------------------------------------------
def test_the_index_is_rebuilt_from_the_segments(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    appended = _sealed_store(store_dir)
    with DirectoryStore(store_dir, read_only=True) as reader:
        expected = [
            (info.run, info.status, info.entries, info.first_seq, info.last_seq)
            for info in reader.runs()
        ]
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (store_dir / name).unlink(missing_ok=True)
    with DirectoryStore(store_dir, seal_bytes=SEAL) as store:
        assert [
            (info.run, info.status, info.entries, info.first_seq, info.last_seq)
            for info in store.runs()
        ] == expected
        _assert_reads_back(store, appended)
    assert (store_dir / "index.sqlite").exists()
    _assert_verifies(store_dir)


# -- 4. verification of the segments ------------------------------------------------------------
def _flip(path: Path, at: int) -> None:
    blob = bytearray(path.read_bytes())
    blob[at] ^= 0x40
    path.write_bytes(bytes(blob))


def _inside_a_frame(path: Path) -> int:
    segment, _ = decode_segment(path, path.read_bytes())
    at, length = segment.frames[-1]
    return at + length // 2


def _inside_the_header_digest(path: Path) -> int:
    digest = hashlib.sha256(_segment_bytes(path)).digest()
    at = path.read_bytes().find(digest)
    assert at > 0
    return at + 5


_DAMAGE_SITES = pytest.mark.parametrize(
    "where", [_inside_a_frame, _inside_the_header_digest], ids=["frame", "header-digest"]
)


def _assert_reports_segment(reader: DirectoryStore, victim: Path) -> None:
    report = verify_store(reader)
    assert report.issue is not None
    assert report.issue.code == SEGMENT_CORRUPT
    assert victim.name in report.issue.message


@_DAMAGE_SITES
def test_a_damaged_segment_is_reported(tmp_path: Path, where: Callable[[Path], int]) -> None:
    store_dir = tmp_path / "store"
    _sealed_store(store_dir)
    victim = _segments(store_dir)[1]
    with DirectoryStore(store_dir, read_only=True) as reader:
        _flip(victim, where(victim))
        _assert_reports_segment(reader, victim)


@_DAMAGE_SITES
def test_a_store_with_a_damaged_segment_opens_for_verification(
    tmp_path: Path, where: Callable[[Path], int]
) -> None:
    """As with damage inside journal.log, a read-only handle still opens (no repair is
    attempted), so that verification can name the damage."""
    store_dir = tmp_path / "store"
    _sealed_store(store_dir)
    victim = _segments(store_dir)[1]
    _flip(victim, where(victim))
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reports_segment(reader, victim)


def test_a_deleted_segment_fails_verification(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    _sealed_store(store_dir)
    _segments(store_dir)[1].unlink()
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader)
    assert not report.ok


# -- 5. redaction inside a segment --------------------------------------------------------------
def test_redacting_a_sealed_payload_rewrites_its_segment(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    secret_text = "my card is 4111 1111 1111 1111"
    with _open(store_dir) as store:
        secret = store.append("secret", "run.start", payload={"prompt": secret_text})
        appended = _append_runs(store, 40)
        assert secret.payload is not None
        holding = [path for path in _segments(store_dir) if b"4111 1111" in _segment_bytes(path)]
        assert len(holding) == 1 and holding[0].name == segment_name(0)
        early_reader = DirectoryStore(store_dir, read_only=True)
        # Read once, so that the reader holds the segment's frame decompressed.
        assert early_reader.get_payload(secret.payload) == {"prompt": secret_text}
        store.append(ADMIN_RUN, REDACTION_KIND, meta={"payload": secret.payload, "reason": "PII"})
        assert store.erase_payload(secret.payload)
        with early_reader, pytest.raises(PayloadRedactedError):
            early_reader.get_payload(secret.payload)
        assert not any(b"4111 1111" in _segment_bytes(path) for path in _segments(store_dir))
        assert b"4111 1111" not in (store_dir / "journal.log").read_bytes()
        with pytest.raises(PayloadRedactedError):
            store.get_payload(secret.payload)
        assert store.payload_state(secret.payload) == "redacted"
        _assert_reads_back(store, appended)
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert reader.payload_state(secret.payload) == "redacted"
        with pytest.raises(PayloadRedactedError):
            reader.get_payload(secret.payload)
        report = verify_store(reader, compare_index=True)
    assert report.ok, report.issue
    assert report.redacted == 1


def test_a_handle_redacts_a_payload_another_handle_sealed_since_it_looked(tmp_path: Path) -> None:
    """The redacting handle never seals and opened before any segment existed; another
    handle seals the payload, whose record lies in the segment's last block (which sealing
    leaves allocated in journal.log, beside the redacting handle's own last entry). The
    erase must rewrite the segment, not blank the shadowed copy in journal.log and leave
    the payload readable."""
    store_dir = tmp_path / "store"
    secret_text = "my card is 4111 1111 1111 1111"
    with _open(store_dir, seal_bytes=None) as redactor, _open(store_dir, seal_bytes=SEAL) as sealer:
        appended: Appended = [
            (sealer.append("fill", "run.start", payload={"n": 0}, meta={"status": "running"}), {"n": 0})
        ]
        while _journal_end(store_dir) < SEAL - 250:  # small entries: never past SEAL
            payload = {"n": len(appended)}
            appended.append((sealer.append("fill", "effect", payload=payload), payload))
        # The redacting handle (which never seals) carries the journal past SEAL: its data
        # ends in what will be the segment's last block, which sealing keeps allocated.
        mine = redactor.append("mine", "run.start", payload={"mine": "m" * 400})
        assert not _segments(store_dir) and _journal_end(store_dir) > SEAL
        secret = sealer.append("secret", "run.start", payload={"prompt": secret_text, "pad": "p" * 700})
        assert secret.payload is not None
        assert [path.name for path in _segments(store_dir)] == [segment_name(0)]  # the secret's commit sealed
        assert b"4111 1111" in _segment_bytes(_segments(store_dir)[0])
        redactor.append(ADMIN_RUN, REDACTION_KIND, meta={"payload": secret.payload, "reason": "PII"})
        assert redactor.erase_payload(secret.payload)
        assert not any(b"4111 1111" in _segment_bytes(path) for path in _segments(store_dir))
        with pytest.raises(PayloadRedactedError):
            sealer.get_payload(secret.payload)
        assert redactor.entry_at(mine.seq) == mine
        _assert_reads_back(sealer, appended)
    with DirectoryStore(store_dir, read_only=True) as reader, pytest.raises(PayloadRedactedError):
        reader.get_payload(secret.payload)
    _assert_verifies(store_dir)


def _journal_end(store_dir: Path) -> int:
    journal = open_journal(store_dir)
    try:
        return data_end(journal)
    finally:
        journal.close()


# -- 6. crash states of sealing -----------------------------------------------------------------
def _leftover_temporaries(store_dir: Path) -> Appended:
    """A crash while a segment was being written (the next one, or the rewrite of the first
    by a redaction): their temporary files, half written."""
    appended = _sealed_store(store_dir)
    logical = _logical_journal(store_dir)
    last = _segments(store_dir)[-1]
    start = int(last.name.removesuffix(".seg"), 16) + len(_segment_bytes(last))
    end = logical.rindex(b"\n", start, len(logical) - 1) + 1
    first = _segments(store_dir)[0]
    for at, data in ((start, logical[start:end]), (0, _segment_bytes(first))):
        blob = encode_segment(at, data)
        (store_dir / SEALED_DIR / (segment_name(at) + ".tmp")).write_bytes(blob[: len(blob) // 2])
    return appended


def _published_not_punched(store_dir: Path) -> Appended:
    """A crash after a segment was published and before its blocks were punched."""
    with _open(store_dir, seal_bytes=None) as store:
        appended = _append_runs(store, 40)
    journal = (store_dir / "journal.log").read_bytes()
    end = journal.index(b"\n", len(journal) // 2) + 1
    (store_dir / SEALED_DIR).mkdir(exist_ok=True)  # a writer's open creates it
    (store_dir / SEALED_DIR / segment_name(0)).write_bytes(encode_segment(0, journal[:end]))
    return appended


def _sealed_normally(store_dir: Path) -> Appended:
    return _sealed_store(store_dir)


@pytest.mark.parametrize(
    "build",
    [_leftover_temporaries, _published_not_punched, _sealed_normally],
    ids=["leftover-tmp", "published-not-punched", "sealed"],
)
def test_every_crash_state_of_sealing_reads_verifies_and_seals_on(
    tmp_path: Path, build: Callable[[Path], Appended]
) -> None:
    store_dir = tmp_path / "store"
    appended = build(store_dir)
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)
        report = verify_store(reader, compare_index=True)
    assert report.ok, report.issue
    segments_before = _segments(store_dir)
    with DirectoryStore(store_dir, seal_bytes=SEAL) as writer:
        _assert_reads_back(writer, appended)
        appended += _append_runs(writer, 30, prefix="after")
        assert writer.seal_error is None
    assert len(_segments(store_dir)) > len(segments_before)
    assert not list((store_dir / SEALED_DIR).glob("*.tmp"))
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)
    _assert_verifies(store_dir)
    assert _logical_journal(store_dir).count(b"\n") >= len(appended)


# -- 7. another process seals under an open handle ---------------------------------------------
def _child_command(*args: str | Path | int) -> list[str]:
    return [sys.executable, "-m", "tests.storage._multiprocess_children", *map(str, args)]


def _child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def _acked_lines(lines: list[str]) -> list[list[str]]:
    return [line.split(" ") for line in lines if line.startswith("ACK ")]


def _run_sealing_child(store_dir: Path, runs: int) -> list[list[str]]:
    """Another process appends ``runs`` runs of six entries, sealing every :data:`SEAL`
    bytes; returns its acknowledgements, ``[ACK, seq, hash, run, payload]``."""
    done = subprocess.run(
        _child_command("sealing", store_dir, "c", runs, SEAL),
        cwd=REPO,
        env=_child_env(),
        capture_output=True,
        timeout=_PATIENCE_S,
        check=False,
    )
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0 and "DONE" in lines, done.stderr.decode()
    assert not any(line.startswith("SEAL-ERROR") for line in lines), lines
    acked = _acked_lines(lines)
    assert len(acked) == runs * 6
    return acked


def _assert_reads_child(store: DirectoryStore, acked: list[list[str]]) -> None:
    for _, seq, digest, run, payload in acked:
        assert store.entry_at(int(seq)).hash == digest
        assert store.get_payload(payload)["run"] == run
    for run in {parts[3] for parts in acked}:
        chain = [entry.hash for entry in store.entries(run)]
        assert chain[: sum(1 for parts in acked if parts[3] == run)] == [
            parts[2] for parts in acked if parts[3] == run
        ]


def test_a_handle_opened_before_another_process_sealed_reads_and_appends(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with _open(store_dir) as writer:
        mine = [writer.append("mine", "run.start", payload={"mine": 0}, meta={"status": "running"})]
        mine += [
            writer.append("mine", "effect", payload={"mine": n, "pad": "m" * 500})
            for n in range(1, 6)
        ]
        with DirectoryStore(store_dir, read_only=True) as early_reader:
            assert not _segments(store_dir)
            acked = _run_sealing_child(store_dir, 20)
            # The child sealed from offset 0: this process's entries now lie in segments,
            # their blocks punched out of journal.log under both open handles.
            assert _segments(store_dir)[0].name == segment_name(0)
            assert _first_data(store_dir) > 0
            _assert_reads_child(early_reader, acked)
            assert early_reader.entries("mine") == mine
            assert early_reader.get_payload(mine[5].payload or "") == {"mine": 5, "pad": "m" * 500}

        own = writer.append("mine", "effect", payload={"after": "the child"})
        assert (own.i, own.prev) == (6, mine[-1].hash)
        theirs = writer.append("c-0", "effect", payload={"after": "the child, in its run"})
        assert (theirs.i, theirs.prev) == (
            6,
            next(parts[2] for parts in reversed(acked) if parts[3] == "c-0"),
        )
        extra = _append_runs(writer, 10, prefix="late")
        assert writer.seal_error is None
        _assert_reads_child(writer, acked)
        assert writer.entries("mine") == [*mine, own]
        assert writer.entries("c-0")[-1] == theirs
        assert writer.get_payload(mine[0].payload or "") == {"mine": 0}
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_child(reader, acked)
        assert reader.entries("mine") == [*mine, own]
        assert reader.entries("c-0")[-1] == theirs
        _assert_reads_back(reader, extra)
    _assert_verifies(store_dir)


def test_a_handle_that_knows_segments_notices_newer_ones_without_asking_the_file_system(
    tmp_path: Path,
) -> None:
    """The handle has segments (so it reads the generation count instead of asking the file
    system whether a NUL byte is a hole); another process then appends past this handle's
    end and seals it, freeing the blocks where this handle's next commit probes. The
    handle must see the count moved, list the segments again, and continue the chain."""
    store_dir = tmp_path / "store"
    with _open(store_dir) as writer:
        mine = _append_runs(writer, 30, prefix="mine")
        assert _segments(store_dir)  # this handle sealed: the count is mapped
        sealed_before = len(_segments(store_dir))
        acked = _run_sealing_child(store_dir, 30)
        assert len(_segments(store_dir)) > sealed_before
        end_of_mine = max(entry.seq for entry, _ in mine)
        assert int(acked[0][1]) == end_of_mine + 1  # the child appended right after this handle
        after = writer.append("after", "run.start", payload={"after": "the child sealed"}, meta={"status": "running"})
        assert after.seq == int(acked[-1][1]) + 1
        theirs = writer.append("c-0", "effect", payload={"after": "the child, in its run"})
        assert (theirs.i, theirs.prev) == (6, next(parts[2] for parts in reversed(acked) if parts[3] == "c-0"))
        _assert_reads_child(writer, acked)
        _assert_reads_back(writer, mine)
    _assert_verifies(store_dir)


def test_a_handle_that_listed_newer_segments_before_its_commit_still_catches_up(tmp_path: Path) -> None:
    """As above, but this handle reads one of the other process's entries first, which
    makes it list the newer segments (and note the generation count) before its next
    commit: the commit must still see that its end now lies inside a segment, take in what
    the other process appended, and never write into the freed blocks."""
    store_dir = tmp_path / "store"
    with _open(store_dir) as writer:
        mine = _append_runs(writer, 30, prefix="mine")
        acked = _run_sealing_child(store_dir, 30)
        first_of_child = int(acked[0][1])
        assert writer.entry_at(first_of_child).hash == acked[0][2]  # lists the segments again
        after = writer.append("after", "run.start", payload={"after": "the read"}, meta={"status": "running"})
        assert after.seq == int(acked[-1][1]) + 1
        _assert_reads_child(writer, acked)
        _assert_reads_back(writer, mine)
        assert writer.entry_at(after.seq) == after
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert reader.entry_at(after.seq) == after
    _assert_verifies(store_dir)


# -- 8. kill -9 of a writer that seals often ----------------------------------------------------
def _wait_for_line(out: Path, prefix: str, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _PATIENCE_S
    while not any(line.startswith(prefix) for line in out.read_text().splitlines()):
        assert child.poll() is None, f"the child exited ({child.returncode}) before {prefix}"
        assert time.monotonic() < deadline, f"the child never printed {prefix}"
        time.sleep(0.005)


def _kill_at_random(
    store_dir: Path, trial: int, rng: random.Random, tmp_path: Path
) -> dict[int, str]:
    out, err = tmp_path / f"out-{trial}", tmp_path / f"err-{trial}"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        child = subprocess.Popen(
            _child_command("sealing-forever", store_dir, trial, 4096),
            cwd=REPO,
            env=_child_env(),
            stdout=stdout,
            stderr=stderr,
        )
    try:
        _wait_for_line(out, "ACK", child)
        time.sleep(rng.uniform(0.05, 0.6))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=_PATIENCE_S)
    assert child.returncode == -signal.SIGKILL, err.read_text()
    assert "Traceback" not in err.read_text()
    acked = {}
    for parts in _acked_lines(out.read_text().splitlines()):
        if len(parts) == 3 and len(parts[2]) == 64:
            acked[int(parts[1])] = parts[2]
    return acked


def test_kill_minus_nine_while_sealing_loses_nothing_acknowledged(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    DirectoryStore(store_dir).close()
    rng = random.Random(38)
    acked: dict[int, str] = {}
    for trial in range(10):
        acked.update(_kill_at_random(store_dir, trial, rng, tmp_path))
    assert len(acked) > 50
    assert len(_segments(store_dir)) >= 2
    with DirectoryStore(store_dir, seal_bytes=4096) as store:
        present = {entry.seq: entry.hash for entry in store.iter_entries()}
        lost = {seq: digest for seq, digest in acked.items() if present.get(seq) != digest}
        assert not lost, f"acknowledged entries lost: {sorted(lost)[:10]}"
        store.append("after-the-kills", "run.start", payload={"n": 1})
    _assert_verifies(store_dir)


def test_two_writers_sealing_under_a_reader_and_kill_minus_nine_lose_nothing(tmp_path: Path) -> None:
    """Two writer processes append to one store and seal every 4 KiB, each catching up
    with what the other appended and sealed (its end freed under it), while a reader keeps
    one handle open across all of it and a verifier checks the store again and again;
    both writers are killed at random instants, round after round. Every acknowledged
    entry is kept, the reader never fails, and every verification passes."""
    store_dir = tmp_path / "store"
    DirectoryStore(store_dir).close()
    rng = random.Random(47)
    stop = tmp_path / "stop"
    watchers = [
        subprocess.Popen(
            _child_command(mode, store_dir, stop), cwd=REPO, env=_child_env(),
            stdout=(tmp_path / f"{mode}.out").open("wb"), stderr=subprocess.STDOUT,
        )
        for mode in ("reader-forever", "verify")
    ]
    acked: dict[int, str] = {}
    try:
        for round_ in range(5):
            outs = [tmp_path / f"w{round_}-{side}.out" for side in range(2)]
            writers = [
                subprocess.Popen(
                    # The second writer pauses after each run: it falls behind, and the first
                    # seals past its end and frees the blocks there before it commits again.
                    _child_command("sealing-forever", store_dir, f"{round_}x{side}", 4096, 40 * side),
                    cwd=REPO, env=_child_env(), stdout=out.open("wb"), stderr=subprocess.STDOUT,
                )
                for side, out in enumerate(outs)
            ]
            try:
                for out, writer in zip(outs, writers, strict=True):
                    _wait_for_line(out, "ACK", writer)
                time.sleep(rng.uniform(0.2, 0.7))
                writers[0].send_signal(signal.SIGKILL)
                time.sleep(rng.uniform(0.0, 0.2))
            finally:
                for writer in writers:
                    writer.send_signal(signal.SIGKILL)
                    writer.wait(timeout=_PATIENCE_S)
            for out in outs:
                text = out.read_text()
                assert "Traceback" not in text, text[-2000:]
                for parts in _acked_lines(text.splitlines()):
                    if len(parts) == 3 and len(parts[2]) == 64:
                        assert acked.setdefault(int(parts[1]), parts[2]) == parts[2]
    finally:
        stop.touch()
        for watcher in watchers:
            watcher.wait(timeout=_PATIENCE_S)
    assert len(acked) > 100 and len(_segments(store_dir)) >= 5
    reader_out = (tmp_path / "reader-forever.out").read_text()
    assert "ERR" not in reader_out and "READ" in reader_out, reader_out[-2000:]
    verifier_out = (tmp_path / "verify.out").read_text()
    assert "ISSUE" not in verifier_out and "VERIFIED" in verifier_out, verifier_out[-2000:]
    with DirectoryStore(store_dir, seal_bytes=4096) as store:
        present = {entry.seq: entry.hash for entry in store.iter_entries()}
        lost = {seq: digest for seq, digest in acked.items() if present.get(seq) != digest}
        assert not lost, f"acknowledged entries lost: {sorted(lost)[:10]}"
    _assert_verifies(store_dir)


# -- 9. sealing disabled ------------------------------------------------------------------------
def test_no_segments_when_sealing_is_disabled(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with _open(store_dir, seal_bytes=None) as store:
        # More than the default threshold, so that a default in place of None would seal.
        for number in range(45):
            store.append(
                f"big{number}",
                "effect",
                payload={"n": number, "text": f"{number} " * 12000},
                durable=False,
            )
        store.sync()
        assert store.seal_error is None
    assert os.path.getsize(store_dir / "journal.log") > (1 << 20)
    assert not _segments(store_dir)
    assert _first_data(store_dir) == 0
    _assert_verifies(store_dir)


# -- 10. a seal that fails ----------------------------------------------------------------------
def test_a_failing_seal_is_kept_aside_and_the_append_succeeds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store_dir = tmp_path / "store"
    with _open(store_dir) as store, caplog.at_level(logging.WARNING, logger="tracelock.storage"):
        shutil.rmtree(store_dir / SEALED_DIR)  # made, empty, by the writer's open
        (store_dir / SEALED_DIR).write_bytes(b"not a folder")
        appended = _append_runs(store, 40)
        assert store.seal_error is not None
        # Said where an operator looks, once per attempt: the seal is retried each seal_bytes.
        warnings = [record for record in caplog.records if record.name == "tracelock.storage"]
        assert warnings and all(record.levelno == logging.WARNING for record in warnings)
        assert str(store_dir) in warnings[0].getMessage() and store.seal_error in warnings[-1].getMessage()
        assert "nothing is lost" in warnings[0].getMessage()
        last = store.append("last", "run.start", payload={"still": "works"})
        assert store.seal_error is not None
        assert store.entry_at(last.seq) == last
        _assert_reads_back(store, appended)
    assert (store_dir / SEALED_DIR).read_bytes() == b"not a folder"
    assert _first_data(store_dir) == 0
    # Once the obstacle is gone, the next writer seals what the failing one could not.
    (store_dir / SEALED_DIR).unlink()
    with _open(store_dir) as store:
        _assert_reads_back(store, appended)
        appended += _append_runs(store, 4, prefix="after")
        assert store.seal_error is None
    assert _segments(store_dir) and _first_data(store_dir) > 0
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)
    _assert_verifies(store_dir)


# -- the store format ------------------------------------------------------------------------------
def _mark_version(store_dir: Path, version: int) -> None:
    marker = json.loads((store_dir / "store.json").read_bytes())
    (store_dir / "store.json").write_text(json.dumps({**marker, "version": version}) + "\n")


def _version(store_dir: Path) -> int:
    version = json.loads((store_dir / "store.json").read_bytes())["version"]
    assert isinstance(version, int)
    return version


@pytest.mark.parametrize(
    ("seal_bytes", "version"), [(None, 1), (SEAL, 2)], ids=["unsealed", "sealed"]
)
def test_a_version_1_store_is_marked_version_2_when_first_sealed(
    tmp_path: Path, seal_bytes: int | None, version: int
) -> None:
    """A tracelock that predates segments would read punched blocks as damage: the store is
    marked version 2 by the seal that first needs it, and only then."""
    store_dir = tmp_path / "store"
    DirectoryStore(store_dir).close()
    _mark_version(store_dir, 1)
    with _open(store_dir, seal_bytes=seal_bytes) as store:
        appended = _append_runs(store, 40)
        assert store.seal_error is None
    assert _version(store_dir) == version
    assert bool(_segments(store_dir)) == (version == 2)
    with DirectoryStore(store_dir, read_only=True) as reader:
        _assert_reads_back(reader, appended)
    _assert_verifies(store_dir)


# -- store copy ----------------------------------------------------------------------------------
def test_a_sealed_store_copies_entry_for_entry_and_its_copy_seals_too(tmp_path: Path) -> None:
    """``store copy`` reads the source through its segments; the copy, a fresh directory
    store, holds the same entries and payloads, seals its own journal, and verifies."""
    source_dir, copy_dir = tmp_path / "source", tmp_path / "copy"
    appended = _sealed_store(source_dir)
    clock = ReplayClock()
    with DirectoryStore(source_dir, read_only=True) as source, DirectoryStore(
        copy_dir, clock=clock, store_id=lambda: "the-copy", seal_bytes=SEAL
    ) as copy:
        copied = copy_store(source, copy, clock)
        assert copied == len(appended)
        report = verify_copy(source, copy, copied)
        assert not report.mismatches and report.source_root == report.copy_root
        _assert_reads_back(copy, appended)
    assert _segments(copy_dir)
    assert _logical_journal(copy_dir) == _logical_journal(source_dir)
    _assert_verifies(copy_dir)


# -- a long unsealed journal ---------------------------------------------------------------------
def test_a_long_unsealed_journal_is_sealed_a_bounded_segment_per_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written without sealing (as before segments existed) is not sealed in one
    stall by the first writer that seals: each commit seals at most MAX_SEGMENT_BYTES, cut
    after a whole record, and a record longer than that goes whole into its own segment."""
    monkeypatch.setattr(sealed, "MAX_SEGMENT_BYTES", 8192)
    store_dir = tmp_path / "store"
    with _open(store_dir, seal_bytes=None) as store:
        appended = _append_runs(store, 30)
        huge = store.append("huge", "run.start", payload={"text": "x" * 30000}, meta={"status": "running"})
        appended.append((huge, {"text": "x" * 30000}))
        appended += _append_runs(store, 10, prefix="after")
    backlog = _logical_journal(store_dir)
    assert not _segments(store_dir)
    with _open(store_dir, seal_bytes=4096) as store:
        commits = 0
        while not _ranges(store_dir) or _ranges(store_dir)[-1][1] < len(backlog):
            assert commits < 500, "the backlog is never sealed"
            store.append("tick", "effect" if commits else "run.start", payload={"tick": commits})
            commits += 1
        assert store.seal_error is None
        _assert_reads_back(store, appended)
    ranges = _ranges(store_dir)
    # One segment per commit, never more than the bound, except the one that holds the
    # record longer than the bound, whole.
    assert len(ranges) >= (len(backlog) - 31000) // 8192
    assert len(ranges) - 1 <= commits <= len(ranges) + 1
    long_ones = [(start, end) for start, end in ranges if end - start > 8192]
    assert len(long_ones) == 1
    start, end = long_ones[0]
    assert backlog[start:end].count(b"\n") == 1 and b"x" * 30000 in backlog[start:end]
    assert _logical_journal(store_dir)[: len(backlog)] == backlog
    _assert_verifies(store_dir)


def _ranges(store_dir: Path) -> list[tuple[int, int]]:
    """(start, end) of every segment, from their headers."""
    return [(start, end) for start, end in (_segment_range(path) for path in _segments(store_dir))]


def _segment_range(path: Path) -> tuple[int, int]:
    segment = decode_segment(path, path.read_bytes())[0]
    return segment.start, segment.end


def test_a_header_counting_more_frames_than_the_file_holds_fails_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frame count is read before the table: a damaged one (here 2**32 - 1 frames, a
    16 GiB table) fails the open as the damage it is, and is never read."""
    store_dir = tmp_path / "store"
    _sealed_store(store_dir)
    victim = _segments(store_dir)[1]
    blob = bytearray(victim.read_bytes())
    struct.pack_into("<I", blob, 28, 0xFFFFFFFF)  # magic 8, start 8, end 8, frame size 4, count
    victim.write_bytes(bytes(blob))
    asked: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        asked.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(sealed.os, "pread", pread)
    with pytest.raises(SegmentCorruptError, match="frames cannot hold"):
        DirectoryStore(store_dir, read_only=True)
    assert asked and max(asked) < 1 << 20  # not the table the count implies
