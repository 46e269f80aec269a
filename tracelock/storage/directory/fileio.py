"""The journal's file I/O, behind a small interface.

The directory store reads and writes ``journal.log`` and ``journal.synced`` only through a
:class:`FileIO`: the real one (:data:`OS_FILES`) by default, a simulated disk in the tests,
which keeps each file's durable image apart from the writes not yet synced, so that a
simulated power cut can drop, tear or reorder them (``tests/storage/_simdisk.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

__all__ = ["OS_FILES", "FileIO", "JournalFile", "OSFile", "OSFileIO"]


class JournalFile(Protocol):
    """An open file: positional reads and writes, data sync, truncation."""

    def size(self) -> int: ...

    def pread(self, length: int, offset: int) -> bytes: ...

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        """Write some of ``data`` at ``offset``; return how many bytes were written."""
        ...

    def fdatasync(self) -> None: ...

    def truncate(self, length: int) -> None: ...

    def close(self) -> None: ...


class FileIO(Protocol):
    """Opens :class:`JournalFile` handles."""

    def open(self, path: Path, *, write: bool) -> JournalFile:
        """Open an existing file, for reading and writing when ``write`` is true."""
        ...


class OSFile:
    """A :class:`JournalFile` over an operating-system file descriptor."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(self.fd, data, offset)

    def fdatasync(self) -> None:
        os.fdatasync(self.fd)

    def truncate(self, length: int) -> None:
        os.ftruncate(self.fd, length)

    def close(self) -> None:
        os.close(self.fd)


class OSFileIO:
    """The real file system."""

    def open(self, path: Path, *, write: bool) -> JournalFile:
        flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_CLOEXEC
        return OSFile(os.open(path, flags))


OS_FILES: FileIO = OSFileIO()
