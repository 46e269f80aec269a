"""What the writers of one store tell each other through shared memory: ``journal.shared``.

Two 8-byte little-endian counters, mapped into every writer's memory (no system call to
read or write them), and an advisory lock on the same file:

* ``reserved`` (bytes 0-7) and ``written`` (bytes 8-15): the journal's data end, set by
  the writer holding the writer lock, ``reserved`` before each write of the journal and
  ``written`` once it returned. A writer taking the lock finds both equal to where its own
  data ends when nobody appended since its last write and no writer died in the middle of
  one: it then skips reading the journal to find out (``_hold_locked``). Anything else
  (another process appended, or ``reserved`` is ahead: a write was cut short, a torn tail
  to judge) sends it to catch up from the journal itself, as before.
* the sync lock (``flock`` on the file): one process at a time makes the journal durable.
  A process that finds another one syncing waits for it, then reads the synced mark: when
  that sync covered its bytes, it is done without a sync of its own; otherwise its sync
  covers every byte written so far (``written``), by any process, so the processes that
  queue behind it share it. This is group commit across processes, as threads of one
  process share a sync through ``GroupCommitLog``.

The file is never synced and never trusted across a crash or a copy: every writer resets
the counters to the journal's data end when it opens the store, under the writer lock,
after judging the tail. A counter that lags only costs a read or a sync; none can lead,
since ``written`` is set after the write returned, and only while the lock is held.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from pathlib import Path

__all__ = ["SHARED_FILE", "SharedEnd"]

SHARED_FILE = "journal.shared"
_SIZE = 16


class SharedEnd:
    """An open ``journal.shared``: the mapped counters and the sync lock."""

    __slots__ = ("_fd", "_map", "_reserved", "_written")

    def __init__(self, store: Path) -> None:
        fd = os.open(store / SHARED_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # Aligned 8-byte loads and stores: a reader outside the lock sees one value or the other.
        self._reserved = ctypes.c_uint64.from_buffer(self._map, 0)
        self._written = ctypes.c_uint64.from_buffer(self._map, 8)

    @property
    def written(self) -> int:
        return int(self._written.value)

    def quiet(self, end: int) -> bool:
        """True when nobody wrote past ``end`` and no write is unfinished (under the lock)."""
        return self._reserved.value == end and self._written.value == end

    def reserve(self, end: int) -> None:
        """A write ending at ``end`` is about to start (under the writer lock)."""
        self._reserved.value = end

    def complete(self, end: int) -> None:
        """The write ending at ``end`` returned (under the writer lock)."""
        self._written.value = end

    def reset(self, end: int) -> None:
        """The journal's data ends at ``end`` (at open, or after a repair; under the lock)."""
        self._reserved.value = end
        self._written.value = end

    def lock_sync(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def unlock_sync(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        # The ctypes views must go before the mapping can close.
        del self._reserved, self._written
        self._map.close()
        os.close(self._fd)
