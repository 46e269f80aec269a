"""Journal verification: recompute every hash and check every rule, report the first failure.

Verification streams the journal once and keeps only bounded state: the heads of runs still
open, a bounded cache of payload hashes seen (older ones are looked up through the index and
re-hashed from the file), and the set of redacted payloads.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tracelock.core.canonical import dumps
from tracelock.core.entry import (
    ADMIN_RUN,
    ENTRY_LINE,
    MAX_INTEGER,
    REDACTION_KIND,
    TERMINAL_KINDS,
    ChainChecker,
    ChainIssue,
    EntryFormatError,
    parse_entry,
)
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import JournalCorruptError
from tracelock.storage.journal_file import ENTRY, PAYLOAD, REDACTED, Record, classify

ADMIN_RUN_BYTES = ADMIN_RUN.encode()
REDACTION_KIND_BYTES = REDACTION_KIND.encode()
(TERMINAL_KIND_BYTES,) = (kind.encode() for kind in TERMINAL_KINDS)

__all__ = ["VerifyReport", "verify_run", "verify_store"]

_SEEN_CACHE = 1 << 16


@dataclass
class VerifyReport:
    """The outcome of a verification: ``ok`` and, when not, the first problem found."""

    scope: str
    entries: int = 0
    payloads: int = 0
    redacted: int = 0
    runs: int = 0
    issue: ChainIssue | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.issue is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "scope": self.scope,
            "entries": self.entries,
            "payloads": self.payloads,
            "redacted": self.redacted,
            "runs": self.runs,
            "issue": None if self.issue is None else self.issue.to_dict(),
            "notes": list(self.notes),
        }


def _issue(code: str, seq: int, run: str | None, message: str) -> ChainIssue:
    return ChainIssue(code, seq, run, message)


class _PayloadTracker:
    """Which payload hashes exist before the current position of the scan."""

    def __init__(self, store: DirectoryStore) -> None:
        self._store = store
        self._recent: OrderedDict[bytes, bool] = OrderedDict()
        self.redacted: set[str] = set()

    def add(self, digest: bytes, redacted: bool) -> None:
        self._recent[digest] = redacted
        if len(self._recent) > _SEEN_CACHE:
            self._recent.popitem(last=False)
        if redacted:
            self.redacted.add(digest.hex())

    def state(self, digest_hex: str, before: int) -> str:
        digest = bytes.fromhex(digest_hex)
        if digest in self._recent:
            self._recent.move_to_end(digest)
            return "redacted" if self._recent[digest] else "present"
        # Older than the cache: find it through the index and check it against the file,
        # so a wrong index cannot make a missing payload look present.
        return self._store.payload_state_before(digest_hex, before)


def verify_store(
    store: DirectoryStore, *, progress: Callable[[int], None] | None = None
) -> VerifyReport:
    """Verify the whole journal: record shapes, canonical form, seq numbering, every run's
    chain, every payload against its hash, every reference to a payload, and that every
    erased payload has a recorded redaction.

    The loop below is the fast path: it checks each line with one pattern match and one
    hash, keeping only bytes. The first record it cannot accept is handed to the detailed
    checker (``_check_record``), which states exactly what is wrong.
    """
    report = VerifyReport(scope="store")
    store.flush()  # what this handle appended is in the file before it is read
    heads: dict[bytes, tuple[int, bytes]] = {}
    recent: dict[bytes, bool] = {}  # payload hash (hex bytes) -> redacted?
    erased: set[bytes] = set()
    redactions: set[str] = set()
    next_seq = 0
    match = ENTRY_LINE.fullmatch
    sha256 = hashlib.sha256
    offset = 0
    pending = b""
    with open(store.journal_path, "rb") as journal:
        while chunk := journal.read(1 << 22):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                first = line[:1]
                ok = False
                if first == b"{":
                    found = match(line)
                    if found is not None:
                        i_text, kind, meta_text, payload, prev, run, seq_text, ts_text, version = found.groups()
                        seq, i = int(seq_text), int(i_text)
                        head = heads.get(run)
                        ok = (
                            version == b"1"
                            and seq == next_seq
                            and max(seq, i, int(ts_text)) <= MAX_INTEGER
                            and (
                                (i == 0 and prev is None)
                                if head is None
                                else (i == head[0] + 1 and prev == head[1])
                            )
                        )
                        if ok and meta_text is not None:
                            meta = orjson.loads(meta_text)
                            ok = isinstance(meta, dict) and bool(meta) and dumps(meta) == meta_text
                            if ok and kind == REDACTION_KIND_BYTES and run == ADMIN_RUN_BYTES:
                                target = meta.get("payload")
                                if isinstance(target, str):
                                    redactions.add(target)
                        if ok and payload is not None:
                            known = recent.pop(payload, None)
                            if known is None:
                                state = store.payload_state_before(payload.decode(), offset)
                                ok = state != "missing"
                                known = state == "redacted"
                            if ok:
                                _remember(recent, payload, known)  # most recently used last
                        if ok:
                            digest = sha256(line).hexdigest().encode()
                            if kind == TERMINAL_KIND_BYTES:
                                heads.pop(run, None)
                            else:
                                heads[run] = (i, digest)
                            next_seq = seq + 1
                            report.entries += 1
                            if i == 0:
                                report.runs += 1
                            if progress is not None and report.entries % 100_000 == 0:
                                progress(report.entries)
                elif first == b"=":
                    ok = len(line) >= 67 and line[65:66] == b" " and sha256(line[66:]).hexdigest().encode() == line[1:65]
                    if ok:
                        _remember(recent, line[1:65], False)
                        report.payloads += 1
                elif first == b"-":
                    ok = len(line) >= 67 and line[65:66] == b" " and not line[66:].strip(b" ")
                    if ok:
                        _remember(recent, line[1:65], True)
                        erased.add(line[1:65])
                        report.redacted += 1
                if not ok:
                    report.issue = _explain(store, Record(offset, classify(line) or "garbage", line), next_seq, heads, recent, redactions)
                    return report
                offset += len(line) + 1
    if pending:
        report.notes.append(
            f"incomplete tail of {len(pending)} bytes at byte {offset} is not part of the "
            "journal (an unacknowledged write; the next writer to open the store cuts it)"
        )
    unexplained = sorted(digest.decode() for digest in erased if digest.decode() not in redactions)
    if unexplained:
        report.issue = _issue(
            "PAYLOAD_ERASED_WITHOUT_REDACTION",
            next_seq,
            None,
            f"payload {unexplained[0]} was erased but no redaction entry records it",
        )
    return report


def _remember(recent: dict[bytes, bool], digest: bytes, redacted: bool) -> None:
    recent[digest] = redacted
    if len(recent) > _SEEN_CACHE:
        del recent[next(iter(recent))]  # the oldest: later lookups go through the index


def _explain(
    store: DirectoryStore,
    record: Record,
    next_seq: int,
    heads: dict[bytes, tuple[int, bytes]],
    recent: dict[bytes, bool],
    redactions: set[str],
) -> ChainIssue:
    """The precise reason a record failed the fast path."""
    checker = ChainChecker.resume(
        next_seq, {run.decode(): (i, digest.decode()) for run, (i, digest) in heads.items()}
    )
    tracker = _PayloadTracker(store)
    for digest, redacted in recent.items():
        tracker.add(bytes.fromhex(digest.decode()), redacted)
    issue = _check_record(record, checker, tracker, set(redactions))
    return issue or _issue(
        "JOURNAL_MALFORMED_RECORD", next_seq, None, f"record at byte {record.offset} is not valid"
    )


def _check_record(
    record: Record,
    checker: ChainChecker,
    payloads: _PayloadTracker,
    redactions: set[str],
) -> ChainIssue | None:
    seq = checker.next_seq
    if record.kind == PAYLOAD:
        digest = record.data[1:65]
        if hashlib.sha256(record.data[66:]).hexdigest().encode() != digest:
            return _issue(
                "PAYLOAD_HASH_MISMATCH",
                seq,
                None,
                f"payload record at byte {record.offset} does not match its hash "
                f"{digest.decode(errors='replace')}",
            )
        payloads.add(bytes.fromhex(digest.decode()), redacted=False)
        return None
    if record.kind == REDACTED:
        if record.data[66:].strip(b" "):
            return _issue(
                "PAYLOAD_HASH_MISMATCH",
                seq,
                None,
                f"redacted payload record at byte {record.offset} still holds data",
            )
        payloads.add(bytes.fromhex(record.data[1:65].decode()), redacted=True)
        return None
    if record.kind != ENTRY:
        return _issue(
            "JOURNAL_MALFORMED_RECORD", seq, None, f"unrecognized record at byte {record.offset}"
        )
    try:
        entry = parse_entry(record.data)
    except EntryFormatError as exc:
        return _issue(
            "JOURNAL_MALFORMED_ENTRY", seq, None, f"entry at byte {record.offset}: {exc.message}"
        )
    issue = checker.check(entry)
    if issue is not None:
        return issue
    if entry.payload is not None:
        state = payloads.state(entry.payload, record.offset)
        if state == "missing":
            return _issue(
                "PAYLOAD_MISSING",
                entry.seq,
                entry.run,
                f"run {entry.run} index {entry.i} references payload {entry.payload}, "
                "which is not stored before it",
            )
    if entry.run == ADMIN_RUN and entry.kind == REDACTION_KIND and entry.meta:
        target = entry.meta.get("payload")
        if isinstance(target, str):
            redactions.add(target)
    return None


def verify_run(store: DirectoryStore, run: str) -> VerifyReport:
    """Verify one run: its chain from its first entry to its last, and its payloads."""
    report = VerifyReport(scope=f"run {run}")
    entries = store.entries(run)
    previous_hash: str | None = None
    previous_seq = -1
    for position, entry in enumerate(entries):
        problem: str | None = None
        if entry.i != position:
            problem = f"expected index {position}, found {entry.i}"
        elif entry.prev != previous_hash:
            problem = "prev does not match the hash of the run's previous entry"
        elif entry.seq <= previous_seq:
            problem = f"seq {entry.seq} does not follow seq {previous_seq}"
        if problem is not None:
            report.issue = _issue("JOURNAL_CHAIN_BROKEN", entry.seq, run, f"run {run}: {problem}")
            return report
        if entry.payload is not None:
            state = store.payload_state(entry.payload)
            if state == "missing":
                report.issue = _issue(
                    "PAYLOAD_MISSING",
                    entry.seq,
                    run,
                    f"run {run} index {entry.i} references payload {entry.payload}, "
                    "which is not stored",
                )
                return report
            if state == "redacted":
                report.redacted += 1
            else:
                try:
                    store.get_payload_bytes(entry.payload)
                except JournalCorruptError as exc:
                    report.issue = _issue(
                        "PAYLOAD_HASH_MISMATCH", entry.seq, run, f"run {run}: {exc}"
                    )
                    return report
                report.payloads += 1
        previous_hash = entry.hash
        previous_seq = entry.seq
        report.entries += 1
    report.runs = 1
    return report
