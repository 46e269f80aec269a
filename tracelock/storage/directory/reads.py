"""Reads: runs and their entries (a run's entries read with few preads), entries by sequence
number, journal records in order, payloads (one or many) and their state, the footprint."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from tracelock.core.entry import ADMIN_RUN, TERMINAL_KINDS, Entry
from tracelock.storage.backend import RunInfo, StoreFootprint
from tracelock.storage.directory.disk_usage import store_parts
from tracelock.storage.directory.index import SCHEMA_VERSION, typed_run_row
from tracelock.storage.directory.index_rows import IndexRows
from tracelock.storage.directory.journal import ENTRY, PAYLOAD, REDACTED, Record, scan_records
from tracelock.storage.directory.state import BATCH_READ_BYTES, whole_record
from tracelock.storage.errors import (
    JournalCorruptError,
    PayloadMissingError,
    PayloadRedactedError,
    RunNotFoundError,
    StoreError,
)
from tracelock.storage.run_fold import RunRow, row_difference

__all__ = ["Reads"]


class Reads(IndexRows):
    """The store's read API."""

    def flush(self) -> None:
        """Hand everything appended so far to the file and the index (no fsync)."""
        self._prepare_read()
        self._release_if_idle()

    def size(self) -> int:
        self._prepare_read()
        with self._index_lock:
            return self._index.entry_count

    def runs(
        self,
        *,
        limit: int | None = None,
        status: str | None = None,
        offset: int = 0,
        agent: str | None = None,
        text: str | None = None,
    ) -> list[RunInfo]:
        self._prepare_read()
        with self._index_lock:
            return self._index.runs(
                limit=limit, status=status, offset=offset, agent=agent, text=text, exclude=ADMIN_RUN
            )

    def run_info(self, run: str) -> RunInfo:
        self._prepare_read(run)
        with self._index_lock:
            row = self._index.run(run)
            full = self._index.run_row(run)
            if full is not None:
                self._check_head(full)
        if row is None:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._path}")
        return row

    def entries(self, run: str) -> list[Entry]:
        self._prepare_read()
        with self._index_lock:
            row, locations, spots = self._index.run_row_and_locations(run)
        if not locations and row is None:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._path}")
        entries = self._read_entries(locations)
        problem = _run_problem(run, row, entries) or _payloads_problem(run, entries, spots)
        if problem is not None:
            raise self._tampered(problem)
        assert spots is not None  # _payloads_problem checked it
        # A location of length 0 is one the index has no row for: looked up as any other.
        self._run_payloads = {
            entry.payload: spot for entry, spot in zip(entries, spots, strict=True) if entry.payload and spot and spot[1]
        }
        return entries

    def entry_at(self, seq: int) -> Entry:
        self._prepare_read()
        with self._index_lock:
            location = self._index.entry_location(seq)
        if location is None:
            raise StoreError(f"no entry with seq {seq}")
        entry = self._located_entry(seq, *location)
        if entry is None:
            return self._read_entry(*location)  # raises: the journal's record is damaged
        if isinstance(entry, str):
            raise self._misplaced(*location, entry)
        return entry

    def iter_records(self, start_offset: int = 0) -> Iterator[Record | tuple[int, bytes]]:
        """Every record of the journal file from ``start_offset`` to the end of the file,
        damaged ones included (verification reads the file, not the index)."""
        self._prepare_read()
        return scan_records(self._file, start_offset, None)

    def iter_entries(self, start_seq: int = 0) -> Iterator[Entry]:
        self._prepare_read()
        with self._index_lock:
            start = self._entry_start(start_seq) if start_seq else 0
            end = self._index.journal_end
        if start is None:
            return
        for record in scan_records(self._file, start, end):
            if isinstance(record, Record) and record.kind == ENTRY:
                yield self._read_line(record)

    def footprint(self) -> StoreFootprint:
        self._prepare_read()
        with self._index_lock:
            runs, open_runs = self._index.run_counts(exclude=ADMIN_RUN)
            entries = self._index.entry_count
            data_end = self._index.journal_end
        parts, segments = store_parts(self._path)
        sealed_end = self._sealed.sealed_end if self._sealed is not None else 0
        details = {
            "format_version": self._format_version,
            "index_schema": int(SCHEMA_VERSION),
            "journal_bytes": data_end,
            "segment_files": segments,
            "sealed_end": sealed_end,
            "unsealed_bytes": max(0, data_end - sealed_end),
            "seal_every_bytes": self._seal_bytes,
        }
        return StoreFootprint(runs, open_runs, entries, parts, details)

    def payload_state(self, digest: str) -> str:
        self._prepare_read()
        with self._lock:
            location = self._payload_location(bytes.fromhex(digest), reading=True)
        if location is None:
            return "missing"
        head = self._file.pread(1, location[0])
        return "redacted" if head == b"-" else "present"

    def payload_state_before(self, digest: str, before: int) -> str:
        """Like :meth:`payload_state`, but only a record that starts before byte ``before``
        and whose bytes match the hash counts (used by verification, which trusts no index)."""
        with self._index_lock:
            location = self._index.payload_location(bytes.fromhex(digest))
        if location is not None and location[0] < before and self._payload_record_problem(bytes.fromhex(digest), *location) is None:
            record = self._file.pread(location[1], location[0])
        else:
            # Not where the index says (if it says): a wrong index must not make a payload
            # look missing either, so the journal itself is searched (the index comparison
            # of verification then reports the index).
            found = next(
                (
                    item
                    for item in scan_records(self._file, 0, before)
                    if isinstance(item, Record) and item.kind in (PAYLOAD, REDACTED) and item.data[1:65] == digest.encode()
                ),
                None,
            )
            if found is None:
                return "missing"
            record = found.data
        if record[:1] == b"-" and record[1:65] == digest.encode():
            return "redacted"
        if record[:1] == b"=" and hashlib.sha256(record[66:]).hexdigest() == digest:
            return "present"
        return "missing"

    def get_payload_bytes(self, digest: str) -> bytes:
        self._prepare_read()
        return self._payload_bytes(digest)

    def get_payloads_bytes(self, digests: Sequence[str]) -> dict[str, bytes]:
        """A run's payloads lie close together in the journal: those this handle can locate
        without the index (its cache, the run read last) are read in one read when they fit
        in :data:`BATCH_READ_BYTES`, each checked as one whole record of its payload; any
        other, or one that fails that check, takes :meth:`_payload_bytes` (which says what
        is wrong with it)."""
        self._prepare_read()
        found: dict[str, bytes] = {}
        for digest, record in self._nearby_payload_records(digests):
            data = record[66:]
            if record[:1] == b"=" and hashlib.sha256(data).hexdigest() == digest:
                found[digest] = data
        for digest in digests:
            if digest not in found:
                with contextlib.suppress(PayloadRedactedError, PayloadMissingError):
                    found[digest] = self._payload_bytes(digest)
        return found

    def _nearby_payload_records(self, digests: Sequence[str]) -> list[tuple[str, bytes]]:
        """(digest, whole record) of those of ``digests`` located from memory, read
        together; none when fewer than two are, or they lie too far apart."""
        spots: list[tuple[str, int, int]] = []
        run_payloads = self._run_payloads
        with self._lock:
            cache = self._payloads
            for digest in dict.fromkeys(digests):
                location = run_payloads.get(digest) or cache.get(bytes.fromhex(digest))
                if location is not None:
                    spots.append((digest, *location))
        if len(spots) < 2:
            return []
        low = min(offset for _, offset, _ in spots)
        high = max(offset + length for _, offset, length in spots)
        base = low - 1 if low else 0
        if high + 1 - base > BATCH_READ_BYTES:
            return []
        block = self._file.pread(high + 1 - base, base)
        out = []
        for digest, offset, length in spots:
            before = 1 if offset else 0
            start = offset - before - base
            record = whole_record(block[start : start + length + 1 + before], before, length, digest.encode())
            if record is not None:
                out.append((digest, record))
        return out

    def _payload_bytes(self, digest: str) -> bytes:
        """:meth:`get_payload_bytes` once the read is prepared."""
        raw = bytes.fromhex(digest)
        # A payload this handle wrote or read lately is located from memory, one of the run
        # read last from what the query that located its entries gave: no query. Only any
        # other payload is looked up in the index by its hash.
        with self._lock:
            cached = self._payloads.get(raw)
        found = None if cached is None else (cached[0], self._file.pread(cached[1], cached[0]))
        if found is None:
            found = self._run_payload_record(digest)
        if found is None:
            with self._lock:
                location = self._payload_location(raw, reading=True)
            if location is None:
                raise PayloadMissingError(
                    f"payload {digest} is not in the store", details={"payload": digest}
                )
            found = location[0], self._file.pread(location[1], location[0])
        offset, record = found
        if record[:1] == b"-":
            raise PayloadRedactedError(
                f"payload {digest} was redacted", details={"payload": digest}
            )
        data = record[66:]
        if record[:1] != b"=" or hashlib.sha256(data).hexdigest() != digest:
            raise JournalCorruptError(
                f"payload {digest} at byte {offset} does not match its hash",
                details={"payload": digest, "offset": offset},
            )
        return data

    def get_payload(self, digest: str) -> Any:
        return orjson.loads(self.get_payload_bytes(digest))


def _payloads_problem(run: str, entries: list[Entry], spots: list[tuple[int, int] | None] | None) -> str | None:
    """What the payload locations the index gives for a run's entries contradict."""
    if spots is None or len(spots) != len(entries):
        return f"its payload locations for run {run} do not fit the run's entries"
    for entry, spot in zip(entries, spots, strict=True):
        if (entry.payload is None) != (spot is None):
            return (
                f"it says entry {entry.seq} (run {run}) names {'no' if spot is None else 'a'} payload, "
                f"which the entry {'does' if spot is None else 'does not'}"
            )
    return None


def _run_problem(run: str, row: tuple[Any, ...] | None, entries: list[Entry]) -> str | None:
    """What a run's row and entry locations state that its entries (read at those
    locations) contradict."""
    status, agent, parent = "created", None, None
    for position, entry in enumerate(entries):
        if entry.run != run or entry.i != position:
            return (
                f"it lists the entry at seq {entry.seq} (run {entry.run}, index {entry.i}) as entry "
                f"{position} of run {run}"
            )
        meta = entry.meta
        if meta:
            value = meta.get("status")
            if isinstance(value, str):
                status = value
            if position == 0 and isinstance(meta.get("agent"), str):
                agent = meta["agent"]
    if row is None:
        return f"it lists entries of run {run} but has no row for it"
    if not entries:
        return f"it has a row for run {run} but no entry locations"
    first, last = entries[0], entries[-1]
    if first.meta and isinstance(first.meta.get("parent"), str):
        parent = first.meta["parent"]
    actual: RunRow = (
        run, agent, parent, status, first.ts, last.ts, first.seq, last.seq, len(entries), last.hash,
        int(last.kind in TERMINAL_KINDS),
    )
    return None if row == actual else row_difference(typed_run_row(row), actual)
