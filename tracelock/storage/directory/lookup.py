"""Locating entries and payload records in the journal where the index says they are, and
checking each is there (an index that points elsewhere was altered)."""

from __future__ import annotations

from pathlib import Path

from tracelock.core.entry import TERMINAL_KINDS, Entry, EntryFormatError, parse_entry
from tracelock.storage.directory.index import Index
from tracelock.storage.directory.journal import Record
from tracelock.storage.directory.payload_filter import PayloadFilter
from tracelock.storage.directory.state import (
    BATCH_READ_BYTES,
    NEWLINE,
    NUL,
    StoreState,
    whole_record,
)
from tracelock.storage.errors import IndexTamperedError, JournalCorruptError, StoreError
from tracelock.storage.run_fold import RunRow

__all__ = ["JournalLookup"]


class JournalLookup(StoreState):
    """Reads single entries and payload records at the offsets the index gives, checking each."""

    def _located_entry(self, seq: int, offset: int, length: int) -> Entry | str | None:
        """The entry the index places at (offset, length) for ``seq``; what is wrong with
        the index when that is not one whole entry record of that seq; None when it is one
        whole record that is no valid entry (damage of the journal, not of the index)."""
        if offset < 0 or length <= 0:
            return f"entry {seq} has no valid location in it ({offset}, {length})"
        before = 1 if offset else 0
        raw = self._file.pread(length + 1 + before, offset - before)
        if raw[:before] != NEWLINE[:before] or raw[-1:] != NEWLINE or len(raw) != length + 1 + before:
            return f"it places entry {seq} at bytes {offset}-{offset + length}, which is not one journal record"
        line = raw[before:-1]
        if line[:1] != b"{":
            return f"it places entry {seq} at byte {offset}, which holds a payload record"
        try:
            entry = parse_entry(line)
        except EntryFormatError:
            return None
        if entry.seq != seq:
            return f"it places entry {seq} at byte {offset}, which holds entry {entry.seq}"
        return entry

    @staticmethod
    def _head_problem(row: RunRow | None, last: Entry) -> str | None:
        """What the run row of ``last``'s run states wrongly about its head, when ``last``
        is that run's last entry."""
        if row is None:
            return f"it has no row for run {last.run}"
        closed = last.kind in TERMINAL_KINDS
        if (row[7], row[8], row[9], bool(row[10])) != (last.seq, last.i + 1, last.hash, closed):
            return (
                f"its row for run {last.run} says {row[8]} entries, last seq {row[7]}, head "
                f"{row[9][:16]}, {'closed' if row[10] else 'open'}; the journal's last entry of the "
                f"run is seq {last.seq}, index {last.i}, hash {last.hash[:16]}, "
                f"{'closed' if closed else 'open'}"
            )
        return None

    def _misplaced(self, offset: int, length: int, problem: str) -> StoreError:
        """The error for a record the index places at bytes ``offset``..``offset+length``
        that do not hold it: damage of the journal when those bytes (with the line feeds
        around them) hold a NUL byte inside the data the index covers, since no record holds
        one (blocks of the journal were lost, as ``JOURNAL_CORRUPT`` at open without the
        index); otherwise the index lies (``problem``)."""
        with self._index_lock:
            covered = self._index.journal_end
        start = max(offset - 1, 0)
        end = min(offset + length + 1, covered)
        if end > start and NUL in self._file.pread(end - start, start):
            return JournalCorruptError(
                f"the journal holds NUL bytes at bytes {start}-{end}, where its index places a "
                "record: blocks of the journal were lost (corruption or tampering, not a torn "
                "write: nothing was repaired; run `tracelock verify --store` for details)",
                details={"offset": offset, "length": length},
            )
        return self._tampered(problem)

    def _tampered(self, problem: str) -> IndexTamperedError:
        path = self._path / "index.sqlite"
        return IndexTamperedError(
            f"the store's index (a cache of the journal) contradicts the journal: {problem}. "
            "It covers only bytes that were written, so no crash explains this: the index was "
            "altered (or the journal rewritten after it was indexed; `tracelock verify --store` "
            f"checks the journal). It is not rebuilt silently: delete {path} to have it rebuilt "
            "from the journal",
            details={"index": str(path), "problem": problem},
        )

    def _read_entry(self, offset: int, length: int) -> Entry:
        base = offset - 1 if offset else 0
        return self._entry_in(self._file.pread(offset + length + 1 - base, base), base, offset, length)

    def _entry_in(self, raw: bytes, base: int, offset: int, length: int) -> Entry:
        """The entry at ``offset`` in ``raw`` (the file's bytes from ``base``): it must be one
        whole record, a newline on each side (none before it at the start of the file)."""
        at = offset - base
        end = at + length
        if end >= len(raw) or raw[end] != 10 or (offset and raw[at - 1] != 10):
            raise self._misplaced(offset, length, f"it places an entry at bytes {offset}-{offset + length}, which is not one journal record")
        line = raw[at:end]
        try:
            return parse_entry(line)
        except EntryFormatError as exc:
            raise JournalCorruptError(
                f"entry at byte {offset} is damaged: {exc.message}", details={"offset": offset}
            ) from None

    def _read_entries(self, locations: list[tuple[int, int]]) -> list[Entry]:
        """The entries at ``locations``; one read covers them all when they lie close
        together (a run's entries usually do), each checked as :meth:`_read_entry` checks it."""
        if not locations:
            return []
        low, high = locations[0][0], 0
        for offset, length in locations:
            if offset < low:
                low = offset
            if offset + length > high:
                high = offset + length
        base = low - 1 if low else 0
        if high + 1 - base > BATCH_READ_BYTES:
            return [self._read_entry(offset, length) for offset, length in locations]
        raw = self._file.pread(high + 1 - base, base)
        return [self._entry_in(raw, base, offset, length) for offset, length in locations]

    def _read_line(self, record: Record) -> Entry:
        try:
            return parse_entry(record.data)
        except EntryFormatError as exc:
            raise JournalCorruptError(
                f"entry at byte {record.offset} is damaged: {exc.message}",
                details={"offset": record.offset},
            ) from None

    def _entry_start(self, seq: int) -> int | None:
        """The offset of entry ``seq`` by the index, checked against the journal (a scan
        started from a wrong offset would read garbage); None if the index has no such entry."""
        location = self._index.entry_location(seq)
        if location is None:
            return None
        entry = self._located_entry(seq, *location)
        if entry is None:
            self._read_entry(*location)  # raises: the journal's record is damaged
        if isinstance(entry, str):
            raise self._misplaced(*location, entry)
        return location[0]

    # -- payload locations ---------------------------------------------------------------
    def _remember_payload(self, digest: bytes, offset: int, length: int) -> None:
        cache = self._payloads
        cache.put(digest, (offset, length))
        if self._filter is not None:
            self._filter.add(digest)
        if cache.dropped:
            self._payloads_complete = False

    def _payload_location(self, digest: bytes, *, reading: bool = False) -> tuple[int, int] | None:
        """Where a payload's record is (None: not stored). ``reading``: a read of one payload,
        which queries the index at once rather than first building the filter of every
        payload hash (that filter pays for itself only over a writer's many lookups of new
        payloads; building it for one read made a handle's first such read linear in the
        store). A read also never trusts ``_payloads_complete`` or the filter, which know
        only what this handle appended or caught up with under the writer lock: another
        process may have stored the payload since."""
        if not reading:
            if self._payloads_complete:
                return self._payloads.get(digest)
            if self._filter is None:
                with self._index_lock:
                    self._filter = PayloadFilter(self._index.payload_count() * 2)
                    self._filter.update(self._index.payload_prefixes())
                    self._filter.update(row[0] for _, row in self._pending.payloads)
                    self._filter.update(self._payloads)
            # First: it holds every payload the cache does, and a new payload's look-up
            # then touches one block of it, not the cache's dicts as well (each a likely
            # cache miss in a long-lived writer).
            if not self._filter.may_contain(digest):
                return None
        location = self._payloads.get(digest)
        if location is not None:
            return location
        with self._index_lock:
            location = self._index.payload_location(digest)
        if location is not None:
            problem = self._payload_record_problem(digest, *location)
            if problem is not None:
                raise self._misplaced(*location, problem)
        if location is None:
            # Queued but not indexed yet, and already gone from the cache (rare: the cache
            # is much larger than an index batch).
            location = next(((offset, length) for _, (known, offset, length) in self._pending.payloads if known == digest), None)
        if location is not None:
            self._remember_payload(digest, *location)
        return location

    def _record_digest(self, offset: int) -> bytes | None:
        """The hash named by the payload record (kept or erased) at ``offset``; None when
        no payload record starts there (the index's payload rows are keyed by a prefix of
        the hash: this tells two payloads with the same prefix apart)."""
        head = self._file.pread(66, offset)
        if len(head) != 66 or head[:1] not in (b"=", b"-") or head[65:] != b" ":
            return None
        try:
            return bytes.fromhex(head[1:65].decode())
        except ValueError:
            return None

    def _new_index(self, path: Path) -> Index:
        """The store's index at ``path`` (``:memory:``: a private one), reading this
        journal to tell payloads apart (:meth:`_record_digest`)."""
        return Index(path, record_digest=self._record_digest)

    def _payload_record_problem(self, digest: bytes, offset: int, length: int) -> str | None:
        """What is wrong with the index's location of a payload, judged by the record there:
        one whole record, a payload record (kept or erased) of that hash."""
        before = self._file.pread(1, offset - 1) if offset > 0 else NEWLINE
        head = self._file.pread(66, offset)
        after = self._file.pread(1, offset + length)
        if (
            length <= 66
            or before != NEWLINE
            or head[:1] not in (b"=", b"-")
            or head[1:] != digest.hex().encode() + b" "
            or after != NEWLINE
        ):
            return _misplaced_payload(digest, offset, length)
        return None

    def _run_payload_record(self, digest: str) -> tuple[int, bytes] | None:
        """(offset, record) of a payload of the run read last, checked as one whole record of
        that payload, in one read; None when it is not one of them or the index lacks it."""
        location = self._run_payloads.get(digest)
        if location is None:
            return None
        offset, length = location
        before = 1 if offset else 0
        record = whole_record(self._file.pread(length + 1 + before, offset - before), before, length, digest.encode())
        if record is None:
            raise self._misplaced(offset, length, _misplaced_payload(bytes.fromhex(digest), offset, length))
        return offset, record

    def _check_head(self, row: RunRow) -> None:
        """Raise ``IndexTamperedError`` unless the journal holds the head a run row states.
        Holds ``_index_lock``."""
        location = self._index.entry_location(row[7])
        if location is None:
            raise self._tampered(f"its row for run {row[0]} ends at seq {row[7]}, which it does not locate")
        entry = self._located_entry(row[7], *location)
        if entry is None:
            entry = self._read_entry(*location)  # raises: the journal's record is damaged
        if isinstance(entry, str):
            raise self._misplaced(*location, entry)
        problem = (
            f"its row for run {row[0]} ends at seq {row[7]}, which is an entry of run {entry.run}"
            if entry.run != row[0]
            else self._head_problem(row, entry)
        )
        if problem is not None:
            raise self._tampered(problem)


def _misplaced_payload(digest: bytes, offset: int, length: int) -> str:
    return (
        f"it places payload {digest.hex()} at bytes {offset}-{offset + length}, which do "
        "not hold that payload's record"
    )
