"""The directory store's take-over epoch: ``<store>/leases.epoch``, an 8-byte little-endian
counter that every change of hands of a live or expired run lease (a take-over, a queue
worker's hand-back) increments under the store's writer lock. A fence that found its
handle's tokens current at epoch ``e`` knows they still are while the epoch reads ``e``
(:mod:`tracelock.storage.directory.ownership`)."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

__all__ = ["EPOCH_FILE", "LeaseEpoch", "bump_epoch"]

EPOCH_FILE = "leases.epoch"


def bump_epoch(store_dir: Path) -> None:
    """Increment the store's take-over epoch. Call under the store's writer lock, after the
    lease rows changed hands and before the lock is let go."""
    fd = os.open(store_dir / EPOCH_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        raw = os.pread(fd, 8, 0)
        value = struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0
        os.pwrite(fd, struct.pack("<Q", value + 1), 0)
    finally:
        os.close(fd)


class LeaseEpoch:
    """The take-over epoch, read through a shared mapping of its file."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size < 8:
                os.posix_fallocate(fd, 0, 8)
            self._map = mmap.mmap(fd, 8, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)

    def value(self) -> int:
        return int(struct.unpack_from("<Q", self._map)[0])

    def close(self) -> None:
        self._map.close()
