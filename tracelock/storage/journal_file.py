"""The journal file: append-only records, group commit, streaming reads, tail repair.

The file holds two kinds of newline-terminated records:

* entry lines: canonical JSON objects (they start with ``{``), see ``tracelock.core.entry``;
* payload records: ``=`` + 64 hex digits (SHA-256 of the data) + one space + the payload's
  canonical JSON bytes. A redacted payload keeps its place and length: the ``=`` becomes
  ``-`` and the data bytes become spaces.

Canonical JSON never contains a raw newline, so records split unambiguously on ``\\n``.
Payloads live in the same file as entries so that one ``fdatasync`` makes both durable.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from tracelock.storage.errors import DurabilityError, StoreClosedError, StoreFullError

__all__ = ["ENTRY", "PAYLOAD", "REDACTED", "GroupCommitLog", "Record", "scan_records"]

ENTRY = "entry"
PAYLOAD = "payload"
REDACTED = "redacted"

_READ_CHUNK = 1 << 20


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


def scan_records(fd: int, start: int, end: int | None = None) -> Iterator[Record | tuple[int, bytes]]:
    """Yield the records between byte offsets ``start`` and ``end`` (default: end of file).

    A trailing fragment with no newline is yielded last as ``(offset, bytes)``: it is not a
    record (a torn write, or an append in progress by another process).
    """
    offset = start
    pending = b""
    limit = end if end is not None else os.fstat(fd).st_size
    position = start
    while position < limit:
        chunk = os.pread(fd, min(_READ_CHUNK, limit - position), position)
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


class GroupCommitLog:
    """Appends bytes to one file; concurrent callers share each ``write`` and ``fdatasync``.

    Callers enqueue bytes (``enqueue``) under their own ordering lock, then ask for them to be
    written (``flush``) or made durable (``wait_durable``) without it. One thread at a time
    writes everything queued so far; one thread at a time syncs, claiming what was written
    before its ``fdatasync`` began, while others keep writing behind it. Nobody waits on a
    timer, only on the write or sync in progress. Any write or sync error poisons the log:
    every waiter and every later call gets the same :class:`DurabilityError`.
    """

    def __init__(self, fd: int, end: int, *, max_buffer: int = 4 << 20) -> None:
        self._fd = fd
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._queued_end = end
        self._written_end = end
        self._durable_end = end
        self._writing = False
        self._syncing = False
        self._error: DurabilityError | None = None
        self._closed = False
        self._max_buffer = max_buffer
        self.syncs = 0

    @property
    def queued_end(self) -> int:
        return self._queued_end

    @property
    def durable_end(self) -> int:
        return self._durable_end

    @property
    def written_end(self) -> int:
        return self._written_end

    def enqueue(self, data: bytes) -> int:
        """Queue ``data`` for appending; return the file offset at which it will start."""
        with self._mutex:
            self._check()
            start = self._queued_end
            self._pending.append(data)
            self._pending_bytes += len(data)
            self._queued_end += len(data)
            flush_now = self._pending_bytes >= self._max_buffer and not self._writing
        if flush_now:
            self._drain(sync=False, target=None)
        return start

    def wait_durable(self, end: int | None = None) -> None:
        """Return once every byte before ``end`` (default: all queued bytes) is on disk."""
        self._drain(sync=True, target=end)

    def flush(self) -> None:
        """Hand every queued byte to the kernel (no fsync): readers of the file then see them."""
        self._drain(sync=False, target=None)

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _drain(self, *, sync: bool, target: int | None) -> None:
        """Write (and, with ``sync``, fdatasync) everything queued before ``target``.

        Writing and syncing are separate turns: while one thread waits in ``fdatasync``,
        others may write their bytes after it (a sync only ever claims what was written
        before it started), and every caller whose bytes were written by then shares it.
        """
        with self._cond:
            goal = self._queued_end if target is None else target
            while True:
                self._check()
                if (self._durable_end if sync else self._written_end) >= goal:
                    return
                if self._written_end < goal:
                    if self._writing:
                        self._cond.wait()
                        continue
                    self._write_turn()
                    continue
                if self._syncing:
                    self._cond.wait()
                    continue
                self._sync_turn()

    def _write_turn(self) -> None:
        """Write everything queued (holding the mutex on entry and exit, not meanwhile)."""
        self._writing = True
        batch = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        batch_end = self._queued_end
        self._mutex.release()
        error: DurabilityError | None = None
        try:
            self._write_all(batch)
        except OSError as exc:
            error = _durability_error(exc, "write")
        finally:
            self._mutex.acquire()
            self._writing = False
        self._settle(error)
        self._written_end = batch_end

    def _sync_turn(self) -> None:
        """fdatasync what was written before now (mutex held on entry and exit)."""
        self._syncing = True
        covered = self._written_end
        self._mutex.release()
        error: DurabilityError | None = None
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            error = _durability_error(exc, "fdatasync")
        finally:
            self._mutex.acquire()
            self._syncing = False
        self._settle(error)
        self._durable_end = max(self._durable_end, covered)
        self.syncs += 1

    def _settle(self, error: DurabilityError | None) -> None:
        self._cond.notify_all()
        if error is not None:
            self._error = error
            raise error

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        """Sync what is queued, then refuse further work."""
        try:
            if self._error is None and not self._closed:
                self.wait_durable()
        finally:
            with self._mutex:
                self._closed = True


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
