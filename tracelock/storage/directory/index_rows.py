"""Handing the index rows of queued records to SQLite (in batches, once their records are
written), and bringing the index up to date before a read."""

from __future__ import annotations

import bisect
import sqlite3
from typing import Any

from tracelock.core.entry import TERMINAL_KINDS, Entry
from tracelock.storage.directory.index import Index, IndexedPayload
from tracelock.storage.directory.journal import ENTRY, PAYLOAD, Record, scan_records
from tracelock.storage.directory.locking import WriterLock
from tracelock.storage.failures import index_error

__all__ = ["IndexRows"]


class IndexRows(WriterLock):
    """Flushes pending index rows; prepares the index for reads and comparisons."""

    # -- index maintenance ---------------------------------------------------------------
    def _flush_pending_locked(self) -> None:
        """Move pending index rows whose bytes were written to SQLite. Holds ``_lock``."""
        log = self._log
        written = log.written_end if log is not None else 0
        pending = self._pending
        # Both lists are in journal order: split each at the first record not yet written.
        cut_entries = bisect.bisect_right(pending.entries, written, key=_end_of)
        cut_payloads = bisect.bisect_right(pending.payloads, written, key=_end_of)
        if not cut_entries and not cut_payloads:
            return
        entries = [item for _, item in pending.entries[:cut_entries]]
        payloads = [item for _, item in pending.payloads[:cut_payloads]]
        journal_end = max(
            pending.entries[cut_entries - 1][0] if cut_entries else 0,
            pending.payloads[cut_payloads - 1][0] if cut_payloads else 0,
        )
        del pending.entries[:cut_entries], pending.payloads[:cut_payloads]
        pending.runs = {entry.run for _, (entry, _) in pending.entries}
        with self._index_lock:
            try:
                self._add_rows(entries, payloads, journal_end)
            except sqlite3.Error as exc:
                # Those rows are lost to this handle: it is dead, and the next open indexes
                # the journal from where the index ends.
                raise self._fail(index_error(exc, self._path / "index.sqlite")) from None
        self._indexed_end = journal_end
        for entry, _ in entries:
            if entry.kind in TERMINAL_KINDS:
                self._closed_here.discard(entry.run)

    def _add_rows(self, entries: list[tuple[Entry, int]], payloads: list[IndexedPayload], journal_end: int) -> None:
        """Hand rows covering the journal from ``_indexed_end`` to ``journal_end`` to the
        index. Another process may have indexed some of these records already (they are
        skipped); if the index ends before them (rebuilt meanwhile by a process opening the
        store), the records in between are read from the journal and added first. Holds
        ``_index_lock``."""
        index = self._index
        while not index.add(entries, payloads, journal_end=journal_end, start=self._indexed_end):
            with index.transaction():
                covered = index.journal_end
                if covered >= self._indexed_end:
                    continue  # it moved on meanwhile: try the batch again
                gap_entries: list[tuple[Entry, int]] = []
                gap_payloads: list[IndexedPayload] = []
                for record in scan_records(self._file, covered, self._indexed_end):
                    if not isinstance(record, Record):
                        break
                    if record.kind == ENTRY:
                        gap_entries.append((self._read_line(record), record.offset))
                    elif record.kind == PAYLOAD:
                        gap_payloads.append((bytes.fromhex(record.data[1:65].decode()), record.offset, len(record.data)))
                index.add(gap_entries, gap_payloads, journal_end=self._indexed_end, start=covered)

    def _flush_index(self) -> None:
        if self._log is None:
            return
        self._log.flush()
        with self._lock:
            self._flush_pending_locked()

    # -- reading -----------------------------------------------------------------------
    def _prepare_read(self, run: str | None = None) -> None:
        """Index what this handle has pending before a read; for a read of one ``run``'s
        index row, only if an entry of that run is pending (other runs' rows wait for their
        batch: a runtime asks for the admin chain's info every quarter second, and indexing
        everything first cost whichever run asked a flush of up to a batch, 1-8 ms)."""
        self._check_open()
        if self._sealed is not None:
            self._sealed.begin_read()
        log = self._log
        if log is None or (
            log.queued_end == log.written_end and not self._pending.entries and not self._pending.payloads
        ):
            return  # nothing appended since the last read: the index is current
        if run is not None:
            with self._lock:
                if run not in self._pending.runs:
                    return
        self._flush_index()

    def catch_up(self) -> None:
        """Read what other processes appended, under the writer lock as an append does, and
        index it, so that this handle's next reads see it (a queue worker taking a run over
        calls it before reading the run's journal)."""
        if self._log is None:
            return
        with self._lock:
            self._check_open()
            if not self._held:
                self._hold_locked()
            self._release_if_idle_locked()
        self._flush_index()

    def index_to_compare(self) -> Index | None:
        """The on-disk index, for verification to compare with the journal; None when this
        handle answers from a private one (another process held the writer lock throughout
        its open, or the file was found altered at open: see ``index_problem``) or, for a
        reader, when another process keeps the lock throughout the tries of :meth:`_try_lock`.

        The comparison needs the index and the journal to end at the same record, so the
        handle takes the writer lock, brings the index up to the journal's end, and keeps
        the lock until it is closed: other processes' commits wait for the verification."""
        if not self._owns_lock or self.index_problem is not None or self._lock_fd is None:
            return None
        with self._lock:
            if self._log is not None:
                self._hold_locked()
                self._pinned = True
                self._log.flush()
                with self._index_lock:
                    self._flush_pending_locked()
                return self._index
            if not self._held:
                try:
                    self._try_lock(self._lock_fd)  # a busy writer lets go between commits
                except BlockingIOError:
                    return None
                self._held = True
            self._pinned = True
            with self._index_lock, self._index.transaction():
                self._catch_up()
            return self._index


def _end_of(item: tuple[int, Any]) -> int:
    return item[0]
