"""The synced mark: how much of the journal the store itself knows to be durable.

``journal.synced`` holds two 16-byte slots, each a length and its bitwise complement (8
bytes each, little endian); a slot is valid when they agree. After every completed sync the
writer overwrites one slot, alternately, with the journal's durable data length. The file is
never fsynced on the append path, so after a power cut it may hold an older value, but never
a larger one than what was synced: it is written only once the sync returned. A write torn
by the cut spoils at most the slot being written, and a torn slot that still looks valid
holds the old length or the new one, both true (the complement is checked rather than a
hash because this runs after every sync). The mark is the larger valid slot.
"""

from __future__ import annotations

import struct
from pathlib import Path

from tracelock.storage.directory.fileio import FileIO, JournalFile

__all__ = ["MARK_FILE", "SyncedMark", "encode_mark"]

MARK_FILE = "journal.synced"
_SLOT = 16
_ONES = (1 << 64) - 1
_PACK = struct.Struct("<QQ")


def _slot(length: int) -> bytes:
    return _PACK.pack(length, length ^ _ONES)


def encode_mark(length: int) -> bytes:
    """The whole file with both slots holding ``length`` (written when a store is created)."""
    return _slot(length) * 2


class SyncedMark:
    """An open ``journal.synced``."""

    __slots__ = ("_file", "_turn")

    def __init__(self, file: JournalFile) -> None:
        self._file = file
        self._turn = 0

    @classmethod
    def open(cls, files: FileIO, store: Path, *, write: bool) -> SyncedMark | None:
        """The store's mark, or None when the file does not exist (a store written before
        marks existed, or one whose mark was deleted)."""
        path = store / MARK_FILE
        if not path.exists():
            return None
        return cls(files.open(path, write=write))

    def read(self) -> int | None:
        """The larger valid slot, or None when neither slot is valid."""
        data = self._file.pread(2 * _SLOT, 0)
        best: int | None = None
        for start in (0, _SLOT):
            if len(data) < start + _SLOT:
                break
            value, check = _PACK.unpack_from(data, start)
            if value ^ check == _ONES:
                best = value if best is None else max(best, value)
        return best

    def record(self, length: int) -> None:
        """Overwrite the older slot with ``length`` (no sync: see the module docstring)."""
        self._file.pwrite(_slot(length), self._turn * _SLOT)
        self._turn ^= 1

    def sync(self) -> None:
        self._file.fdatasync()

    def close(self) -> None:
        self._file.close()
