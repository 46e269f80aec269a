"""The synced mark: how much of the journal the store itself knows to be durable.

``journal.synced`` holds two 16-byte slots, each a length and its bitwise complement (8
bytes each, little endian); a slot is valid when they agree. After a completed sync the
writer overwrites the slot that does not hold the larger valid value with the length its
sync covered, when that raises the mark (:meth:`SyncedMark.advance`). The file is never
fsynced on the append path, so after a power cut it may hold an older value, but never a
larger one than what was synced: it is written only once the sync returned. A write torn
by the cut spoils at most the slot being written, and a torn slot that still looks valid
holds the old length or the new one, both true (the complement is checked rather than a
hash because this runs after every sync). The mark is the larger valid slot.

Several processes sync the journal outside the writer lock (``journal``), so they record
lengths in the mark concurrently. Each slot is written by one ``pwrite``, which the kernel
applies whole with respect to other writes of the file, so concurrent writers never mix
bytes in a slot; two of them choosing the same slot may leave the smaller of their
lengths, a mark that lags, which is always safe. The mark is also how a process learns
that another one's sync already covered its bytes: a writer reads it before syncing, from
a shared mapping of the file when it is a real one (no system call).
"""

from __future__ import annotations

import contextlib
import mmap
import struct
from pathlib import Path

from tracelock.storage.directory.fileio import FileIO, JournalFile, OSFile
from tracelock.storage.directory.shared_end import SharedEnd

__all__ = ["MARK_FILE", "SyncedMark", "encode_mark"]

MARK_FILE = "journal.synced"
_SLOT = 16
_SIZE = 2 * _SLOT
_ONES = (1 << 64) - 1
_PACK = struct.Struct("<QQ")


def _slot(length: int) -> bytes:
    return _PACK.pack(length, length ^ _ONES)


def encode_mark(length: int) -> bytes:
    """The whole file with both slots holding ``length`` (written when a store is created)."""
    return _slot(length) * 2


def _slots(data: bytes | mmap.mmap) -> tuple[int | None, int | None]:
    values: list[int | None] = []
    for start in (0, _SLOT):
        if len(data) < start + _SLOT:
            values.append(None)
            continue
        value, check = _PACK.unpack_from(data, start)
        values.append(value if value ^ check == _ONES else None)
    return values[0], values[1]


class SyncedMark:
    """An open ``journal.synced``."""

    __slots__ = ("_file", "_map", "shared")

    def __init__(self, file: JournalFile) -> None:
        self._file = file
        self._map: mmap.mmap | None = None
        #: A writer's shared counters and sync lock (``shared_end``), set at open.
        self.shared: SharedEnd | None = None
        if isinstance(file, OSFile):
            # A file shorter than its two slots (damaged) is read through pread.
            with contextlib.suppress(OSError, ValueError):
                self._map = mmap.mmap(file.fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ)

    @classmethod
    def open(cls, files: FileIO, store: Path, *, write: bool) -> SyncedMark | None:
        """The store's mark, or None when the file does not exist (a store written before
        marks existed, or one whose mark was deleted)."""
        path = store / MARK_FILE
        if not path.exists():
            return None
        return cls(files.open(path, write=write))

    def _read_slots(self) -> tuple[int | None, int | None]:
        mapped = self._map
        return _slots(mapped if mapped is not None else self._file.pread(_SIZE, 0))

    def read(self) -> int | None:
        """The larger valid slot, or None when neither slot is valid."""
        first, second = self._read_slots()
        if first is None:
            return second
        return first if second is None else max(first, second)

    def record(self, length: int) -> None:
        """Overwrite the slot that does not hold the larger valid value with ``length`` (no
        sync: see the module docstring)."""
        self._write_older(length, *self._read_slots())

    def _write_older(self, length: int, first: int | None, second: int | None) -> None:
        older = 0 if first is None or (second is not None and first <= second) else 1
        self._file.pwrite(_slot(length), older * _SLOT)

    def reset(self, length: int) -> None:
        """Both slots set to ``length`` (at open, under the writer lock; no sync)."""
        self._file.pwrite(encode_mark(length), 0)

    def advance(self, length: int) -> None:
        """Record ``length`` when it is more than the mark holds (a sync covered it)."""
        first, second = self._read_slots()
        if (first is None or length > first) and (second is None or length > second):
            self._write_older(length, first, second)

    def sync(self) -> None:
        self._file.fdatasync()

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
            self.shared = None
        if self._map is not None:
            self._map.close()
            self._map = None
        self._file.close()
