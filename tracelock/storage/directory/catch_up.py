"""Bringing a handle's index up to the journal: at open (using ``index.sqlite`` when it is in
step and sound, a private index otherwise), and under the writer lock after other processes'
commits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tracelock.core.entry import TERMINAL_KINDS, ChainChecker, Entry
from tracelock.storage.directory.index import LOCATION, Index, IndexedPayload
from tracelock.storage.directory.journal import PAYLOAD, data_end
from tracelock.storage.directory.state import NEWLINE, NUL
from tracelock.storage.directory.tail import TailJudge

__all__ = ["CatchUp"]

#: How many of the newest entry locations an open checks against the journal.
_SPOT_CHECK = 64

#: What SQLite says of an index file that is damaged (rebuilt), rather than unusable here.
_DAMAGED_INDEX = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class CatchUp(TailJudge):
    """Opens the index and catches it (and the handle's heads and payload look-ups) up with the journal."""

    def _catch_up_others(self) -> None:
        """Read what other processes appended since this handle's last commit, under the
        writer lock, before this handle builds entries: check it as the open does (the
        chain, every payload reference; a torn tail left by a killed writer is judged by the
        repair rule), and follow it: sequence number, run heads, payload look-ups, and
        index rows (queued with this handle's own, in journal order). Holds ``_lock``."""
        log = self._log
        assert log is not None
        start = log.written_end
        probe = self._file.pread(1, start)
        if probe == NUL:
            return  # free space: nobody wrote since
        if not probe:
            log.reallocated()  # the file ends here: another handle cut the free space
            return
        synced = self._mark.read() if self._mark is not None else None
        size = self._data_end_after(start)
        start_seq = self._next_seq
        checker = ChainChecker(
            start_seq,
            lookup=lambda run: self._known_head(run, start_seq, start),
            closed=lambda run: self._ended_before(run, start_seq),
        )
        rows: list[tuple[int, tuple[Entry, int]]] = []
        payload_rows: list[tuple[int, IndexedPayload]] = []
        end = start
        repaired = len(self._repairs)
        for item, entry in self._sound_records(start, size, checker, synced):
            end = item.end
            if entry is not None:
                rows.append((end, (entry, item.offset)))
            else:
                payload_rows.append((end, (bytes.fromhex(item.data[1:65].decode()), item.offset, len(item.data))))
        heads = self._heads
        for _, (entry, _) in rows:
            if entry.kind in TERMINAL_KINDS:
                heads.pop(entry.run, None)
                self._closed_here.add(entry.run)
            else:
                heads[entry.run] = (entry.i, entry.hash)
        for _, (digest, at, length) in payload_rows:
            self._remember_payload(digest, at, length)
        self._pending.entries += rows
        self._pending.payloads += payload_rows
        self._pending.runs.update(entry.run for _, (entry, _) in rows)
        self._next_seq = checker.next_seq
        # A repair synced the cut; otherwise the mark says what the others synced.
        durable = end if len(self._repairs) > repaired else min(synced or 0, end)
        log.rebase(end, durable)
        shared = self._mark.shared if self._mark is not None else None
        if shared is not None:
            shared.reset(end)  # a cut tail, or another tracelock's appends

    def _data_end_after(self, start: int) -> int:
        """Where the data other processes appended after ``start`` ends: the first NUL byte
        (free space) or the end of the file, read forward. Between live processes the data
        is contiguous (a killed writer's write is cut short, never holed: only a power cut
        leaves NUL blocks inside data, and no process that opened the store before one is
        still running), so this reads what was appended and one block more, where
        :func:`data_end` would read the whole free space back from the end of the file."""
        position = start
        while True:
            chunk = self._file.pread(1 << 16, position)
            if not chunk:
                return position
            cut = chunk.find(NUL)
            if cut >= 0:
                return position + cut
            position += len(chunk)

    def _ended_before(self, run: str, before_seq: int) -> bool:
        """Whether ``run`` ended before entry ``before_seq`` (chain rule 4: nothing of it may
        follow), by this handle's knowledge or the index's."""
        if run in self._closed_here:
            return True
        with self._index_lock:
            row = self._index.run_row(run)
        return row is not None and bool(row[10]) and row[7] < before_seq

    def _known_head(self, run: str, before_seq: int, before: int) -> tuple[int, str] | None:
        """A run's head as of entry ``before_seq`` at byte ``before`` (where a catch-up
        starts): this handle's own knowledge first, else the index, whose row may already
        count entries after that point (another process indexed them): the run's last entry
        before it is read then."""
        head = self._heads.get(run)
        if head is not None or run in self._closed_here:
            return head
        with self._index_lock:
            row = self._index.run_row(run)
            if row is None:
                return None
            if row[7] < before_seq:
                return None if row[10] else (row[8] - 1, row[9])
            locations = self._index.entry_locations(run)
        prior = [location for location in locations if location[0] < before]
        if not prior:
            return None
        entry = self._read_entry(*prior[-1])
        return None if entry.kind in TERMINAL_KINDS else (entry.i, entry.hash)

    def _index_journal(self) -> int:
        """Bring the index up to the journal at open (:meth:`_catch_up`); return where the
        journal's data ends. A reader that may not write ``index.sqlite`` (a read-only
        store, or a full disk) indexes the journal privately instead, as when another
        process holds the lock."""
        try:
            self._index = self._open_index()
            return self._catch_up_at_open()
        except sqlite3.Error as exc:
            if not self._read_only:
                raise
            index = getattr(self, "_index", None)
            if index is not None:
                index.close()
            self._index_writable = False
            self._owns_lock = False
            self.private_index_reason = f"this process cannot write the store's index ({exc})"
            self._index = self._open_index()
            return self._catch_up_at_open()

    def _catch_up_at_open(self) -> int:
        with self._index.transaction():
            end = self._catch_up()
            self._next_seq = self._index.entry_count
            self._payloads_complete = not self._index.has_payloads()
        return end

    def _open_index(self) -> Index:
        path = self._path / "index.sqlite"
        if not self._owns_lock or not self._index_writable:
            return self._new_index(Path(":memory:"))
        try:
            return self._new_index(path)
        except sqlite3.DatabaseError as exc:  # a damaged cache is rebuilt, never trusted
            code = getattr(exc, "sqlite_errorcode", None)
            if code is not None and code & 0xFF not in _DAMAGED_INDEX:
                raise  # a file this process may not write, a full disk: not damage
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            return self._new_index(path)

    def _index_usable(self, size: int, synced: int | None) -> bool:
        """Whether the index can be caught up from where it ends (False: rebuild it).

        Stale, to be rebuilt: it ends past the journal's data, or covers bytes from the
        synced mark on that do not all hold data (it is never synced: after a power cut it
        may describe records that never reached the disk). Otherwise it covers only bytes
        that were written, and what it says about them must be true: a contradiction found
        by the spot checks of :meth:`_spot_check` is tampering (``IndexTamperedError``).
        """
        end = self._index.journal_end
        count = self._index.entry_count
        if end > size:
            return False
        position = synced or 0
        while position < end:
            chunk = self._file.pread(min(1 << 20, end - position), position)
            if not chunk or NUL in chunk:
                return False
            position += len(chunk)
        if count == 0:
            return end == 0
        problem = self._spot_check(end, count)
        if problem is None:
            return True
        if not problem:
            return False  # the journal changed under the index: its scan judges it
        if self._journal_damaged(size, synced):
            # The journal's own damage is the verdict, as without an index (the scan that
            # follows reports it): the index is blamed only when the journal is sound.
            return False
        if not self._read_only:
            raise self._tampered(problem)
        # A reader changes nothing: it notes the lie and answers from a private index.
        self.index_problem = self._tampered(problem).message
        self._index.close()
        self._index = self._new_index(Path(":memory:"))
        return False

    def _journal_damaged(self, size: int, synced: int | None) -> bool:
        """Whether the journal holds damage a writer refuses to open with, judged from its
        start as without an index; nothing is repaired, indexed or noted. Run only when the
        index contradicts the journal at open (rare: a whole pass)."""
        if synced is not None and synced > size:
            return True
        read_only, damage, fragment = self._read_only, self.damage, self._tail_fragment
        self._read_only, self.damage = True, None  # judge as a reader: report, never repair
        try:
            for _ in self._sound_records(0, size, ChainChecker(0), synced):
                pass
            return self.damage is not None
        finally:
            self._read_only, self.damage, self._tail_fragment = read_only, damage, fragment

    def _spot_check(self, end: int, count: int) -> str | None:
        """Cheap checks at open (a few reads, never the whole journal): the index ends at a
        record boundary, its newest entry locations hold those entries, the last one with
        the hash it records, and that entry's run row agrees with it.

        None when they pass; what is wrong when the index contradicts the journal; "" when
        the journal's own records are what changed (a record there is no valid entry, or
        the index agrees with itself about a last entry the journal holds otherwise): the
        index is then rebuilt and the journal judged by the scan, as without an index."""
        if self._file.pread(1, end - 1) != NEWLINE:
            return f"it ends at byte {end}, which is not the end of a journal record"
        block = self._index.last_block()
        if block is None or block[0] + len(block[1]) // LOCATION.size != count:
            return f"it counts {count} entries but holds locations for another number"
        first_seq, blob = block
        checked = min(_SPOT_CHECK, len(blob) // LOCATION.size)
        last: Entry | None = None
        for seq in range(count - checked, count):
            offset, length = LOCATION.unpack_from(blob, (seq - first_seq) * LOCATION.size)
            entry = self._located_entry(seq, offset, length)
            if entry is None:
                return ""
            if isinstance(entry, str):
                return entry
            last = entry
        assert last is not None
        row = self._index.run_row(last.run)
        if last.hash != self._index.last_hash:
            if row is not None and row[9] == self._index.last_hash:
                return ""
            return f"it records hash {self._index.last_hash} for entry {last.seq}, the journal holds {last.hash}"
        problem = self._head_problem(row, last)
        if problem is None and row is not None and last.meta is not None:
            status = last.meta.get("status")
            if isinstance(status, str) and row[3] != status:
                problem = f"run {last.run} is {row[3]!r} in it, its last entry says {status!r}"
        return problem

    def _catch_up(self) -> int:
        """Bring the index up to the journal's end; repair an unacknowledged tail if writing.

        Returns the offset at which new records will be appended. What may be repaired is
        decided by the journal and the synced mark alone, never by the index
        (``docs/spec.md`` section 3.5, :meth:`_judge_tail`).
        """
        # The mark before the size: a writer beside this reader only ever moves both forward.
        synced = self._mark.read() if self._mark is not None else None
        size = data_end(self._file)
        if synced is not None and synced > size:
            self._corrupt(
                size,
                f"the journal's data ends at byte {size}, before the {synced} bytes the store "
                "recorded as synced: acknowledged records are missing",
                synced,
            )
        if not self._index_usable(size, synced):
            self._index.reset()
        start = self._index.journal_end
        checker = ChainChecker(self._index.entry_count, lookup=self._index.head, closed=self._index.has_ended)
        entries: list[tuple[Entry, int]] = []
        payloads: list[IndexedPayload] = []
        end = start
        for item, entry in self._sound_records(start, size, checker, synced):
            end = item.end
            if entry is not None:
                entries.append((entry, item.offset))
            elif item.kind == PAYLOAD:
                payloads.append((bytes.fromhex(item.data[1:65].decode()), item.offset, len(item.data)))
            if len(entries) + len(payloads) >= 50_000:
                self._index.add(entries, payloads, journal_end=end)
                entries, payloads = [], []
        if entries or payloads or end != self._index.journal_end:
            self._index.add(entries, payloads, journal_end=end)
        return end

    def _use_index_file(self) -> None:
        """A reader that opened with a private index switches to ``index.sqlite``, brought
        up to the journal; it keeps the private one when it may not write the file.
        Holds the writer lock and ``_index_lock``."""
        private = self._index
        self._owns_lock = True
        try:
            self._index = self._open_index()
            with self._index.transaction():
                self._catch_up()
        except sqlite3.Error as exc:
            if self._index is not private:
                self._index.close()
            self._index = private
            self._owns_lock = False
            self._index_writable = False
            self.private_index_reason = f"this process cannot write the store's index ({exc})"
            return
        private.close()
        self.private_index_reason = None
