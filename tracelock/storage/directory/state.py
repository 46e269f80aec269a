"""What every part of a directory store handle shares: the handle's state (declared once,
set by :class:`tracelock.storage.directory.store.DirectoryStore`), the records queued
for the index, and the constants and helpers more than one part uses.

The handle is one object built from one class per concern, each in its own module and
each using only the ones below it: lookup (entries and payload records at the index's
offsets) < tail (judging new records) < catch_up (the index) < locking (the writer
lock, sealing) < index_rows (pending rows) < reads < merkle < writes < store (open,
close, ownership, queue). Methods are plain methods of the one handle: no call goes
through a collaborator on the append path."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tracelock.core.entry import Entry
from tracelock.storage.backend import Repair
from tracelock.storage.directory.fileio import FileIO, JournalFile
from tracelock.storage.directory.index import Index, IndexedPayload
from tracelock.storage.directory.journal import GroupCommitLog
from tracelock.storage.directory.merkle_tree import MerkleTreeFile
from tracelock.storage.directory.ownership import DirectoryOwnership
from tracelock.storage.directory.payload_cache import PayloadCache
from tracelock.storage.directory.payload_filter import PayloadFilter
from tracelock.storage.directory.queue import DirectoryQueue
from tracelock.storage.directory.sealed import SealedJournal
from tracelock.storage.directory.synced_mark import SyncedMark
from tracelock.storage.errors import JournalCorruptError, StoreError
from tracelock.storage.ownership import AppendGuard

__all__ = ["BATCH_READ_BYTES", "NEWLINE", "NUL", "STORE_VERSION", "PendingIndex", "StoreState", "whole_record"]

#: Version 2 may hold sealed segments (``sealed/``, docs/spec.md 3.8); version 1 never does,
#: and is read as it is, then marked version 2 by the writer that first seals it.
STORE_VERSION = 2

NUL = b"\0"

NEWLINE = b"\n"

#: A run's entries spanning at most this many journal bytes are read with one pread.
BATCH_READ_BYTES = 1 << 16


class PendingIndex:
    """Records already queued to the journal whose index rows have not reached SQLite yet:
    (end offset, (entry, offset)) and (end offset, payload row); and the runs of those
    entries (a superset between flushes: a partial flush recomputes it)."""

    __slots__ = ("entries", "payloads", "runs")

    def __init__(self) -> None:
        self.entries: list[tuple[int, tuple[Entry, int]]] = []
        self.payloads: list[tuple[int, IndexedPayload]] = []
        self.runs: set[str] = set()


class StoreState:
    """The state of a directory store handle, declared for every part that uses it."""

    _path: Path
    _seal_bytes: int | None
    _seal_at: int
    seal_error: str | None
    _read_only: bool
    _hold_for_life: bool
    _held: bool
    _pinned: bool
    append_guard: AppendGuard | None
    _ownership: DirectoryOwnership | None
    _queue: DirectoryQueue | None
    _indexed_end: int
    _clock: Callable[[], int]
    _repairs: list[Repair]
    _closed: bool
    _lock: threading.Lock
    _index_lock: threading.RLock
    _lock_fd: int | None
    _files: FileIO
    _writable: bool
    _mark: SyncedMark | None
    _log: GroupCommitLog | None
    _heads: dict[str, tuple[int, str]]
    _closed_here: set[str]
    _payloads: PayloadCache
    _pending: PendingIndex
    _filter: PayloadFilter | None
    _payloads_complete: bool
    _run_payloads: dict[str, tuple[int, int]]
    _tail_fragment: tuple[int, int] | None
    _sealed: SealedJournal | None
    damage: JournalCorruptError | None
    index_problem: str | None
    private_index_reason: str | None
    _index_writable: bool
    _tree_writable: bool
    _failure: StoreError | None
    _next_seq: int
    _format_version: int
    store_id: str
    _index: Index
    _tree: MerkleTreeFile | None
    _owns_lock: bool
    _file: JournalFile


def whole_record(raw: bytes, before: int, length: int, digest: bytes) -> bytes | None:
    """The payload record of ``digest`` (lowercase hex, ASCII) in ``raw`` (its ``length``
    bytes, after ``before`` bytes that must be a newline, and followed by one), or None when
    ``raw`` is not exactly one whole record of that payload."""
    record = raw[before : before + length]
    if (
        length <= 66
        or len(raw) != length + 1 + before
        or raw[:before] != NEWLINE[:before]
        or raw[-1:] != NEWLINE
        or record[:1] not in (b"=", b"-")
        or record[65:66] != b" "
        or record[1:65] != digest
    ):
        return None
    return record
