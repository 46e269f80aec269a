"""The directory store's journal verification: recompute every hash and check every rule,
report the first failure.

Verification streams the journal once and keeps only bounded state: the heads of runs still
open (and the steps each recorded, for the step rule of docs/spec.md 3.9), a bounded cache of
payload hashes seen (older ones are looked up through the index and re-hashed from the file),
a bounded memo of ``meta`` texts already proven canonical, and the set of redacted payloads.

On the way it compares the store's index (``index.sqlite``, a cache) with the journal
(``_IndexComparison``): every entry location, every payload location, every run row and every
run's entry list. The index is read in the journal's order as the scan advances, so this too
keeps bounded state (the summaries of runs still open). An index that contradicts a journal
that passed is reported as ``STORE_INDEX_TAMPERED``.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

import orjson

from tracelock.core.canonical import dumps
from tracelock.core.entry import (
    ADMIN_RUN,
    MAX_INTEGER,
    REDACTION_KIND,
    TERMINAL_KINDS,
    ChainChecker,
    ChainIssue,
    EntryFormatError,
    claimed_position,
    parse_entry,
)
from tracelock.core.steps import STEP_KINDS, RunSteps, opens_run, step_number
from tracelock.errors import CanonicalError, StoreError
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.fileio import OS_FILES
from tracelock.storage.directory.index import (
    LOCATION,
    Index,
    IndexedPayload,
    payload_code,
)
from tracelock.storage.directory.journal import (
    ENTRY,
    PAYLOAD,
    REDACTED,
    Record,
    classify,
    data_end,
)
from tracelock.storage.directory.sealed import SealedJournal, open_journal
from tracelock.storage.directory.synced_mark import MARK_FILE, SyncedMark
from tracelock.storage.errors import JournalCorruptError, SegmentCorruptError
from tracelock.storage.merkle_stream import MerkleStream
from tracelock.storage.run_fold import RunRow, row_difference
from tracelock.storage.verify_report import INDEX_TAMPERED, VerifyReport

ADMIN_RUN_BYTES = ADMIN_RUN.encode()
REDACTION_KIND_BYTES = REDACTION_KIND.encode()
(TERMINAL_KIND_BYTES,) = (kind.encode() for kind in TERMINAL_KINDS)
# What the step rule does with an entry, by kind (one lookup per entry): a step kind maps to
# itself, a run's start and end to these two markers; other kinds are not in the map.
_OPENS, _CLOSES = "", "run.end"
_STEP_ACTIONS = {kind.encode(): kind for kind in STEP_KINDS} | {b"run.start": _OPENS, TERMINAL_KIND_BYTES: _CLOSES}

__all__ = ["verify_directory_store"]


_SEEN_CACHE = 1 << 16
# The scan's payload cache is two generations of dicts (see ``_StoreScan``), each at most
# half of the bound above.
_GENERATION = _SEEN_CACHE // 2
# Read size: a block's lines and their matches stay small enough to be reused in place (and
# to stay in the CPU's caches) from one block to the next.
_READ_CHUNK = 1 << 17
# ``meta`` texts proven canonical (run status and the like repeat across runs). Bounded in
# count and in the size of a remembered text; emptied when full.
_META_MEMO = 4096
_META_MEMO_BYTES = 256
_PROGRESS_EVERY = 100_000


def _decimal_at_most(limit: int) -> bytes:
    """A pattern for the decimal integers 0 to ``limit`` (at least 10), no leading zeros."""
    digits = str(limit)
    options = [b"[1-9][0-9]{0,%d}" % (len(digits) - 2), b"0"]  # fewer digits than limit
    for position, digit in enumerate(digits):
        # As many digits as limit: equal to it up to ``position``, smaller there, then any.
        low = 1 if position == 0 else 0
        if int(digit) > low:
            rest = len(digits) - position - 1
            options.append(
                digits[:position].encode()
                + b"[%d-%d]" % (low, int(digit) - 1)
                + (b"[0-9]{%d}" % rest if rest else b"")
            )
    options.append(digits.encode())
    return b"(?:" + b"|".join(options) + b")"


# One line of the journal as the fast path reads it. Group 1 is a record: an entry line, a
# payload record (``=``, its hash, a space, at least one byte of data, as ``classify`` asks)
# or an erased one (``-``, its hash, a space, then spaces only). Groups 2-8 are an entry's i,
# kind, meta, payload, prev, run and seq. The last alternative takes any other line, with no
# group: every line gives exactly one ``findall`` result, in order, and a line that is no
# record gives one whose groups are all empty (a group that takes part is never empty).
# (Few groups: each costs ``findall`` about as much as a Python operation on every line.)
#
# The entry alternative is the canonical layout of ``tracelock.core.entry.ENTRY_LINE`` (the
# detailed checker's pattern), with three differences that change nothing it accepts:
# * the version is the literal 1, and integers are only those up to 2**53-1 (the pattern
#   checks the range, so ts needs no group);
# * a flat ``meta`` is tried first, without the backtracking that ``\{.*\}`` costs;
# * ``payload`` and ``prev`` are any 64 characters, not 64 lowercase hex digits (a character
#   class costs the regex engine several times what ``.`` costs per byte). ``block``
#   proves them hex all the same: ``prev`` must equal the hex digest of the run's previous
#   entry (or be null), and ``payload`` must be a key of the payload cache, which holds hex
#   keys only, or match ``_HEX64`` before it is looked up.
# The groups are the same as ``ENTRY_LINE``'s for every line both accept: only ``meta`` can
# take more than one length, and a valid line leaves one choice (after ``meta``, its only
# ``}`` is the last byte).
_INTEGER = _decimal_at_most(MAX_INTEGER)
_RECORD_LINE = re.compile(
    rb'^(?:(\{"i":(' + _INTEGER + rb'),"kind":"([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)",'
    rb'(?:"meta":(\{[^{}\n]*\}|\{.*\}),)?"payload":(?:null|"(.{64})"),'
    rb'"prev":(?:null|"(.{64})"),"run":"([A-Za-z0-9][A-Za-z0-9._:-]{0,127})",'
    rb'"seq":(' + _INTEGER + rb'),"ts":' + _INTEGER + rb',"v":1\}'
    rb"|=.{64} .+|-.{64} {2,})|[^\n]*)$",
    re.MULTILINE,
)
_HEX64 = re.compile(rb"[0-9a-f]{64}")
_PAYLOAD_MARK = ord("=")
_LEAF_PREFIX = b"\x00"  # RFC 9162 leaf hash: SHA-256(0x00 || entry line)


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


def verify_directory_store(
    store: DirectoryStore,
    *,
    progress: Callable[[int], None] | None = None,
    merkle: MerkleStream | None = None,
    compare_index: bool = False,
    steps: bool = True,
) -> VerifyReport:
    """:func:`tracelock.storage.verify.verify_store` for the directory store: the journal
    read up to its data end in blocks of whole lines, each checked by the fast path
    (``_StoreScan``); the first record it cannot accept is handed to the detailed checker
    (``_check_record``), which states exactly what is wrong."""
    store.flush()  # what this handle appended is in the file before it is read
    # The mark before the journal's end: a writer beside this reader only moves both forward.
    synced = _synced_mark(store)
    index = store.index_to_compare() if compare_index else None
    scan = _StoreScan(store, progress, merkle, None if index is None else _IndexComparison(index), steps)
    carried: list[bytes] = []  # the start of a line that continues in the next chunk
    offset = 0  # where the next block starts in the file
    journal = open_journal(store.path)
    try:
        for chunk in _journal_blocks(journal):
            newline = chunk.rfind(b"\n")
            if newline < 0:
                carried.append(chunk)  # joined once, when the line ends (no quadratic copy)
                continue
            if carried:
                carried.append(chunk)
                data = b"".join(carried)
                carried = []
            else:
                data = chunk
            cut = len(data) - len(chunk) + newline + 1
            if not scan.block(data, cut, offset):
                return scan.report
            offset += cut
            if cut < len(data):
                carried.append(data[cut:])
    except SegmentCorruptError as exc:
        scan.report.issue = _issue(SegmentCorruptError.code, scan.report.entries, None, exc.message)
        return scan.report
    finally:
        journal.close()
    report = scan.finish(offset, sum(map(len, carried)), synced)
    if compare_index and report.ok:
        if store.index_problem is not None:
            report.issue = _issue(INDEX_TAMPERED, report.entries, None, store.index_problem)
        elif scan.compare is not None:
            problem = scan.compare.finish(offset, report.entries)
            if problem is not None:
                report.issue = _issue(INDEX_TAMPERED, problem[0], problem[1], _index_message(store, problem[2]))
        else:
            reason = store.private_index_reason or "another process holds the store"
            report.notes.append(f"the index was not compared with the journal: {reason}")
    return report


def _synced_mark(store: DirectoryStore) -> int | None:
    """The store's synced mark (docs/spec.md 3.4), or None without a valid one."""
    mark = SyncedMark.open(OS_FILES, store.path, write=False)
    if mark is None:
        return None
    try:
        return mark.read()
    finally:
        mark.close()


def _journal_blocks(journal: SealedJournal) -> Iterator[bytes]:
    """The journal's bytes in blocks: each sealed segment checked whole (decoded once), then
    the rest of ``journal.log`` up to its data end. Raises :class:`SegmentCorruptError` for a
    segment that fails its checks."""
    position = 0
    for segment, data in journal.checked():
        if segment.start != position:
            break  # a segment is missing: the rest is read as it lies, holes and all
        yield data
        position = segment.end
    end = data_end(journal)
    while position < end:
        chunk = journal.pread(min(_READ_CHUNK, end - position), position)
        if not chunk:
            break  # the file shrank while being read; what was read is judged
        position += len(chunk)
        yield chunk


def _index_message(store: DirectoryStore, problem: str) -> str:
    path = store.path / "index.sqlite"
    return (
        f"the store's index (a cache of the journal) contradicts the journal, which passed: "
        f"{problem}. The index was altered, or the journal rewritten after it was indexed in "
        "a way the chain rules cannot see (a signed checkpoint tells). It is not rebuilt "
        f"silently: delete {path} to have it rebuilt from the journal"
    )


#: ``"ts":<integer>,"v":1}`` ends every entry line: the timestamp starts this far after "ts".
_TS_KEY = b'"ts":'
_TS_TAIL = len(b',"v":1}')


def _ts(line: bytes) -> int:
    return int(line[line.rfind(_TS_KEY) + len(_TS_KEY) : -_TS_TAIL])


def _meta_facts(meta: bytes) -> tuple[str | None, str | None, str | None]:
    """(status, agent, parent) an entry's ``meta`` states (each when a string)."""
    doc = orjson.loads(meta)
    status, agent, parent = (doc.get(key) for key in ("status", "agent", "parent"))
    return (
        status if isinstance(status, str) else None,
        agent if isinstance(agent, str) else None,
        parent if isinstance(parent, str) else None,
    )


def _spans_digest(run_id: int, packed: bytes, payloads: bytes) -> int:
    head = run_id.to_bytes(8, "little", signed=True) + len(packed).to_bytes(8, "little")
    return int.from_bytes(hashlib.sha256(head + packed + payloads).digest(), "little")


class _IndexComparison:
    """The index against the journal, advanced by the scan record by record.

    * entry locations: ``seq_blocks`` rows in ``seq`` order against the packed (offset,
      length) of every entry;
    * payload locations: ``payloads`` rows in offset order against every payload record,
      each row's hash (a prefix of it, ``index.PAYLOAD_KEY_BYTES``) against the record's
      (an erased record may have a row or not: a rebuilt index has none; a journal record
      without a row is fine only when it repeats a payload stored before it);
    * run rows: closed runs in the order of their last entries, compared as each run ends;
      open runs at the end;
    * each run's entry list (``run_spans``): an order-free sum of a hash of (row id, packed
      locations, the entries' payload codes and the locations they leave out, see
      ``index.payload_code``) per run, on both sides. The journal's side takes a payload's
      location from the record that has its ``payloads`` row (the first; kept in a bounded
      cache), else from that row, which the payload comparison checks against the journal:
      an entry whose payload has no row is (0, 0) on both sides.

    Only what the index covers is compared (it ends where the scan ends, or the comparison
    fails at ``finish``). The first contradiction is kept as (seq, run, what).
    """

    _MODULUS = 1 << 256

    def __init__(self, index: Index) -> None:
        self.index = index
        self.limit = index.entry_count
        self.blocks = index.iter_seq_blocks()
        self.expected_seq = 0  # first seq of the next seq_blocks row
        self.locations = bytearray()  # packed journal locations not yet compared
        self.located = 0  # seq of the first location in ``locations``
        self.payload_rows = index.iter_payloads_by_offset()
        self.payload_row: IndexedPayload | None = next(self.payload_rows, None)
        self.closed_rows = index.iter_closed_runs()
        self.closed_row: tuple[Any, ...] | None = next(self.closed_rows, None)
        # run -> [first seq, count, status, agent, parent, first line, last line, last seq,
        #         locations, payload codes, payload locations the codes leave out]
        self.runs: dict[bytes, list[Any]] = {}
        # payload hash (hex bytes) -> (offset, length) of the record that has its row
        self.payload_spots: dict[bytes, tuple[int, int]] = {}
        self.spans = 0
        self.metas: dict[bytes, tuple[str | None, str | None, str | None]] = {}
        self.problem: tuple[int, str | None, str] | None = None
        self.last_line = b""
        self.next_seq = 0

    def fail(self, seq: int, run: str | None, what: str) -> None:
        if self.problem is None:
            self.problem = (seq, run, what)

    def meta(self, summary: list[Any], meta: bytes, i: int) -> None:
        """Fold an entry's ``meta`` into its run's summary (status; agent and parent from
        the run's first entry)."""
        facts = self.metas.get(meta)
        if facts is None:
            facts = _meta_facts(meta)
            if len(self.metas) >= _META_MEMO:
                self.metas.clear()
            self.metas[meta] = facts
        if facts[0] is not None:
            summary[2] = facts[0]
        if i == 0:
            summary[3], summary[4] = facts[1], facts[2]

    def advanced(self, next_seq: int, last_line: bytes) -> None:
        """A block passed: compare the entry locations gathered so far."""
        if last_line:
            self.last_line = last_line
        self.next_seq = next_seq
        if len(self.locations) >= 1 << 16:
            self._drain_locations()

    def _row(self, run: bytes, summary: list[Any], closed: int) -> RunRow:
        return (
            run.decode(), summary[3], summary[4], summary[2] or "created", _ts(summary[5]),
            _ts(summary[6]), summary[0], summary[7], summary[1],
            hashlib.sha256(summary[6]).hexdigest(), closed,
        )

    def closed(self, run: bytes, summary: list[Any]) -> None:
        """A run ended: its row must be the next closed one, and state what the journal does."""
        del self.runs[run]
        if self.problem is not None:
            return
        found = self.closed_row
        if found is None or found[8] != summary[7]:
            self.fail(summary[7], run.decode(), f"run {run.decode()} ends at seq {summary[7]}, but no closed run row of it does")
            return
        self.closed_row = next(self.closed_rows, None)
        run_id = found[0]
        line = summary[6]
        # (id, run, agent, parent, status, started_ts, updated_ts, first_seq, last_seq, entries, last_hash, closed)
        if found != (
            run_id, run.decode(), summary[3], summary[4], summary[2] or "created", _ts(summary[5]),
            int(line[line.rfind(_TS_KEY) + 5 : -_TS_TAIL]), summary[0], summary[7], summary[1],
            hashlib.sha256(line).hexdigest(), 1,
        ):
            self._compare_row(found[1:], self._row(run, summary, 1))
        self.spans = (self.spans + _spans_digest(run_id, bytes(summary[8]), bytes(summary[9] + summary[10]))) % self._MODULUS

    def _compare_row(self, row: RunRow, actual: RunRow) -> None:
        wrong = row_difference(row, actual)
        if wrong is not None:
            self.fail(actual[6], actual[0], wrong)

    def payload(self, digest: bytes, offset: int, length: int, erased: bool) -> None:
        if self.problem is not None:
            return
        row = self.payload_row
        if row is not None and row[1] < offset:
            self.fail(self.next_seq, None, f"it places payload {row[0].decode()} at byte {row[1]}, where no payload record starts")
            return
        if row is not None and row[1] == offset:
            self.payload_row = next(self.payload_rows, None)
            if not digest.startswith(row[0]) or row[2] != length:
                self.fail(self.next_seq, None, f"it places payload {row[0].decode()} at bytes {row[1]}-{row[1] + row[2]}, which hold the record of payload {digest.decode(errors='replace')} ({length} bytes)")
            else:
                self.first_record(digest, offset, length)
            return
        if erased:
            return  # a rebuilt index has no row for an erased record
        earlier = self.index.payload_location(bytes.fromhex(digest.decode()))
        if earlier is None or earlier[0] >= offset:
            self.fail(self.next_seq, None, f"it has no row for payload {digest.decode()} stored at byte {offset}")

    def first_record(self, digest: bytes, offset: int, length: int) -> None:
        """The record at ``offset`` is the one the ``payloads`` row of ``digest`` names."""
        spots = self.payload_spots
        if len(spots) >= _SEEN_CACHE:
            spots.clear()  # older ones are looked up through the index
        spots[digest] = (offset, length)

    def payload_spot(self, digest: bytes) -> tuple[int, int]:
        """The location of the record that has the ``payloads`` row of ``digest`` (hex
        bytes), when the cache no longer holds it; (0, 0) without a row."""
        spot = self.index.payload_location(bytes.fromhex(digest.decode()))
        return (0, 0) if spot is None else spot

    def _drain_locations(self) -> None:
        while self.problem is None:
            if self.pending_block is None:
                self.pending_block = next(self.blocks, None)
                if self.pending_block is None:
                    if self.locations:
                        self.fail(self.located, None, f"it locates no entry from seq {self.located} on")
                    return
            first_seq, blob = self.pending_block
            if first_seq != self.expected_seq:
                self.fail(self.expected_seq, None, f"its entry locations jump from seq {self.expected_seq} to {first_seq}")
                return
            if len(blob) > len(self.locations):
                return
            if blob != self.locations[: len(blob)]:
                at = next(n for n in range(0, len(blob), LOCATION.size) if blob[n : n + LOCATION.size] != self.locations[n : n + LOCATION.size])
                seq = self.located + at // LOCATION.size
                said = LOCATION.unpack_from(blob, at)
                true = LOCATION.unpack_from(self.locations, at)
                self.fail(seq, None, f"it places entry {seq} at bytes {said[0]}-{said[0] + said[1]}; the journal has it at bytes {true[0]}-{true[0] + true[1]}")
                return
            del self.locations[: len(blob)]
            self.located += len(blob) // LOCATION.size
            self.expected_seq = self.located
            self.pending_block = None

    pending_block: tuple[int, bytes] | None = None

    def finish(self, end: int, entries: int) -> tuple[int, str | None, str] | None:
        index = self.index
        if self.problem is None and (index.journal_end != end or index.entry_count != entries):
            self.fail(min(index.entry_count, entries), None, f"it covers {index.entry_count} entries and {index.journal_end} bytes; the journal has {entries} entries in {end} bytes")
        if self.problem is None and entries and index.last_hash != hashlib.sha256(self.last_line).hexdigest():
            self.fail(entries - 1, None, f"it records hash {index.last_hash} for the last entry")
        if self.problem is None:
            self._drain_locations()
        if self.problem is None and self.pending_block is not None:
            self.fail(self.located, None, f"it locates entries from seq {self.located} on, which the journal does not have")
        if self.problem is None and (self.locations or next(self.blocks, None) is not None):
            self.fail(self.located, None, "its entry locations do not end where the journal's entries do")
        if self.problem is None and self.payload_row is not None:
            digest, offset, _ = self.payload_row
            self.fail(self.next_seq, None, f"it places payload {digest.decode()} at byte {offset}, where no payload record starts")
        if self.problem is None and self.closed_row is not None:
            run_row = self.closed_row[1:]
            self.fail(run_row[7], run_row[0], f"its row for run {run_row[0]} says the run ended at seq {run_row[7]}, where it did not")
        if self.problem is None:
            self._open_runs()
        if self.problem is None:
            stated = 0
            for run_id, packed, payload_spots in index.iter_run_locations():
                if run_id < 0:
                    self.fail(self.next_seq, None, f"it lists entry locations of run row {-1 - run_id}, which does not exist")
                    break
                stated = (stated + _spans_digest(run_id, packed, payload_spots)) % self._MODULUS
            else:
                if stated != self.spans:
                    self.fail(self.next_seq, None, "the entry lists of its runs (run_spans) differ from the runs' entries in the journal")
        return self.problem

    def _open_runs(self) -> None:
        rows = self.index.open_runs()
        for run, summary in self.runs.items():
            found = rows.pop(run.decode(), None)
            if found is None:
                self.fail(summary[7], run.decode(), f"it has no open run row for run {run.decode()}")
                return
            run_id, row = found
            self._compare_row(row, self._row(run, summary, 0))
            self.spans = (self.spans + _spans_digest(run_id, bytes(summary[8]), bytes(summary[9] + summary[10]))) % self._MODULUS
        if rows:
            name, (_, row) = next(iter(rows.items()))
            self.fail(row[7], name, f"it has an open run row for run {name}, which the journal does not have open")


class _StoreScan:
    """The state of a whole-store verification, advanced one block of whole lines at a time.

    The payload cache maps a payload hash (hex bytes) to whether its record is erased. It is
    kept in two generations: lookups try ``recent`` then ``older``; a hit in ``older`` is
    copied into ``recent``; when ``recent`` is full it becomes ``older`` and the previous
    ``older`` is dropped. Every hash inserted in the last ``_GENERATION`` insertions is still
    cached, and no insertion costs more than a dict store. (Evicting one oldest key per
    insertion from a single dict, as before, made every eviction walk the deleted slots at the
    front of the dict: verification slowed down as the journal grew.) A hash not cached is
    looked up through the index and its record re-hashed from the file.
    """

    def __init__(
        self,
        store: DirectoryStore,
        progress: Callable[[int], None] | None,
        merkle: MerkleStream | None = None,
        compare: _IndexComparison | None = None,
        steps: bool = True,
    ) -> None:
        self.store = store
        self.compare = compare
        self.progress = progress
        self.merkle = merkle
        self.report = VerifyReport(scope="store")
        self.heads: dict[bytes, tuple[int, bytes]] = {}  # open run -> (last i, last hash)
        # Ended runs (chain rule 4: no entry after run.end), as the first 16 bytes of the
        # SHA-256 of the id, as ``ChainChecker`` keeps them.
        self.closed: set[bytes] = set()
        self.recent: dict[bytes, bool] = {}
        self.older: dict[bytes, bool] = {}
        self.erased: set[bytes] = set()
        self.redactions: set[str] = set()
        self.metas: set[bytes] = set()
        self.next_seq = 0
        self.next_progress = _PROGRESS_EVERY
        # The step rule (docs/spec.md 3.9): the runs still open, and the step each payload
        # names (a bounded cache, by payload hash); None when the rule is not checked.
        self.open_steps: dict[bytes, RunSteps] | None = {} if steps else None
        self.step_of: dict[bytes, int | None] = {}
        # ``meta`` objects of run starts and ends by their text (few distinct ones: a run's
        # agent and status), bounded as the memo of canonical texts is.
        self.parsed_metas: dict[bytes, dict[str, Any]] = {}

    def block(self, data: bytes, end: int, base: int) -> bool:
        """Check the lines of ``data[:end]`` (which ends with a line feed), found at byte
        ``base`` of the file. False when one fails: ``report.issue`` says why.

        This is the hot loop: one pattern match per line (all of the block's in one call),
        one hash per record, local variables and bytes only. Every rule is checked for a
        record before the state changes for it; the first record that breaks one stops the
        loop and goes to ``_explain``.
        """
        store = self.store
        heads = self.heads
        closed = self.closed
        recent, older = self.recent, self.older
        room = _GENERATION - len(recent)  # insertions left before ``recent`` turns over
        metas = self.metas
        erased = self.erased
        redactions = self.redactions
        sha256 = hashlib.sha256
        first_seq = next_seq = self.next_seq
        payloads = redacted = runs = 0
        starts: list[int] | None = None  # line offsets, computed only if a lookup needs them
        leaves: list[bytes] | None = None if self.merkle is None else []
        # Comparing the index (when asked): where each line starts, and the state the
        # comparison keeps, bound to locals for the loop.
        compare = self.compare
        position = base
        c_runs: dict[bytes, list[Any]] = {} if compare is None else compare.runs
        c_locations = bytearray() if compare is None else compare.locations
        c_limit = 0 if compare is None else compare.limit
        c_metas: dict[bytes, tuple[str | None, str | None, str | None]] = {} if compare is None else compare.metas
        c_payload_rows = iter(()) if compare is None else compare.payload_rows
        c_spots: dict[bytes, tuple[int, int]] = {} if compare is None else compare.payload_spots
        pack = LOCATION.pack
        last_line = b""
        # The step rule: the open runs' steps, and this block's payload records by hash (an
        # entry's record is usually in the same block; ``_step_named`` looks further).
        open_steps = self.open_steps
        step_of = self.step_of
        block_payloads: dict[bytes, bytes] = {}
        step_issue: ChainIssue | None = None
        # The final line feed is left out so that no empty line follows the last one.
        for line, i_text, kind, meta, payload, prev, run, seq_text in _RECORD_LINE.findall(
            data, 0, end - 1
        ):
            if i_text:
                if int(seq_text) != next_seq:
                    break
                head = heads.get(run)
                if head is None:
                    if i_text != b"0" or prev or sha256(run).digest()[:16] in closed:
                        break
                    i = 0
                else:
                    i = int(i_text)
                    # Equal to the previous entry's hash, ``prev`` is 64 lowercase hex digits.
                    if i != head[0] + 1 or prev != head[1]:
                        break
                if meta:
                    if meta not in metas:
                        if not _canonical_meta(meta):
                            break
                        if len(meta) <= _META_MEMO_BYTES:
                            if len(metas) >= _META_MEMO:
                                metas.clear()
                            metas.add(meta)
                    if kind == REDACTION_KIND_BYTES and run == ADMIN_RUN_BYTES:
                        target = orjson.loads(meta).get("payload")
                        if isinstance(target, str):
                            redactions.add(target)
                # Only 64 lowercase hex digits are ever cached, so a hit also proves the shape
                # of ``payload``; a miss checks it before looking it up.
                if payload and payload not in recent:
                    if payload in older:
                        recent[payload] = older[payload]
                    else:
                        if _HEX64.fullmatch(payload) is None:
                            break
                        if starts is None:
                            starts = _line_starts(data, end, base)
                        number = next_seq - first_seq + payloads + redacted
                        state = store.payload_state_before(payload.decode(), starts[number])
                        if state == "missing":
                            break
                        recent[payload] = state == "redacted"
                    room -= 1
                    if room <= 0:
                        older, recent, room = recent, {}, _GENERATION
                if open_steps is not None and (action := _STEP_ACTIONS.get(kind)) is not None:
                    if action == _OPENS:
                        if meta and i == 0 and self._opens_run(meta):
                            open_steps[run] = RunSteps(run.decode())
                    elif action == _CLOSES:
                        tracked = open_steps.pop(run, None)
                        if tracked is not None:
                            status = self._meta(meta).get("status") if meta else None
                            step_issue = tracked.end(next_seq, status if isinstance(status, str) else None)
                            if step_issue is not None:
                                break
                    else:
                        tracked = open_steps.get(run)
                        if tracked is not None:
                            # -1 is never cached (a step is never negative): not known yet.
                            named = step_of.get(payload, -1)
                            if named == -1:
                                named = self._step_named(payload, block_payloads, recent, older)
                            step_issue = tracked.add(next_seq, action, named)
                            if step_issue is not None:
                                break
                if kind == TERMINAL_KIND_BYTES:
                    heads.pop(run, None)
                    closed.add(sha256(run).digest()[:16])
                else:
                    heads[run] = (i, sha256(line).hexdigest().encode())
                if compare is not None:
                    start = position
                    position += len(line) + 1
                    if next_seq < c_limit:
                        last_line = line
                        location = pack(start, len(line))
                        c_locations += location
                        summary = c_runs.get(run)
                        if summary is None:
                            summary = c_runs[run] = [
                                next_seq, 0, None, None, None, line, line, next_seq,
                                bytearray(), bytearray(), bytearray(),
                            ]
                        summary[1] += 1
                        summary[6] = line
                        summary[7] = next_seq
                        summary[8] += location
                        spot = None
                        if payload:
                            spot = c_spots.get(payload)
                            if spot is None:
                                spot = compare.payload_spot(payload)
                        code, far = payload_code(start, spot)
                        summary[9] += code
                        if far:
                            summary[10] += far
                        if meta:
                            facts = c_metas.get(meta)
                            if facts is None or i == 0:
                                compare.meta(summary, meta, i)
                            elif facts[0] is not None:
                                summary[2] = facts[0]
                        if kind == TERMINAL_KIND_BYTES:
                            compare.closed(run, summary)
                if leaves is not None:
                    leaves.append(sha256(_LEAF_PREFIX + line).digest())
                next_seq += 1
                if head is None and run != ADMIN_RUN_BYTES:
                    runs += 1
            elif line:
                digest = line[1:65]
                if line[0] == _PAYLOAD_MARK:
                    # Equal to a computed hex digest, ``digest`` is 64 lowercase hex digits.
                    if sha256(line[66:]).hexdigest().encode() != digest:
                        break
                    recent[digest] = False
                    block_payloads[digest] = line
                    payloads += 1
                    if compare is not None:
                        start = position
                        position += len(line) + 1
                        row = compare.payload_row
                        if row is not None and row[1] == start and digest.startswith(row[0]) and row[2] == len(line):
                            compare.payload_row = next(c_payload_rows, None)
                            compare.first_record(digest, start, len(line))
                        else:
                            compare.payload(digest, start, len(line), False)
                else:
                    # An erased record's hash field is not checked here (a redaction entry
                    # must name it, see ``finish``); only a hex one can be named by an entry.
                    erased.add(digest)
                    redacted += 1
                    if compare is not None:
                        compare.payload(digest, position, len(line), True)
                        position += len(line) + 1
                    if _HEX64.fullmatch(digest) is None:
                        continue
                    recent[digest] = True
                room -= 1
                if room <= 0:
                    older, recent, room = recent, {}, _GENERATION
            else:
                break  # no record
        else:
            self._advanced(recent, older, next_seq, first_seq, payloads, redacted, runs, leaves)
            if compare is not None:
                compare.advanced(min(next_seq, c_limit), last_line)
            return True
        self._advanced(recent, older, next_seq, first_seq, payloads, redacted, runs, leaves)
        if step_issue is not None:
            self.report.issue = step_issue
            return False
        if starts is None:
            starts = _line_starts(data, end, base)
        number = next_seq - first_seq + payloads + redacted  # the line that failed
        line = data[starts[number] - base : starts[number + 1] - base - 1]
        self.report.issue = self._explain(Record(starts[number], classify(line) or "garbage", line))
        return False

    def _step_named(
        self, payload: bytes, block: dict[bytes, bytes], recent: dict[bytes, bool], older: dict[bytes, bool]
    ) -> int | None:
        """The step the payload ``payload`` (hex bytes, or empty for none) names, for the
        step rule: its ``step``; None when it is erased or names none.
        The record is found in the current block (``block``), else read through the store;
        the answer is cached by hash."""
        if not payload:
            return None
        cache = self.step_of
        if payload in cache:
            return cache[payload]
        named: int | None = None
        # The payload check put every payload an entry names in one of the two generations.
        erased = recent.get(payload)
        if erased is None:
            erased = older.get(payload)
        if not erased:
            record = block.get(payload)
            data = record[66:] if record is not None else self._payload_data(payload.decode())
            named = None if data is None else _step_in(data)
        if len(cache) >= _SEEN_CACHE:
            cache.clear()
        cache[payload] = named
        return named

    def _opens_run(self, meta: bytes) -> bool:
        """Whether a ``run.start`` at index 0 with this ``meta`` text starts a run the step
        rule applies to (``opens_run``)."""
        return opens_run(0, "run.start", self._meta(meta))

    def _meta(self, text: bytes) -> dict[str, Any]:
        """An entry's ``meta`` object from its text (which the scan proved canonical)."""
        memo = self.parsed_metas
        meta = memo.get(text)
        if meta is None:
            meta = orjson.loads(text)
            if len(text) <= _META_MEMO_BYTES:
                if len(memo) >= _META_MEMO:
                    memo.clear()
                memo[text] = meta
        return meta

    def _payload_data(self, digest: str) -> bytes | None:
        """A payload stored before the current block, read through the store (its index,
        which the index comparison checks); None when it cannot be read."""
        try:
            return self.store.get_payload_bytes(digest)
        except StoreError:
            return None

    def _advanced(
        self,
        recent: dict[bytes, bool],
        older: dict[bytes, bool],
        next_seq: int,
        first_seq: int,
        payloads: int,
        redacted: int,
        runs: int,
        leaves: list[bytes] | None,
    ) -> None:
        """Keep what ``block`` counted and cached; report progress."""
        if leaves and self.merkle is not None:
            self.merkle.add(leaves)
        self.recent, self.older = recent, older
        self.next_seq = next_seq
        report = self.report
        report.entries += next_seq - first_seq  # seq numbers every entry from 0
        report.payloads += payloads
        report.redacted += redacted
        report.runs += runs
        if self.progress is not None:
            while self.next_progress <= report.entries:
                self.progress(self.next_progress)
                self.next_progress += _PROGRESS_EVERY

    def _explain(self, record: Record) -> ChainIssue:
        cached = dict(self.older)
        cached.update(self.recent)  # the newer state of a hash wins
        return _explain(self.store, record, self.next_seq, self.heads, cached, self.redactions, self.closed)

    def finish(self, offset: int, tail: int, synced: int | None) -> VerifyReport:
        """The report once every whole line up to the data end passed: ``offset`` is where
        the last whole line ends, ``tail`` the bytes of an incomplete record after it,
        ``synced`` the store's synced mark (None without one).

        The data must reach the mark, and an incomplete last record must start at or after
        it: the bytes before the mark were synced, and no crash takes synced bytes away.
        A journal that fails this is ``JOURNAL_CORRUPT``, as a writer opening the store
        finds it (docs/spec.md 3.5), never an unacknowledged write."""
        report = self.report
        end = offset + tail
        if synced is not None and end < synced:
            report.issue = _issue(
                JournalCorruptError.code,
                self.next_seq,
                None,
                f"the journal's data ends at byte {end}, before the {synced} bytes the store "
                f"recorded as synced ({MARK_FILE}): acknowledged records are missing (the "
                "journal was truncated, or its last blocks zeroed). No crash does this: "
                "corruption or tampering, which `recover` and every writer refuse too",
            )
            return report
        if tail and synced is not None and offset < synced:
            report.issue = _issue(
                JournalCorruptError.code,
                self.next_seq,
                None,
                f"the last record, at byte {offset}, is incomplete ({tail} bytes, no line feed) "
                f"and starts before byte {synced}, which the store recorded as synced "
                f"({MARK_FILE}): a crash cannot damage synced bytes. Corruption or tampering, "
                "which `recover` and every writer refuse too",
            )
            return report
        if tail:
            report.notes.append(
                f"incomplete tail of {tail} bytes at byte {offset} is not part of the "
                "journal (an unacknowledged write; the next writer to open the store cuts it)"
            )
        # Compared as bytes: an erased record's hash field is not otherwise checked, and
        # need not even be UTF-8.
        recorded = {target.encode() for target in self.redactions}
        unexplained = sorted(digest for digest in self.erased if digest not in recorded)
        if unexplained:
            report.issue = _issue(
                "PAYLOAD_ERASED_WITHOUT_REDACTION",
                self.next_seq,
                None,
                f"payload {unexplained[0].decode(errors='replace')} was erased but no "
                "redaction entry records it",
            )
        return report


def _document(data: bytes) -> Any:
    """A payload's document (None when its bytes are not JSON: it names no step)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _step_in(data: bytes) -> int | None:
    """The step a payload's bytes name (``step_number`` of the document)."""
    return step_number(_document(data))


def _canonical_meta(text: bytes) -> bool:
    """Whether an entry's ``meta`` text is a non-empty JSON object in canonical form."""
    try:
        meta = orjson.loads(text)
        return isinstance(meta, dict) and bool(meta) and dumps(meta) == text
    except (orjson.JSONDecodeError, CanonicalError):
        return False


def _line_starts(data: bytes, end: int, base: int) -> list[int]:
    """The file offset of each line of ``data[:end]``, and of the end of the last one."""
    return list(accumulate((len(line) + 1 for line in data[:end].split(b"\n")[:-1]), initial=base))


def _explain(
    store: DirectoryStore,
    record: Record,
    next_seq: int,
    heads: dict[bytes, tuple[int, bytes]],
    recent: dict[bytes, bool],
    redactions: set[str],
    closed: set[bytes],
) -> ChainIssue:
    """The precise reason a record failed the fast path."""
    checker = ChainChecker.resume(
        next_seq,
        {run.decode(): (i, digest.decode()) for run, (i, digest) in heads.items()},
        closed=lambda run: hashlib.sha256(run.encode()).digest()[:16] in closed,
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
        run, claimed = claimed_position(record.data)
        where = "".join(
            (
                f" of run {run}" if run is not None else "",
                f" (seq {claimed})" if claimed is not None and claimed != seq else "",
            )
        )
        return _issue(
            "JOURNAL_MALFORMED_ENTRY",
            seq,
            run,
            f"entry {seq}{where} at byte {record.offset}: {exc.message}",
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


