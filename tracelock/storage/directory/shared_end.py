"""What the writers of one store tell each other through shared memory: ``journal.shared``.

An 8-byte little-endian counter mapped into every writer's memory (no system call to read
or write it), and an advisory lock on the same file:

* ``written``: the journal's data end, set by the writer holding the writer lock once each
  of its writes returned. A writer about to sync reads it to sync for every byte written
  so far, and a writer taking the lock that finds it past its own data end knows other
  processes are writing (its syncs then go through the sync lock). It decides nothing
  else: whether others appended is still read from the journal itself (a writer of an
  older tracelock, which knows nothing of this file, may be appending too).
* the sync lock (``flock`` on the file): one process at a time makes the journal durable
  while several write. A process that finds another one syncing waits for it, then reads
  the synced mark: when that sync covered its bytes, it is done without a sync of its
  own; otherwise its sync covers every byte written so far, so the processes that queue
  behind it share it. This is group commit across processes, as threads of one process
  share a sync through ``GroupCommitLog``.

The file is never synced and never trusted across a crash or a copy: every writer resets
the counter to the journal's data end when it opens the store, under the writer lock, and
after a catch-up. It may lag (a sync then covers less than it could), never lead: it is set
after the write returned, and only while the lock is held.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from pathlib import Path

__all__ = ["SHARED_FILE", "SharedEnd"]

SHARED_FILE = "journal.shared"
_SIZE = 8


class SharedEnd:
    """An open ``journal.shared``: the mapped counter and the sync lock."""

    __slots__ = ("_fd", "_map", "_written")

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
        # An aligned 8-byte load or store: a reader outside the lock sees one value or the other.
        self._written = ctypes.c_uint64.from_buffer(self._map, 0)

    @property
    def written(self) -> int:
        return int(self._written.value)

    def complete(self, end: int) -> None:
        """A write ending at ``end`` returned (under the writer lock)."""
        self._written.value = end

    def reset(self, end: int) -> None:
        """The journal's data ends at ``end`` (at open, or after a catch-up; under the lock)."""
        self._written.value = end

    def lock_sync(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def unlock_sync(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        # The ctypes view must go before the mapping can close.
        del self._written
        self._map.close()
        os.close(self._fd)
