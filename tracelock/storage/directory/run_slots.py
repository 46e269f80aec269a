"""A runtime's presence file on the directory store, and the run slots mapped in it.

``<store>/runtimes/<pid>-<token>.lock`` is a runtime's presence mark: it holds an exclusive
``flock`` on the file while it lives (the kernel drops the lock when the process dies). The
file is also the table of the runs the runtime holds under a **slot lease**
(:mod:`tracelock.storage.directory.ownership`): a 64-byte header (``MAGIC``, then how many
slots were ever used) and ``SLOTS`` slots of 64 bytes, each ``token``, ``expires_ms`` (native
8-byte integers; the readers are processes of this machine) and the run id, NUL-padded to
48 bytes. A slot whose token is 0 is free.

Only the runtime writes its slots (no lock: one writer per slot, under the ownership's
lock); other processes map the file read-only to find a run's holder. Each field is an
aligned 8-byte word written with one store; a slot is filled id first, then expiry, then
the token (which publishes it), and freed by zeroing its token, so a reader that reads the
token, the fields, then the token again, and finds the same non-zero token both times, read
one lease.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from tracelock.storage.directory.lease_epoch import EPOCH_FILE, LeaseEpoch

__all__ = ["MAX_RUN_ID", "PRESENCE_FOLDER", "SLOT_PREFIX", "SlotLease", "SlotReader", "SlotTable", "mark_is_stale"]

#: The folder of the presence files, in the store's directory.
PRESENCE_FOLDER = "runtimes"

MAGIC = b"TLRUNS01"
_HEADER = 64
_SLOT = 64
#: How many runs one runtime holds under slot leases at once (beyond, its leases are rows).
SLOTS = 1024
_SIZE = _HEADER + SLOTS * _SLOT
_ID = 16  # where the run id starts in a slot
#: The longest run id a slot holds (a NUL always follows it).
MAX_RUN_ID = _SLOT - _ID - 1
#: Slots hold only run ids that start so (the runtime's random ids do; idempotency keys'
#: ``idem-`` ids never): a caller asking for any other run skips the look into the slots.
SLOT_PREFIX = "run-"
_WORD = struct.Struct("q")  # native: one aligned 8-byte store and load
_USED = 16  # header word: how many slots were ever used (readers search those)


@dataclass(frozen=True, slots=True)
class SlotLease:
    """A run's slot lease, as a reader found it."""

    owner: str
    token: int
    expires_ms: int


class SlotTable:
    """A runtime's presence file and its slots (the writer side)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.owner = path.stem
        path.parent.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, _SIZE)  # sparse: only the pages of used slots take space
            self._map = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._map[0:8] = MAGIC
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self._used = 0
        self._free: list[int] = []

    @property
    def open(self) -> bool:
        return self._fd is not None

    def take(self, run: str, token: int, expires_ms: int) -> int | None:
        """Fill a free slot with ``run``'s lease; its index, or None (no free slot, an id
        too long for a slot or without ``SLOT_PREFIX``, the mark released)."""
        name = run.encode()
        if self._fd is None or len(name) > MAX_RUN_ID or not run.startswith(SLOT_PREFIX):
            return None
        if self._free:
            index = self._free.pop()
        elif self._used < SLOTS:
            index = self._used
            self._used += 1
            _WORD.pack_into(self._map, _USED, self._used)  # before the slot is published
        else:
            return None
        at = _HEADER + index * _SLOT
        mapped = self._map
        mapped[at + _ID : at + _SLOT] = name.ljust(_SLOT - _ID, b"\0")
        _WORD.pack_into(mapped, at + 8, expires_ms)
        _WORD.pack_into(mapped, at, token)  # publishes the slot
        return index

    def renew(self, index: int, expires_ms: int) -> None:
        if self._fd is not None:
            _WORD.pack_into(self._map, _HEADER + index * _SLOT + 8, expires_ms)

    def expiry(self, index: int) -> int | None:
        """The expiry of slot ``index`` (None once the mark is released)."""
        if self._fd is None:
            return None
        return int(_WORD.unpack_from(self._map, _HEADER + index * _SLOT + 8)[0])

    def free(self, index: int) -> None:
        if self._fd is not None:
            _WORD.pack_into(self._map, _HEADER + index * _SLOT, 0)
            self._free.append(index)

    def close(self, *, unlink: bool) -> None:
        """Let go of the mark (and of every slot in it); ``unlink``: remove the file."""
        if self._fd is not None:
            if unlink:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            self._map.close()
            os.close(self._fd)  # drops the lock
            self._fd = None


def mark_is_stale(folder: Path, owner: str) -> bool:
    """Whether ``owner``'s presence mark in ``folder`` is stale: its lock can be taken, so
    its process died (or let go of it). A missing mark proves nothing (False)."""
    if "/" in owner or owner.startswith("."):
        return False
    try:
        fd = os.open(folder / f"{owner}.lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also lets go of the lock, if it was taken
    return True


class SlotReader:
    """Finds runs in the slots of every runtime present on a store (the reader side):
    each presence file is mapped once, read-only, while it exists."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._maps: dict[str, mmap.mmap] = {}
        self._epoch: LeaseEpoch | None = None

    def held(self, run: str) -> bool:
        """Whether a runtime holds ``run`` under a slot lease that no take-over voided and
        whose owner lives (expired or not: only the store's ownership takes one over)."""
        found = self.find(run)
        if found is None or mark_is_stale(self._folder, found.owner):
            return False
        if self._epoch is None:
            self._epoch = LeaseEpoch(self._folder.parent / EPOCH_FILE)
        return found.token not in self._epoch.read_voided()

    def find(self, run: str) -> SlotLease | None:
        """The slot lease some runtime holds on ``run`` (None: none). Lists the folder
        each time: a runtime that started since the last call is seen."""
        name = run.encode()
        if len(name) > MAX_RUN_ID or not run.startswith(SLOT_PREFIX):
            return None
        try:
            present = {entry for entry in os.listdir(self._folder) if entry.endswith(".lock")}
        except FileNotFoundError:
            present = set()
        for gone in sorted(set(self._maps) - present):
            self._maps.pop(gone).close()
        needle = name + b"\0"
        for entry in sorted(present):
            mapped = self._maps.get(entry) or self._map(entry)
            if mapped is None:
                continue
            found = _search(mapped, needle)
            if found is not None:
                token, expires = found
                return SlotLease(entry[: -len(".lock")], token, expires)
        return None

    def _map(self, entry: str) -> mmap.mmap | None:
        """Map a presence file with slots (None: one being made, or a plain mark: neither
        holds a lease any reader is looking for)."""
        try:
            fd = os.open(self._folder / entry, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size < _SIZE:
                return None
            mapped = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        if mapped[0:8] != MAGIC:
            mapped.close()
            return None
        self._maps[entry] = mapped
        return mapped

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
        if self._epoch is not None:
            self._epoch.close()
            self._epoch = None


def _search(mapped: mmap.mmap, needle: bytes) -> tuple[int, int] | None:
    """(token, expires_ms) of the published slot holding the run id ``needle`` (NUL-ended)."""
    end = _HEADER + min(int(_WORD.unpack_from(mapped, _USED)[0]), SLOTS) * _SLOT
    start = _HEADER
    while (at := mapped.find(needle, start, end)) >= 0:
        start = at + 1
        if (at - _HEADER) % _SLOT != _ID:
            continue
        slot = at - _ID
        token = int(_WORD.unpack_from(mapped, slot)[0])
        if token == 0:
            continue  # a freed slot that held the run once
        expires = int(_WORD.unpack_from(mapped, slot + 8)[0])
        same = mapped[at : at + len(needle)] == needle
        if same and int(_WORD.unpack_from(mapped, slot)[0]) == token:
            return token, expires
    return None
