"""The directory store's take-over epoch: ``<store>/leases.epoch``.

The file starts with an 8-byte little-endian counter that every change of hands of a live
or expired run lease (a take-over, a queue worker's hand-back) increments under the store's
writer lock. A fence that found its handle's tokens current at epoch ``e`` knows they still
are while the epoch reads ``e`` (:mod:`tracelock.storage.directory.ownership`).

After the counter come the **voided tokens**, 8 bytes each (little-endian): the tokens of
runtime-held leases (:mod:`tracelock.storage.directory.run_slots`) that a take-over voided.
Such a lease has no row a fence could find changed, so its owner's fence looks its token up
here once the epoch moves. A take-over writes the token before it moves the epoch, so a
fence that sees the new epoch finds the token. Tokens are never reused (they come from the
store's token counter), so the list only grows, by 8 bytes per take-over of such a lease
(those follow a crash, a kill or a pause past the lease: rare).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path

__all__ = ["EPOCH_FILE", "LeaseEpoch", "bump_epoch"]

EPOCH_FILE = "leases.epoch"

_COUNTER = struct.Struct("<Q")
_TOKEN = struct.Struct("<q")


def bump_epoch(store_dir: Path, voided: Iterable[int] = ()) -> None:
    """Increment the store's take-over epoch, after recording the ``voided`` tokens. Call
    under the store's writer lock, after the lease rows changed hands and before the lock
    is let go."""
    fd = os.open(store_dir / EPOCH_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        raw = os.pread(fd, 8, 0)
        value = _COUNTER.unpack(raw)[0] if len(raw) == 8 else 0
        tokens = b"".join(_TOKEN.pack(token) for token in voided)
        if tokens:
            end = max(os.fstat(fd).st_size, 8)
            os.pwrite(fd, tokens, end - end % 8)  # whole records only (a torn one is overwritten)
        os.pwrite(fd, _COUNTER.pack(value + 1), 0)
    finally:
        os.close(fd)


class LeaseEpoch:
    """The take-over epoch, read through a shared mapping of its file, and the voided
    tokens after it."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size < 8:
                os.posix_fallocate(fd, 0, 8)
            self._map = mmap.mmap(fd, 8, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        #: Where the voided tokens not read yet start.
        self._read = 8
        self.voided: set[int] = set()

    def value(self) -> int:
        return int(_COUNTER.unpack_from(self._map)[0])

    def read_voided(self) -> set[int]:
        """Read the tokens voided since the last call into :attr:`voided` (call after
        :meth:`value`: a token voided by the take-over that moved the epoch is there)."""
        while True:
            raw = os.pread(self._fd, 1 << 16, self._read)
            whole = len(raw) - len(raw) % 8
            self.voided.update(token for (token,) in _TOKEN.iter_unpack(raw[:whole]))
            self._read += whole
            if len(raw) < 1 << 16:
                return self.voided

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
