"""A simulated disk for the journal's file I/O (``tracelock.storage.directory.fileio.FileIO``).

Each file keeps its durable image (what survives a power cut) apart from what the process
sees (every write applied), and the 512-byte sectors written since the last sync. A power
cut turns that into a crash image, the way SQLite's crash tests do: the unsynced sectors
are lost, or some of them persist, in any order, and the last one may be torn at any byte.
A data sync makes a file's image durable. A sync can be told to fail (``fail_sync_at``), and a power cut can be scheduled at
the n-th operation (``cut_at``): the operation raises :class:`PowerCut` before it happens.

Files are loaded from the real disk the first time they are opened; everything else in the
store directory (the index, ``store.json``) stays on the real disk.
"""

from __future__ import annotations

import errno
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

SECTOR = 512
MODES = ("lost", "all", "prefix", "torn_byte", "out_of_order")


class PowerCut(BaseException):
    """The simulated machine lost power (a BaseException: no handler in the code under
    test may swallow it, as none could survive a real one)."""


@dataclass
class _State:
    """One file at the instant of a power cut."""

    durable: bytes
    volatile: bytes
    dirty: list[int]

    def image(self, rng: random.Random, mode: str) -> bytes:
        image = bytearray(self.durable)
        if mode == "lost" or not self.dirty:
            return bytes(image)
        if mode == "all":
            return self.volatile
        sectors = sorted(self.dirty)
        if mode in ("prefix", "torn_byte"):
            chosen = sectors[: rng.randint(0, len(sectors))]
        else:
            chosen = [sector for sector in sectors if rng.random() < 0.5]
            rng.shuffle(chosen)  # the order does not change the image; kept for clarity
        torn = chosen[-1] if chosen and mode != "prefix" and rng.random() < 0.5 else None
        for sector in chosen:
            start = sector * SECTOR
            stop = min(start + SECTOR, len(self.volatile))
            if start >= stop:
                continue
            if sector == torn:
                stop = rng.randint(start, stop)
            if len(image) < stop:
                image.extend(bytes(stop - len(image)))
            image[start:stop] = self.volatile[start:stop]
        if len(self.volatile) < len(self.durable) and rng.random() < 0.5:
            del image[len(self.volatile) :]  # a truncation that reached the disk
        return bytes(image)


@dataclass
class SimFile:
    disk: SimDisk
    durable: bytearray
    volatile: bytearray = field(init=False)
    dirty: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.volatile = bytearray(self.durable)

    def state(self) -> _State:
        return _State(bytes(self.durable), bytes(self.volatile), sorted(self.dirty))

    def write(self, data: bytes, offset: int) -> None:
        if offset > len(self.volatile):
            self.volatile.extend(bytes(offset - len(self.volatile)))
        self.volatile[offset : offset + len(data)] = data
        self.dirty.update(range(offset // SECTOR, (offset + max(len(data), 1) - 1) // SECTOR + 1))

    def sync(self) -> None:
        self.durable = bytearray(self.volatile)
        self.dirty.clear()


class SimHandle:
    """A :class:`tracelock.storage.directory.fileio.JournalFile` on the simulated disk."""

    def __init__(self, file: SimFile, writable: bool) -> None:
        self._file = file
        self._writable = writable

    def size(self) -> int:
        return len(self._file.volatile)

    def pread(self, length: int, offset: int) -> bytes:
        return bytes(self._file.volatile[offset : offset + length])

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        assert self._writable, "write through a read-only handle"
        self._file.disk.operation()
        payload = bytes(data)
        self._file.write(payload, offset)
        return len(payload)

    def fdatasync(self) -> None:
        disk = self._file.disk
        disk.operation()
        disk.sync_attempt()
        self._file.sync()

    def truncate(self, length: int) -> None:
        self._file.disk.operation()
        volatile = self._file.volatile
        if length < len(volatile):
            del volatile[length:]
            self._file.dirty = {sector for sector in self._file.dirty if sector * SECTOR < length}
        else:
            volatile.extend(bytes(length - len(volatile)))

    def close(self) -> None:
        pass


class SimDisk:
    """A :class:`tracelock.storage.directory.fileio.FileIO` whose files live in memory."""

    def __init__(self) -> None:
        self.files: dict[Path, SimFile] = {}
        self.operations = 0
        self.syncs = 0
        self.cut_at: int | None = None
        self.fail_sync_at: int | None = None
        self.failed_syncs = 0
        self.snapshot: dict[Path, _State] | None = None

    def open(self, path: Path, *, write: bool) -> SimHandle:
        key = path.resolve()
        file = self.files.get(key)
        if file is None:
            file = self.files[key] = SimFile(self, bytearray(key.read_bytes()))
        return SimHandle(file, write)

    def operation(self) -> None:
        if self.snapshot is not None:
            raise PowerCut("the power is off")
        self.operations += 1
        if self.cut_at is not None and self.operations >= self.cut_at:
            self.snapshot = {path: file.state() for path, file in self.files.items()}
            raise PowerCut(f"power cut before disk operation {self.operations}")

    def sync_attempt(self) -> None:
        self.syncs += 1
        if self.fail_sync_at is not None and self.syncs >= self.fail_sync_at:
            self.failed_syncs += 1
            raise OSError(errno.EIO, "Input/output error (simulated)")

    def states(self) -> dict[Path, _State]:
        return self.snapshot if self.snapshot is not None else {path: file.state() for path, file in self.files.items()}

    def crash_copy(
        self, source: Path, target: Path, rng: random.Random, mode: str, *, keep_index: bool
    ) -> bytes:
        """Write what the store directory ``source`` holds after a power cut to ``target``:
        each simulated file as a crash image, ``store.json`` as it is, and the index (a cache,
        never synced) as it is on the real disk if ``keep_index``. Returns the images' bytes
        (to tell identical crash images apart)."""
        target.mkdir(parents=True)
        shutil.copyfile(source / "store.json", target / "store.json")
        if keep_index:
            for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
                if (source / name).exists():
                    shutil.copyfile(source / name, target / name)
        written = []
        for path, state in sorted(self.states().items()):
            image = state.image(rng, mode)
            (target / path.relative_to(source.resolve())).write_bytes(image)
            written.append(image)
        return b"\0/".join(written)
