"""Verification of a PostgreSQL store: every row re-read and every hash recomputed.

The directory store's verification reads its raw journal file; here the entries are rows,
and each row's ``line`` (the canonical entry bytes) is what is trusted, as the file's
records are. One pass in ``seq`` order, in batches, with bounded state (the heads of open
runs, the summaries of runs not yet compared with their rows):

* ``seq`` is dense from 0 (``JOURNAL_SEQ_GAP``), and the head's ``next_seq`` says how many
  entries there are;
* each line parses as a canonical entry (``JOURNAL_MALFORMED_ENTRY``) and follows its run's
  chain: index, ``prev`` = the hash of the run's previous line (``JOURNAL_CHAIN_BROKEN``);
* every payload an entry names is stored (``PAYLOAD_MISSING``); every stored payload's bytes
  hash to its key (``PAYLOAD_HASH_MISMATCH``); every erased one has a ``payload.redact``
  entry (``PAYLOAD_ERASED_WITHOUT_REDACTION``);
* each run's steps form one sequence (docs/spec.md 3.9, ``JOURNAL_STEP_SEQUENCE_BROKEN``),
  read from the payloads of its step entries;
* what the other columns state about the lines, like the directory store's index, must
  agree with them, reported after the lines themselves passed: a row's ``seq``, ``run`` and
  ``i`` columns, its ``leaf`` (the RFC 9162 leaf hash of the line, which the Merkle node
  table is built from), each run row (agent, parent, status, timestamps, count, first and
  last seq, last hash, closed), and the head (``STORE_INDEX_TAMPERED``).

``merkle`` receives the leaf hash of every line, recomputed (never the stored ``leaf``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from tracelock.core.entry import (
    ADMIN_RUN,
    REDACTION_KIND,
    TERMINAL_KINDS,
    ChainChecker,
    ChainIssue,
    Entry,
    EntryFormatError,
    claimed_position,
    parse_entry,
)
from tracelock.core.merkle import leaf_hash
from tracelock.core.steps import STEP_KINDS, StepChecker
from tracelock.errors import StoreError
from tracelock.storage.merkle_stream import MerkleStream
from tracelock.storage.run_fold import RunRow, row_difference
from tracelock.storage.verify_report import INDEX_TAMPERED, VerifyReport

if TYPE_CHECKING:
    from tracelock.storage.postgres.store import PostgresStore

__all__ = ["verify_postgres_store"]

_BATCH = 4096
_PAYLOAD_BATCH = 1024
# Ended runs gathered before their rows are read and compared.
_RUN_BATCH = 512
_PROGRESS_EVERY = 100_000


def _issue(code: str, seq: int, run: str | None, message: str) -> ChainIssue:
    return ChainIssue(code, seq, run, message)


class _RunSummary:
    """What a run's entries state, as its row must: the first entry's agent and parent,
    the last status stated, and the first and last entries."""

    __slots__ = ("agent", "count", "first_seq", "first_ts", "last", "parent", "status")

    def __init__(self, entry: Entry) -> None:
        meta = entry.meta or {}
        agent, parent = meta.get("agent"), meta.get("parent")
        self.agent = agent if isinstance(agent, str) and entry.i == 0 else None
        self.parent = parent if isinstance(parent, str) and entry.i == 0 else None
        self.first_seq = entry.seq
        self.first_ts = entry.ts
        self.count = 0
        self.status: str | None = None
        self.last = entry

    def add(self, entry: Entry) -> None:
        self.count += 1
        self.last = entry
        status = (entry.meta or {}).get("status")
        if isinstance(status, str):
            self.status = status

    def row(self, run: str) -> RunRow:
        last = self.last
        return (
            run, self.agent, self.parent, self.status or "created", self.first_ts, last.ts,
            self.first_seq, last.seq, self.count, last.hash, int(last.kind in TERMINAL_KINDS),
        )


def _stated(row: tuple[Any, ...]) -> RunRow:
    """A run row of the store (run_rows' column order) in :data:`RunRow`'s order."""
    run, agent, parent, status, started, updated, entries, first_seq, last_seq, last_hash, closed = row
    return (
        str(run), agent, parent, str(status), int(started), int(updated), int(first_seq),
        int(last_seq), int(entries), str(last_hash), int(bool(closed)),
    )


class _Scan:
    def __init__(
        self,
        store: PostgresStore,
        progress: Callable[[int], None] | None,
        merkle: MerkleStream | None,
        steps: bool = True,
    ) -> None:
        self.store = store
        self.progress = progress
        self.next_progress = _PROGRESS_EVERY
        self.merkle = merkle
        self.report = VerifyReport(scope=f"store {store.location}")
        self.checker = ChainChecker()
        #: The step rule over the runs (None: not checked).
        self.steps: StepChecker | None = StepChecker() if steps else None
        self.runs: dict[str, _RunSummary] = {}
        self.chains = 0  # runs, and the admin chain: each has a run row
        self.ended: list[tuple[str, _RunSummary]] = []
        self.redactions: set[str] = set()
        self.known_payloads: set[str] = set()
        #: The first disagreement of the other columns with the lines (reported last).
        self.index_issue: ChainIssue | None = None
        #: The store's size when the pass began: what it verifies.
        self.end = 0

    def index_problem(self, seq: int, run: str | None, message: str) -> None:
        if self.index_issue is None:
            self.index_issue = _issue(
                INDEX_TAMPERED, seq, run,
                f"the store's tables contradict its entry lines, which passed: {message}. A row "
                "was altered in the database (the lines and their hashes are what is trusted)",
            )

    def entries(self) -> bool:
        """Every entry row up to the size the store had when the pass began."""
        store = self.store
        end = self.end = store.size()
        position = 0
        while position < end:
            rows = store.entry_rows(position, min(end, position + _BATCH))
            if not self.batch(rows):
                return False
            if len(rows) < min(end, position + _BATCH) - position:
                seq = self.checker.next_seq
                self.report.issue = _issue(
                    "JOURNAL_SEQ_GAP", seq, None,
                    f"expected seq {seq}, found no entry row (an entry was deleted)",
                )
                return False
            position += _BATCH
        return True

    def batch(self, rows: list[tuple[int, str, int, bytes, bytes]]) -> bool:
        report = self.report
        parsed: list[Entry] = []
        for seq, run, i, line, leaf in rows:
            expected = self.checker.next_seq
            if seq != expected:
                report.issue = _issue(
                    "JOURNAL_SEQ_GAP", expected, None,
                    f"expected seq {expected}, found {seq} (an entry was deleted)",
                )
                return False
            try:
                entry = parse_entry(line)
            except EntryFormatError as exc:
                claimed_run, claimed = claimed_position(line)
                where = "".join(
                    (
                        f" of run {claimed_run}" if claimed_run is not None else "",
                        f" (seq {claimed})" if claimed is not None and claimed != seq else "",
                    )
                )
                report.issue = _issue(
                    "JOURNAL_MALFORMED_ENTRY", seq, claimed_run, f"entry {seq}{where}: {exc.message}"
                )
                return False
            issue = self.checker.check(entry)
            if issue is not None:
                report.issue = issue
                return False
            if run != entry.run or i != entry.i:
                self.index_problem(seq, entry.run, f"the row of entry {seq} states run {run!r} index {i}; its line says run {entry.run!r} index {entry.i}")
            digest = leaf_hash(line)
            if leaf != digest:
                self.index_problem(seq, entry.run, f"the leaf hash stored with entry {seq} is not the hash of its line (the Merkle nodes are built from it)")
            if self.merkle is not None:
                self.merkle.add((digest,))
            parsed.append(entry)
        return self.payloads_named(parsed) and self.steps_follow(parsed) and self.fold(parsed)

    def payloads_named(self, entries: list[Entry]) -> bool:
        """Every payload the batch names is stored (present or erased)."""
        wanted = sorted({e.payload for e in entries if e.payload and e.payload not in self.known_payloads})
        states = self.store.payload_states(wanted) if wanted else {}
        for entry in entries:
            if entry.payload and entry.payload not in self.known_payloads and entry.payload not in states:
                self.report.issue = _issue(
                    "PAYLOAD_MISSING", entry.seq, entry.run,
                    f"run {entry.run} index {entry.i} references payload {entry.payload}, which is not stored",
                )
                return False
        if len(self.known_payloads) > 1 << 16:
            self.known_payloads.clear()
        self.known_payloads.update(states)
        return True

    def steps_follow(self, entries: list[Entry]) -> bool:
        """The step rule over the batch's entries, in order; the payloads of its step
        entries are read in one query (a payload that is erased, or whose bytes do not match
        its hash, which ``payload_rows`` reports, names a step the rule cannot see)."""
        checker = self.steps
        if checker is None:
            return True
        wanted = sorted({e.payload for e in entries if e.payload and e.kind in STEP_KINDS})
        found = self._payload_bytes(wanted) if wanted else {}
        for entry in entries:
            doc: Any = None
            if checker.wants_payload(entry) and entry.payload in found:
                try:
                    doc = orjson.loads(found[entry.payload])
                except orjson.JSONDecodeError:
                    doc = None
            issue = checker.check(entry, doc)
            if issue is not None:
                self.report.issue = issue
                return False
        return True

    def _payload_bytes(self, digests: list[str]) -> dict[str, bytes]:
        """The bytes of those of ``digests`` that are stored, not erased, and match their
        hash."""
        try:
            return self.store.get_payloads_bytes(digests)
        except StoreError:
            found: dict[str, bytes] = {}
            for digest in digests:
                try:
                    found[digest] = self.store.get_payload_bytes(digest)
                except StoreError:
                    continue
            return found

    def fold(self, entries: list[Entry]) -> bool:
        report = self.report
        for entry in entries:
            if entry.run == ADMIN_RUN and entry.kind == REDACTION_KIND and entry.meta:
                target = entry.meta.get("payload")
                if isinstance(target, str):
                    self.redactions.add(target)
            summary = self.runs.get(entry.run)
            if summary is None:
                summary = self.runs[entry.run] = _RunSummary(entry)
                self.chains += 1
                report.runs += entry.run != ADMIN_RUN  # the store's admin chain is not a run
            summary.add(entry)
            if entry.kind in TERMINAL_KINDS:
                self.ended.append((entry.run, self.runs.pop(entry.run)))
        report.entries += len(entries)
        if len(self.ended) >= _RUN_BATCH:
            self.compare_runs(self.ended)
            self.ended = []
        if self.progress is not None:
            while self.next_progress <= report.entries:
                self.progress(self.next_progress)
                self.next_progress += _PROGRESS_EVERY
        return True

    def compare_runs(self, summaries: list[tuple[str, _RunSummary]], *, open_runs: bool = False) -> None:
        if self.index_issue is not None or not summaries:
            return
        rows = {str(row[0]): _stated(row) for row in self.store.run_rows([run for run, _ in summaries])}
        for run, summary in summaries:
            actual = summary.row(run)
            stated = rows.get(run)
            if stated is None:
                self.index_problem(actual[7], run, f"there is no run row for run {run}")
                return
            if open_runs and stated[7] >= self.end:
                continue  # appended to since the pass began: its row says more than the pass saw
            wrong = row_difference(stated, actual)
            if wrong is not None:
                self.index_problem(actual[7], run, wrong)
                return

    def finish(self) -> None:
        """The open runs' rows, the run and entry counts, then every payload row."""
        store = self.store
        self.compare_runs(self.ended)
        self.compare_runs(list(self.runs.items()), open_runs=True)
        report = self.report
        if self.index_issue is None:
            listed = store.run_row_count(self.end)
            if listed != self.chains:
                self.index_problem(report.entries, None, f"it has {listed} run rows; the entries make {self.chains} chains")
        if not self.payload_rows():
            return
        count, end, head = store.entry_row_count()
        if count != end or end < report.entries:
            report.issue = _issue(
                "JOURNAL_SEQ_GAP", report.entries, None,
                f"the entry rows are not numbered densely: {count} rows up to seq {end - 1}",
            )
        elif head != end:
            self.index_problem(report.entries, None, f"its head says there are {head} entries; there are {end}")

    def payload_rows(self) -> bool:
        report = self.report
        after = b""
        later: set[str] | None = None
        while True:
            rows = self.store.payload_rows(after, _PAYLOAD_BATCH)
            for digest, data, redacted in rows:
                name = digest.hex()
                if redacted:
                    if name not in self.redactions and later is None:
                        # Erased after a redaction appended since the pass began?
                        later = self.store.redaction_targets(self.end)
                    if name not in self.redactions and name not in (later or set()):
                        report.issue = _issue(
                            "PAYLOAD_ERASED_WITHOUT_REDACTION", report.entries, None,
                            f"payload {name} was erased but no redaction entry records it",
                        )
                        return False
                    report.redacted += 1
                    continue
                if data is None or hashlib.sha256(data).digest() != digest:
                    report.issue = _issue(
                        "PAYLOAD_HASH_MISMATCH", report.entries, None,
                        f"the bytes of payload {name} do not match its hash",
                    )
                    return False
                report.payloads += 1
            if len(rows) < _PAYLOAD_BATCH:
                return True
            after = rows[-1][0]


def verify_postgres_store(
    store: PostgresStore,
    *,
    progress: Callable[[int], None] | None = None,
    merkle: MerkleStream | None = None,
    steps: bool = True,
) -> VerifyReport:
    """Verify the whole store (see the module doc); the report's issue is the first problem
    of the lines and payloads, else the first disagreement of the other columns. ``steps``:
    also check each run's steps (left out by the checkpoint signer, as for the directory
    store)."""
    scan = _Scan(store, progress, merkle, steps)
    if scan.entries():
        scan.finish()
    report = scan.report
    if report.ok and scan.index_issue is not None:
        report.issue = scan.index_issue
    return report
