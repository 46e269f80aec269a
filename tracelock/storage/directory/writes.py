"""The write path: entries queued, built under the writer lock from the true tail (seq, run
heads, payload look-ups), written by the group commit and settled (synced where asked);
payload erasure."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from tracelock.core.entry import TERMINAL_KINDS, Entry, build_next
from tracelock.storage.backend import NO_PAYLOAD, NewEntry, stored_payload
from tracelock.storage.directory.index import IndexedPayload
from tracelock.storage.directory.journal import GroupCommitLog
from tracelock.storage.directory.merkle import MerkleQueries
from tracelock.storage.directory.state import NEWLINE
from tracelock.storage.errors import PayloadMissingError, StoreError
from tracelock.storage.failures import file_error

__all__ = ["Writes"]

#: The fields of a :class:`NewEntry` (run, kind, payload, meta, new_run): the single-entry
#: appends pass a plain tuple, cheaper to build than the named one.
_Item = tuple[str, str, Any, dict[str, Any] | None, bool]

_INDEX_BATCH = 2048
#: The batch of an event loop's appends (``append_async``): a flush runs on the loop's
#: thread, and a smaller one holds the loop for a few milliseconds, not tens.
_LOOP_INDEX_BATCH = 256


_T = TypeVar("_T")


def _done(value: _T) -> asyncio.Future[_T]:
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


class Writes(MerkleQueries):
    """Appends (sync and async), the group commit's build step, sync, and payload erasure."""

    # -- writing -----------------------------------------------------------------------
    def append(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        durable: bool = True,
        new_run: bool = False,
    ) -> Entry:
        out, end, backlog, done = self._enqueue(((run, kind, payload, meta, new_run),), write=not durable)
        if done:
            return out[0]
        return self._settle(out, end, backlog, durable)[0]

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        """Append ``items`` in one commit: one hold of the writer lock, one fence check per
        run, one write (and, ``durable``, one sync): a run's held entries and the entry
        that carries them cost what that entry alone does."""
        out, end, backlog, done = self._enqueue(items, write=not durable)
        if done:
            return out
        return self._settle(out, end, backlog, durable)

    def append_held(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> int:
        """Written at once, like ``append(..., durable=False)``: a write costs no flush here."""
        return self.append(run, kind, payload=payload, meta=meta, durable=False, new_run=new_run).ts

    def _settle(self, out: list[Entry], end: int, backlog: bool, durable: bool) -> list[Entry]:
        log = self._writer()
        try:
            if durable:
                log.wait_durable(end)
            else:
                # Written at once (not fsynced): a process crash loses nothing appended; only a
                # machine crash can lose what the next durability point had not covered yet.
                log.flush()
            if backlog:
                self._flush_index()
        except StoreError:
            # The handle is dead (its log failed): the writer lock goes at once, so that
            # other processes (`tracelock recover`) are not kept waiting for this one's end.
            with self._lock:
                self._release_if_idle_locked()
            raise
        self._release_if_idle()
        return out

    def append_async(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
        durable: bool = True,
    ) -> Awaitable[Entry]:
        """:meth:`append` for a coroutine, to be awaited: concurrent tasks of one event loop
        share each ``fdatasync`` (see ``GroupCommitLog.durable_future``). The entry is
        queued when this is called; the await returns it once it is durable. Not
        ``durable``: written at once, as :meth:`append` does, and the awaitable is done."""
        if not durable:
            return _done(self.append(run, kind, payload=payload, meta=meta, durable=False, new_run=new_run))
        out, end, backlog, _ = self._enqueue(((run, kind, payload, meta, new_run),))
        if backlog or len(self._pending.entries) >= _LOOP_INDEX_BATCH:
            self._flush_index()  # the rows of bytes already written (not yet this entry's)
        log = self._log
        assert log is not None  # _enqueue checked that this handle writes
        return log.durable_future(end, out[0])

    def append_many_async(self, items: Sequence[NewEntry], *, durable: bool = True) -> Awaitable[list[Entry]]:
        """:meth:`append_many` for a coroutine, like :meth:`append_async` (not ``durable``:
        written at once, and the awaitable is done)."""
        if not durable:
            return _done(self.append_many(items, durable=False))
        out, end, backlog, _ = self._enqueue(items)
        if backlog:
            self._flush_index()
        return self._writer().durable_future(end, out)

    def _enqueue(self, items: Sequence[_Item], *, write: bool = False) -> tuple[list[Entry], int, bool, bool]:
        """Build the entries and queue their bytes; return them, the queue's end, whether
        enough index rows are pending to be worth a flush, and whether the commit is over.

        ``write`` (an append without a sync, most of a run's entries): when no other thread
        writes or syncs, the entry is built, written and the writer lock let go in this one
        hold of ``_lock`` (the commit is then over); otherwise its bytes only queue, and the
        caller settles them as any append's, without holding the handle meanwhile.

        All or nothing: the handle's state (sequence, run heads, payload cache, pending
        index rows) changes only once every entry of the batch is built, so a bad item
        (an invalid kind, an ended run) fails the call with nothing half-applied.

        This is the whole CPU cost of an append, paid under the GIL by every writer, so it
        is written for speed: payloads are canonicalized before the lock, index rows wait
        as ``(entry, offset)`` pairs, and the bytes go to the log as one buffer.
        """
        log = self._writer()
        prepared = [stored_payload(item[2]) for item in items]
        with self._lock:
            if self._closed:
                self._check_open()  # raises
            if not self._held:
                self._hold_locked()
            try:
                self._check_guard(items)
                if len(items) > 1:
                    out, end, backlog, written = self._build_locked(items, prepared, log, write=write)
                else:
                    out, end, backlog, written = self._build_one(items[0], prepared[0], log, write=write)
            except BaseException:
                self._release_if_idle_locked()  # nothing of this call was queued
                raise
            done = written and not backlog
            if done:
                self._release_if_idle_locked()
            return out, end, backlog, done

    def _check_guard(self, items: Sequence[_Item]) -> None:
        """Raise what the append guard refuses of these items' runs. Holds the writer lock."""
        guard = self.append_guard
        if guard is not None:
            # Under the writer lock; nothing to read for runs this handle holds no lease on.
            # One look per run, however many of its entries the batch carries.
            runs = [items[0][0]] if len(items) == 1 else list(dict.fromkeys([item[0] for item in items]))
            refused = guard.refused(None, runs)
            if refused:
                raise next(iter(refused.values()))

    def _build_one(
        self, item: _Item, stored: tuple[bytes, bytes] | None, log: GroupCommitLog, *, write: bool
    ) -> tuple[list[Entry], int, bool, bool]:
        """:meth:`_build_locked` for a batch of one entry (every single append): the same
        checks, bytes and effects, without the batch's bookkeeping. ``write``: write the
        bytes at once when the log is idle (:meth:`GroupCommitLog.append_written`); the last
        value returned says whether they were."""
        run, kind, _, meta, new_run = item
        ts = self._clock()
        seq = self._next_seq
        offset = base = log.queued_end
        heads = self._heads
        payload_hex = None
        payload_row: IndexedPayload | None = None
        record = b""
        if stored is not None:
            data, digest = stored
            payload_hex = digest.hex()
            if (self._payloads_complete and digest not in self._payloads) or self._payload_location(digest) is None:
                mark, body = (b"=", data) if data else (b"-", b" ")
                length = len(body) + 66
                payload_row = (digest, offset, length)
                record = b"".join((mark, payload_hex.encode(), b" ", body, NEWLINE))
                offset += length + 1
        if new_run:
            if run in heads or run in self._closed_here:
                raise StoreError(f"run {run!r} already exists", details={"run": run})
            head = None
        else:
            head = heads.get(run) or self._head(run)
        entry = build_next(seq, run, head, kind, payload_hex, ts, meta)
        line = entry.line
        end = offset + len(line) + 1
        data = record + line + NEWLINE if record else line + NEWLINE
        if write:
            start, written = log.append_written(data)
        else:
            start, written = log.enqueue(data), False
        assert start == base, "journal offsets diverged from the queue"
        self._next_seq = seq + 1
        pending = self._pending
        if payload_row is not None:
            self._remember_payload(*payload_row)
            pending.payloads.append((offset, payload_row))
        entries = pending.entries
        entries.append((end, (entry, offset)))
        pending.runs.add(run)
        if kind in TERMINAL_KINDS:
            heads.pop(run, None)
            self._closed_here.add(run)
        else:
            heads[run] = (entry.i, entry.hash)
        # The queue's end: every enqueue happens under ``_lock``, which this holds.
        return [entry], end, len(entries) >= _INDEX_BATCH, written

    def _build_locked(
        self, items: Sequence[_Item], prepared: list[tuple[bytes, bytes] | None], log: GroupCommitLog, *, write: bool
    ) -> tuple[list[Entry], int, bool, bool]:
        """The body of :meth:`_enqueue` for a batch, under ``_lock`` and the writer lock;
        ``write`` as for :meth:`_build_one`."""
        ts = self._clock()
        seq = self._next_seq
        offset = base = log.queued_end
        heads = self._heads
        cache, complete = self._payloads, self._payloads_complete
        # This batch's effects, applied at the end. A run's head is None once closed.
        touched: dict[str, tuple[int, str] | None] = {}
        fresh: set[bytes] = set()  # payloads this batch stores
        payload_rows: list[tuple[int, IndexedPayload]] = []
        entry_rows: list[tuple[int, tuple[Entry, int]]] = []
        chunks: list[bytes] = []
        out: list[Entry] = []
        for (run, kind, _, meta, new_run), stored in zip(items, prepared, strict=True):
            payload_hex = None
            if stored is not None:
                data, digest = stored
                payload_hex = digest.hex()
                if digest not in fresh and (
                    # A new payload while every payload is cached: the usual miss,
                    # answered inline; anything else takes the full look-up.
                    (complete and digest not in cache) or self._payload_location(digest) is None
                ):
                    # Empty data (never canonical JSON) is a redacted payload: an
                    # erased record of one blank byte.
                    mark, body = (b"=", data) if data else (b"-", b" ")
                    length = len(body) + 66
                    fresh.add(digest)
                    payload_rows.append((offset + length + 1, (digest, offset, length)))
                    chunks += (mark, payload_hex.encode(), b" ", body, b"\n")
                    offset += length + 1
            if new_run:
                if run in touched or run in heads or run in self._closed_here:
                    raise StoreError(f"run {run!r} already exists", details={"run": run})
                head = None
            elif run in touched:
                head = touched[run]
                if head is None:
                    raise _ended(run)
            else:
                head = heads.get(run) or self._head(run)
            entry = build_next(seq, run, head, kind, payload_hex, ts, meta)
            line = entry.line
            chunks += (line, b"\n")
            end = offset + len(line) + 1
            entry_rows.append((end, (entry, offset)))
            offset = end
            seq += 1
            touched[run] = None if kind in TERMINAL_KINDS else (entry.i, entry.hash)
            out.append(entry)
        if write:
            start, written = log.append_written(b"".join(chunks))
        else:
            start, written = log.enqueue(b"".join(chunks)), False
        assert start == base, "journal offsets diverged from the queue"
        self._next_seq = seq
        for _, (digest, at, length) in payload_rows:
            self._remember_payload(digest, at, length)
        pending = self._pending
        pending.payloads += payload_rows
        pending.entries += entry_rows
        pending.runs.update(touched)
        for run, head in touched.items():
            if head is None:
                heads.pop(run, None)
                self._closed_here.add(run)
            else:
                heads[run] = head
        return out, offset, len(pending.entries) >= _INDEX_BATCH, written

    def _head(self, run: str) -> tuple[int, str] | None:
        """The run's last (index, hash), or None for a new run. Holds ``_lock``.

        Every run this handle appended to or caught up on (another process's entries,
        read under the writer lock before building) is in ``_heads`` (open) or
        ``_closed_here`` (closed, index rows maybe pending), so the index is only asked
        about runs with no entry since this handle opened, whose rows are all in SQLite.
        """
        head = self._heads.get(run)
        if head is not None:
            return head
        closed = run in self._closed_here
        if not closed:
            with self._index_lock:
                row = self._index.run_row(run)
                if row is None:
                    return None
                # The next entry commits to this head: a wrong one would be written into
                # the journal as a broken chain, so it is checked against the journal first.
                self._check_head(row)
            last_i, last_hash, closed = row[8] - 1, row[9], bool(row[10])
            if not closed:
                self._heads[run] = (last_i, last_hash)
                return last_i, last_hash
        raise _ended(run)

    def sync(self) -> None:
        """Make everything appended so far durable."""
        self._writer().wait_durable()
        self._flush_index()
        self._release_if_idle()

    def sync_async(self) -> Awaitable[None]:
        """:meth:`sync` for a coroutine: shares the loop's next commit (``durable_future``)."""
        log = self._writer()
        return log.durable_future(log.queued_end, None)

    def erase_payload(self, digest: str) -> bool:
        """Overwrite a payload's bytes in place (same length; ``=`` becomes ``-``, data
        becomes spaces) and sync. Call it after appending the redaction entry, so that a
        crash in between leaves a recorded redaction still to be completed, never an
        unexplained hole. Returns False if the payload was already erased."""
        log = self._writer()
        raw = bytes.fromhex(digest)
        log.wait_durable()
        self._flush_index()
        # Under the writer lock: another process catching up must never read the record
        # half erased.
        with self._lock:
            self._hold_locked()
            try:
                location = self._payload_location(raw)
                if location is None:
                    raise PayloadMissingError(f"payload {digest} is not stored")
                offset, length = location
                current = self._file.pread(length, offset)
                if current[:1] == b"-":
                    return False
                blank = b"-" + current[1:66] + b" " * (length - 66)
                written = 0
                try:
                    while written < len(blank):
                        written += self._file.pwrite(blank[written:], offset + written)
                    self._file.fdatasync()
                except OSError as exc:
                    raise self._fail(file_error(exc, f"erasing payload {digest} failed")) from None
                return True
            finally:
                self._release_if_idle_locked()


def _ended(run: str) -> StoreError:
    return StoreError(f"run {run!r} has ended; nothing can be appended to it", details={"run": run})
