"""The journal file: append-only records, group commit, streaming reads, tail repair.

The file holds two kinds of newline-terminated records:

* entry lines: canonical JSON objects (they start with ``{``), see ``tracelock.core.entry``;
* payload records: ``=`` + 64 hex digits (SHA-256 of the data) + one space + the payload's
  canonical JSON bytes. A redacted payload keeps its place and length: the ``=`` becomes
  ``-`` and the data bytes become spaces.

Canonical JSON never contains a raw newline, so records split unambiguously on ``\\n``.
Payloads live in the same file as entries so that one ``fdatasync`` makes both durable.

The writer keeps free space at the end of the file, filled with NUL bytes ahead of the data
(see ``GroupCommitLog``): overwriting blocks that already exist lets an ``fdatasync`` skip
the file-system metadata commit that growing the file would need. No record
contains a NUL byte (canonical JSON escapes it), so the journal's data ends where the file's
all-NUL suffix begins: :func:`data_end`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from tracelock.storage.directory.fileio import JournalFile, OSFile
from tracelock.storage.directory.sealed import SealedJournal
from tracelock.storage.directory.synced_mark import SyncedMark
from tracelock.storage.errors import DurabilityError, StoreClosedError, StoreError, StoreFullError

__all__ = ["ENTRY", "PAYLOAD", "REDACTED", "GroupCommitLog", "Record", "data_end", "scan_records"]

ENTRY = "entry"
PAYLOAD = "payload"
REDACTED = "redacted"

_READ_CHUNK = 1 << 20
_NUL_CHUNK = bytes(_READ_CHUNK)
_NUL = b"\0"
_BLOCK = 4096
_MIN_GROWTH = 64 << 10
_MAX_GROWTH = 16 << 20
_T = TypeVar("_T")


def _as_file(source: int | JournalFile) -> JournalFile:
    return OSFile(source) if isinstance(source, int) else source


def data_end(source: int | JournalFile, size: int | None = None) -> int:
    """Where the journal's data ends: the file's size less its all-NUL suffix (free space).
    ``source`` is a file descriptor or an open :class:`JournalFile`. Sealed bytes are data
    (docs/spec.md 3.8): the search stops at the sealed end without reading a segment."""
    file = _as_file(source)
    floor = file.sealed_end if isinstance(file, SealedJournal) else 0
    end = file.size() if size is None else size
    while end > floor:
        step = min(_READ_CHUNK, end - floor)
        chunk = file.pread(step, end - step)
        if not chunk:
            break
        # Free space is most of what is read (megabytes, ahead of a live writer's data): a
        # whole chunk of NULs is told by one comparison, a hundred times faster than rstrip.
        if len(chunk) == _READ_CHUNK and chunk == _NUL_CHUNK:
            end -= len(chunk)
            continue
        kept = len(chunk.rstrip(_NUL))
        end -= len(chunk) - kept
        if kept:
            break
    return max(end, floor)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the journal file: where it starts, what it is, and its bytes (no newline)."""

    offset: int
    kind: str
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + len(self.data) + 1


def classify(line: bytes) -> str | None:
    """The record kind of a complete line, or None when it fits no record shape."""
    if line[:1] == b"{":
        return ENTRY
    if len(line) >= 67 and line[65:66] == b" ":
        if line[:1] == b"=":
            return PAYLOAD
        if line[:1] == b"-":
            return REDACTED
    return None


def scan_records(
    source: int | JournalFile, start: int, end: int | None = None
) -> Iterator[Record | tuple[int, bytes]]:
    """Yield the records between byte offsets ``start`` and ``end`` (default: :func:`data_end`).

    A trailing fragment with no newline is yielded last as ``(offset, bytes)``: it is not a
    record (a torn write, or an append in progress by another process).
    """
    file = _as_file(source)
    offset = start
    pending = b""
    limit = end if end is not None else data_end(file)
    position = start
    while position < limit:
        chunk = file.pread(min(_READ_CHUNK, limit - position), position)
        if not chunk:
            break
        position += len(chunk)
        buffer = pending + chunk if pending else chunk
        lines = buffer.split(b"\n")
        pending = lines.pop()
        for line in lines:
            kind = classify(line)
            yield Record(offset, kind if kind is not None else "garbage", line)
            offset += len(line) + 1
    if pending:
        yield (offset, pending)


class _Waiter:
    """A caller waiting for its bytes to be written (or synced), or for its turn to lead.

    It blocks on a plain lock that it holds from birth, which the waker releases: cheaper
    than an ``Event`` (no condition variable), and it re-arms itself when acquired.
    """

    __slots__ = ("gate", "goal", "lead", "sync")

    def __init__(self, goal: int, sync: bool) -> None:
        self.goal = goal
        self.sync = sync
        self.gate = threading.Lock()
        self.gate.acquire()
        self.lead = False

    def wake(self) -> None:
        if self.gate.locked():
            self.gate.release()


#: How many coroutines a commit wakes per turn of their event loop (see ``_wake``).
WAKE_SLICE = 16


class GroupCommitLog:
    """Appends bytes to one file; concurrent callers share each ``write`` and ``fdatasync``.

    Callers enqueue bytes (``enqueue``) under their own ordering lock, then ask for them to be
    written (``flush``) or made durable (``wait_durable``) without it. One caller at a time
    leads: it writes everything queued so far and, if anyone needs it, fsyncs it, then wakes
    exactly the callers whose bytes that covered and hands the lead to the next one still
    waiting. Bytes enqueued during a sync ride on the next one. Nobody waits on a timer, and
    no wake-up is wasted on a caller whose bytes are not yet covered. Any write or sync
    error poisons the log: every waiter and every later call gets the same
    :class:`DurabilityError`.

    Coroutines wait on :meth:`durable_future`: the waits of one event loop are
    gathered and settled by one commit that runs on that loop once the tasks ready to run
    have run, so concurrent tasks share an ``fdatasync`` without any thread hand-off.

    Free space: the file is grown ahead of the data by writing NUL bytes (never
    ``fallocate``: ext4 marks such blocks "unwritten", and converting them on first use is
    a metadata change again), so that the common ``fdatasync`` overwrites blocks the file
    already has and need not commit a new file size through the file-system journal: that
    roughly halves its cost. :meth:`close` cuts the free space off again. Readers find the
    end of the data with :func:`data_end`.

    After every completed sync the leader records the durable length in the store's synced
    mark (``mark``, one unsynced 16-byte write, when it raises it), before the callers it
    covered are woken: opening a store after a crash tells an unfinished write from damage
    by it, and another process whose bytes that sync covered need not sync again.

    Several processes may append to one file, one write at a time: the store holds its
    writer lock whenever this log has bytes queued or being written, and before queueing
    the first of them tells the log where the file's data truly ends (:meth:`rebase`, after
    other processes appended). :meth:`placed` says when the lock may be released: before
    the sync (``before_sync``, set by the store, lets it go there), so that processes share
    flushes as threads do (:meth:`_sync`). ``after_commit`` (set by the store) runs once an
    event loop's commit has settled its waiters.
    """

    def __init__(
        self,
        file: JournalFile,
        end: int,
        *,
        max_buffer: int = 4 << 20,
        mark: SyncedMark | None = None,
    ) -> None:
        self._file = file
        self._mark = mark
        self._shared = mark.shared if mark is not None else None
        self._mutex = threading.Lock()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._queued_end = end
        self._written_end = end
        self._durable_end = end
        self._allocated = file.size()
        self._leading = False
        self._waiters: list[_Waiter] = []
        self._loop_waiters: dict[asyncio.AbstractEventLoop, list[tuple[int, asyncio.Future[Any], Any]]] = {}
        #: The loops whose round is being committed, and the thread committing them.
        self._committing: set[asyncio.AbstractEventLoop] = set()
        self._committer: ThreadPoolExecutor | None = None
        self._error: StoreError | None = None
        self._closed = False
        self._max_buffer = max_buffer
        #: Syncs made by this log, and syncs it skipped because another process's completed
        #: sync had covered its bytes already (read from the synced mark).
        self.syncs = 0
        self.shared_syncs = 0
        #: Called (no lock held) before each sync: the store lets go of its writer lock
        #: there when everything queued is written (:meth:`placed`).
        self.before_sync: Callable[[], None] | None = None
        #: Set by the store when it took the writer lock: whether another process had
        #: written since this handle's previous write (its syncs then go through the sync
        #: lock, to share them).
        self.others_active = False
        #: Called (no lock held) after :meth:`_commit_for` settled its waiters.
        self.after_commit: Callable[[], None] | None = None

    @property
    def queued_end(self) -> int:
        return self._queued_end

    @property
    def error(self) -> StoreError | None:
        """The failure that ended this log (it then writes nothing more), or None."""
        return self._error

    def fail(self, error: StoreError) -> None:
        """End the log with ``error`` (the store's handle died of it elsewhere: its index
        could not be written): every later call raises it, and waiters are woken with it."""
        with self._mutex:
            if self._error is None:
                self._error = error
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.wake()

    @property
    def durable_end(self) -> int:
        return self._durable_end

    @property
    def written_end(self) -> int:
        return self._written_end

    def placed(self) -> bool:
        """True when every queued byte is written (a sync may be under way): the store may
        let go of its writer lock, which orders writes, not syncs. A failed or closed log
        writes nothing more."""
        with self._mutex:
            return self._queued_end == self._written_end or self._error is not None or self._closed

    def rebase(self, end: int, durable: int) -> None:
        """Continue at ``end``, where the file's data ends after other processes appended
        (or a repair cut a torn tail); ``durable``: how much of it is known durable (the
        synced mark: never more than was synced). Only while every queued byte is written
        (:meth:`placed`; a sync may be under way), under the writer lock."""
        with self._mutex:
            self._check()
            if self._queued_end != self._written_end:
                raise AssertionError("rebase while bytes are queued")
            self._queued_end = self._written_end = end
            self._durable_end = min(max(self._durable_end, durable), end)
            self._allocated = self._file.size()

    def reallocated(self) -> None:
        """Re-read the file's size (another process cut its free space at close)."""
        with self._mutex:
            self._allocated = self._file.size()

    def enqueue(self, data: bytes) -> int:
        """Queue ``data`` for appending; return the file offset at which it will start."""
        with self._mutex:
            if self._error is not None or self._closed:
                self._check()  # raises
            start = self._queued_end
            self._pending.append(data)
            self._pending_bytes += len(data)
            self._queued_end += len(data)
            flush_now = self._pending_bytes >= self._max_buffer
        if flush_now:
            self._drain(sync=False, target=None)
        return start

    def append_written(self, data: bytes) -> tuple[int, bool]:
        """:meth:`enqueue` then :meth:`flush` in one step when nobody is writing or syncing:
        ``data`` is written at once, under the mutex. Returns the offset it starts at, and
        whether it was written; when another caller leads a write or a sync, it is only
        queued, and the caller flushes (without holding locks that the leader's waiters need)."""
        with self._mutex:
            if self._error is not None or self._closed:
                self._check()  # raises
            start = self._queued_end
            if self._leading or self._pending:
                self._pending.append(data)
                self._pending_bytes += len(data)
                self._queued_end += len(data)
                return start, False
            try:
                self._write_at(data, start)
            except OSError as exc:
                self._error = _durability_error(exc, "write")
                raise self._error from None
            self._queued_end = self._written_end = start + len(data)
            return start, True

    def wait_durable(self, end: int | None = None) -> None:
        """Return once every byte before ``end`` (default: all queued bytes) is on disk."""
        self._drain(sync=True, target=end)

    def flush(self) -> None:
        """Hand every queued byte to the kernel (no fsync): readers of the file then see them."""
        with self._mutex:
            if self._error is not None or self._closed:
                self._check()  # raises
            if not self._leading and self._pending:
                # Nobody is writing: write here, under the mutex (the write is short and
                # keeps file order), without the hand-over of a lead.
                batch = b"".join(self._pending)
                self._pending.clear()
                self._pending_bytes = 0
                end = self._queued_end
                try:
                    self._write_at(batch, self._written_end)
                except OSError as exc:
                    self._error = _durability_error(exc, "write")
                    raise self._error from None
                self._written_end = end
                return
        self._drain(sync=False, target=None)

    def durable_future(self, end: int, value: _T) -> asyncio.Future[_T]:
        """A future of the running event loop that resolves to ``value`` once every byte
        before ``end`` is on disk (or fails with the log's :class:`DurabilityError`).

        The first waiter of a round schedules the round's commit on the loop
        (``call_soon``), behind the callbacks already ready: the tasks woken by the previous
        commit append their next entries first, then one ``fdatasync`` covers them all. The
        sync runs on the log's commit thread, never on the loop's (a sync can take
        milliseconds, and the loop serves other tasks meanwhile); waiters arriving while it
        runs make the next round, which starts as soon as it ends. A plain function
        returning a future, not a coroutine: one frame less per append.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        with self._mutex:
            if self._error is not None or self._closed:
                self._check()  # raises
            if self._durable_end >= end:
                future.set_result(value)
                return future
            waiting = self._loop_waiters.get(loop)
            if waiting is None:
                waiting = self._loop_waiters[loop] = []
                if loop not in self._committing:
                    loop.call_soon(self._commit_for, loop)
            waiting.append((end, future, value))
        return future

    def _commit_for(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start ``loop``'s round: its waiters' bytes made durable on the commit thread."""
        with self._mutex:
            waiting = self._loop_waiters.pop(loop, [])
            if not waiting:
                return
            self._committing.add(loop)
            if self._committer is None:
                self._committer = ThreadPoolExecutor(1, thread_name_prefix="tracelock-commit")  # tracelock: allow TL-CONC-001 -- one thread makes the syncs; every order it could run them in makes the same bytes durable
            committer = self._committer
        committer.submit(self._commit_round, loop, waiting, max(goal for goal, _, _ in waiting))

    def _commit_round(self, loop: asyncio.AbstractEventLoop, waiting: list[tuple[int, asyncio.Future[Any], Any]], goal: int) -> None:
        """On the commit thread: sync up to ``goal``, then hand the outcome to the loop."""
        error: BaseException | None = None
        try:
            self.wait_durable(goal)
        except BaseException as exc:  # every waiter learns of it
            error = exc
        if self.after_commit is not None:
            try:
                self.after_commit()
            except BaseException as exc:  # the writer lock's release failing: the waiters' error
                error = error or exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits these any more
            loop.call_soon_threadsafe(self._committed, loop, waiting, error)

    def _committed(self, loop: asyncio.AbstractEventLoop, waiting: list[tuple[int, asyncio.Future[Any], Any]], error: BaseException | None) -> None:
        """On the loop: the next round starts (its waiters came during this one), then this
        round's waiters are woken."""
        with self._mutex:
            self._committing.discard(loop)
            more = loop in self._loop_waiters
        if more:
            self._commit_for(loop)
        if error is not None:
            for _, future, _ in waiting:
                if not future.done():
                    future.set_exception(error)
            return
        self._wake(loop, waiting, 0)

    def _wake(self, loop: asyncio.AbstractEventLoop, waiting: list[tuple[int, asyncio.Future[Any], Any]], start: int) -> None:
        """Wake the waiters a commit covered, :data:`WAKE_SLICE` per turn of the loop: what
        each does next (its run's next steps) is then spread over several turns, so that a
        commit covering hundreds of runs never holds the loop, and what else it serves,
        for all of them at once."""
        end = start + WAKE_SLICE
        for _, future, value in waiting[start:end]:
            if not future.done():  # a cancelled waiter
                future.set_result(value)
        if end < len(waiting):
            loop.call_soon(self._wake, loop, waiting, end)

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _reached(self, goal: int, sync: bool) -> bool:
        return (self._durable_end if sync else self._written_end) >= goal

    def _drain(self, *, sync: bool, target: int | None) -> None:
        with self._mutex:
            goal = self._queued_end if target is None else target
            me: _Waiter | None = None
            while True:
                if self._error is not None or self._closed:
                    self._check()  # raises
                if (self._durable_end if sync else self._written_end) >= goal:
                    return
                if not self._leading:
                    self._leading = True
                    break
                if me is None:
                    me = _Waiter(goal, sync)
                    self._waiters.append(me)
                self._mutex.release()
                try:
                    me.gate.acquire()
                finally:
                    self._mutex.acquire()
                if me.lead:
                    break  # the previous leader handed over (and removed us from the list)
            self._lead(goal, sync)

    def _lead(self, goal: int, sync: bool) -> None:
        """Write and sync until ``goal`` is reached, then hand the lead on (mutex held)."""
        try:
            while not self._reached(goal, sync):
                needed = sync or any(waiter.sync for waiter in self._waiters)
                if self._written_end < self._queued_end:
                    batch = b"".join(self._pending)
                    self._pending.clear()
                    self._pending_bytes = 0
                    end = self._queued_end
                    self._unlocked("write", self._write_at, batch, self._written_end)
                    self._written_end = end
                if needed and self._durable_end < self._written_end:
                    covered = self._written_end
                    self._unlocked("fdatasync", self._sync, covered)
                    self._durable_end = max(self._durable_end, covered)
                if self._waiters:
                    self._wake_covered()
        finally:
            self._leading = False
            if self._error is not None:
                for waiter in self._waiters:
                    waiter.wake()
                self._waiters.clear()
            elif self._waiters:
                successor = self._waiters.pop(0)
                successor.lead = True
                self._leading = True
                successor.wake()

    def _unlocked(self, what: str, call: Callable[..., Any], *args: Any) -> None:
        self._mutex.release()
        try:
            call(*args)
        except OSError as exc:
            self._error = _durability_error(exc, what)
        finally:
            self._mutex.acquire()
        if self._error is not None:
            raise self._error

    def _wake_covered(self) -> None:
        remaining = []
        for waiter in self._waiters:
            if self._reached(waiter.goal, waiter.sync):
                waiter.wake()
            else:
                remaining.append(waiter)
        self._waiters = remaining

    def _sync(self, covered: int) -> None:
        """Make every byte before ``covered`` durable, without the mutex and, once
        ``before_sync`` let it go, without the writer lock: other processes place their
        bytes meanwhile, and their syncs and this one overlap.

        ``fdatasync`` flushes every byte of the file written before it is called, by any
        process, and every byte before ``covered`` was (each process writes under the
        writer lock, in file order): so when it returns, or when another process recorded
        a mark at or past ``covered`` (it did so only after such a sync returned), the whole
        prefix up to ``covered`` is durable. Whoever acknowledges an entry has made the
        journal durable up to it, never only its own bytes: entries become durable in
        journal order whichever process syncs.

        While other processes write too, syncs take the sync lock (``shared_end``) one at
        a time: the next in line reads the mark and is done when the sync before covered
        its bytes; otherwise it syncs for every byte written so far, so that the processes
        queued behind it share that one sync."""
        hook = self.before_sync
        if hook is not None:
            hook()
        mark = self._mark
        if mark is None:
            self._file.fdatasync()
            self.syncs += 1
            return
        if self._covered(mark, covered):
            return
        shared = self._shared
        if shared is None or (not self.others_active and shared.written == covered):
            # Nobody else appends (no other process wrote before or after this handle's
            # last bytes): no one to share a sync with, and none to wait for.
            self._file.fdatasync()
            self.syncs += 1
            mark.advance(covered)
            return
        # One process syncs at a time; the next one in line finds out whether that sync
        # covered its bytes, and otherwise syncs for everyone written so far.
        shared.lock_sync()
        try:
            if self._covered(mark, covered):
                return
            target = max(covered, shared.written)
            self._file.fdatasync()
            self.syncs += 1
            # Recorded only once the sync returned, so the mark never claims unsynced
            # bytes; it is not synced itself (that would double the cost of a durable append).
            mark.advance(target)
        finally:
            shared.unlock_sync()

    def _covered(self, mark: SyncedMark, covered: int) -> bool:
        synced = mark.read()
        if synced is not None and synced >= covered:
            self.shared_syncs += 1
            return True
        return False

    def _write_at(self, data: bytes, offset: int) -> None:
        """Write ``data`` at ``offset`` (only the leader, or ``flush`` under the mutex)."""
        size = len(data)
        end = offset + size
        shared = self._shared
        if end > self._allocated:
            self._grow(end)
        pwrite = self._file.pwrite
        # Almost always one call writes it all: the view and its slicing only for the rest.
        written = pwrite(data, offset)
        if written < size:
            view = memoryview(data)[written:]
            offset += written
            while view:
                written = pwrite(view, offset)
                view = view[written:]
                offset += written
        if shared is not None:
            shared.complete(end)

    def _grow(self, needed: int) -> None:
        """Extend the free space past ``needed``: by the file's size (doubling), within
        bounds, in whole blocks. The next ``fdatasync`` makes the new blocks durable."""
        size = self._allocated
        step = min(max(size, _MIN_GROWTH), _MAX_GROWTH)
        target = -(-max(needed, size + step) // _BLOCK) * _BLOCK
        zeros = bytes(min(target - size, _READ_CHUNK))
        while size < target:
            size += self._file.pwrite(zeros[: target - size], size)
        self._allocated = size

    def close(self, *, truncate: bool = True) -> None:
        """Sync what is queued, cut off the free space (unless ``truncate`` is false: the
        store then does it under its writer lock), then refuse further work."""
        try:
            if self._error is None and not self._closed:
                self.wait_durable()
                if truncate and self._allocated > self._written_end:
                    # Not synced: if this is lost in a crash, the journal merely keeps
                    # its free space, which readers skip.
                    self._file.truncate(self._written_end)
        finally:
            with self._mutex:
                self._closed = True
                committer, self._committer = self._committer, None
            if committer is not None:
                committer.shutdown(wait=False)


def _durability_error(exc: OSError, what: str) -> DurabilityError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(
            f"journal {what} failed: device full ({exc.strerror}); the store handle is now "
            "closed and nothing after the last acknowledged entry was acknowledged"
        )
    return DurabilityError(
        f"journal {what} failed: {exc.strerror or exc}; the store handle is now closed "
        "(a failed sync is never retried)"
    )
