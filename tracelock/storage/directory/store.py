"""The embedded default store: a directory, like ``.git``, that needs no server.

Layout::

    <dir>/store.json     format marker and store id (written once, fsynced)
    <dir>/journal.log    entries and payload records (see ``journal``)
    <dir>/journal.synced how much of the journal is known durable (see ``synced_mark``)
    <dir>/lock           advisory lock held by a writer for one commit at a time
    <dir>/index.sqlite   derived index (rebuilt from the journal when lost or stale; one
                         that contradicts the journal is reported, never rebuilt silently)
    <dir>/quarantine/    bytes cut from an unfinished write, kept for inspection

The journal and the mark are read and written through a ``FileIO`` (``fileio``), so that
tests can run the store on a simulated disk.

Several processes may write, one commit at a time; any number read, and readers never
wait. The writer lock (``flock`` on ``lock``) is held per commit, as SQLite holds its lock
per transaction, never across a run:

* A handle takes it when the first entry of a commit is queued (entries queued meanwhile by
  other threads or tasks of the process join that commit, as before) and lets go once
  everything queued is written and, where asked, synced (``GroupCommitLog.idle``).
* On taking it, the handle first catches up with what other processes appended since its
  own last commit (:meth:`DirectoryStore._catch_up_others`): one byte read at its end of the
  data tells whether anything was; if so the new records are read and chain-checked, and
  its sequence number, run heads, payload look-ups and pending index rows follow them. Only
  then are its entries built, so ``seq``, ``i`` and ``prev`` always come from the true tail.
* Appends to the same run from two processes therefore serialize: each entry continues the
  run's true head under the lock, the chain never forks. Which process drives a run is the
  runtime's business (approvals, for instance, are appended by another process on purpose).
* A process killed while holding the lock leaves at most an unfinished write at the end;
  the next writer, whichever process, judges it by the repair rule (docs/spec.md 3.5) under
  the lock, as at open. Each writer records in the synced mark only lengths it synced
  itself, and reads the mark as the durable part of what others wrote: the mark may lag,
  it never claims more. Free space past the data is cut at close only when no other
  process wrote past this handle's end.
* The index (SQLite, WAL) takes rows from whichever process writes or catches up; each
  batch is fitted to what the index covers already (``Index.add``). A handle opening the
  store catches the index up to the journal under the writer lock. A reader that finds the
  lock taken does not wait: it builds a private index, as before.
* Merkle queries take the lock to bring the shared tree files up to the index, then answer
  from that state; ``verify --store`` holds it while it compares the index with the journal.
* A reader that may not write the store (no write permission, a read-only file system, a
  full disk) takes the lock through a read-only descriptor, or not at all when it cannot open
  the lock file, and keeps its index and Merkle tree in memory (``private_index_reason``).
* A write that fails (``STORE_FULL`` when the journal or the index cannot grow, see
  ``failures``) kills the handle: every later call raises that error, the writer lock is let
  go, and nothing is recorded for it; the next open catches the index up from the journal.

Two handles of one store in one process are two writers: a handle never waits for its own
process, but a coroutine must not append through a second handle while the first has a
commit outstanding on the same event loop (the second would wait for the lock the first
can only release on that loop).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import orjson

from tracelock.core.canonical import dumps
from tracelock.core.entry import (
    ADMIN_RUN,
    TERMINAL_KINDS,
    ChainChecker,
    Entry,
    EntryFormatError,
    build_next,
    parse_entry,
)
from tracelock.core.merkle import leaf_hash
from tracelock.storage.backend import (
    NO_PAYLOAD,
    NewEntry,
    Repair,
    RunInfo,
    StoreFootprint,
    stored_payload,
)
from tracelock.storage.defaults import random_store_id, wall_clock_ms
from tracelock.storage.directory.checkpoints import DirectoryCheckpoints
from tracelock.storage.directory.disk_usage import store_parts
from tracelock.storage.directory.fileio import OS_FILES, FileIO
from tracelock.storage.directory.files import create_durably, fsync_dir, write_durably
from tracelock.storage.directory.index import (
    LOCATION,
    SCHEMA_VERSION,
    Index,
    IndexedPayload,
    typed_run_row,
)
from tracelock.storage.directory.journal import (
    ENTRY,
    PAYLOAD,
    REDACTED,
    GroupCommitLog,
    Record,
    data_end,
    scan_records,
)
from tracelock.storage.directory.merkle_tree import MerkleTreeFile, open_node_files
from tracelock.storage.directory.ownership import DirectoryOwnership
from tracelock.storage.directory.payload_cache import PayloadCache
from tracelock.storage.directory.payload_filter import PayloadFilter
from tracelock.storage.directory.queue import QUEUE_FILE, DirectoryQueue, queued_any
from tracelock.storage.directory.sealed import SEAL_BYTES, SealedJournal, wrap
from tracelock.storage.directory.synced_mark import MARK_FILE, SyncedMark, encode_mark
from tracelock.storage.errors import (
    IndexTamperedError,
    JournalCorruptError,
    PayloadMissingError,
    PayloadRedactedError,
    RunNotFoundError,
    StoreClosedError,
    StoreError,
    StoreFormatError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from tracelock.storage.failures import READ_ONLY_ERRNOS, file_error, index_error
from tracelock.storage.merkle_stream import StoredNodes
from tracelock.storage.ownership import AppendGuard, FenceBook
from tracelock.storage.run_fold import RunRow, row_difference

__all__ = ["STORE_FORMAT", "STORE_VERSION", "DirectoryStore"]

_log = logging.getLogger("tracelock.storage")

STORE_FORMAT = "tracelock-store"
#: Version 2 may hold sealed segments (``sealed/``, docs/spec.md 3.8); version 1 never does,
#: and is read as it is, then marked version 2 by the writer that first seals it.
STORE_VERSION = 2

#: The fields of a :class:`NewEntry` (run, kind, payload, meta, new_run): the single-entry
#: appends pass a plain tuple, cheaper to build than the named one.
_Item = tuple[str, str, Any, dict[str, Any] | None, bool]

_INDEX_BATCH = 2048
#: A reader opening the store tries the writer lock this many times, this long apart (about
#: 0.1 s in all). A busy writer holds it for most of the time (each commit holds it through
#: its sync) but lets go between commits: many short tries find one of those gaps.
_READER_LOCK_TRIES = 400
_READER_LOCK_PAUSE_S = 0.00025
#: The payload cache holds the last 32,768 to 65,536 payload locations (PayloadCache).
_PAYLOAD_CACHE = 65536
_NUL = b"\0"
_NEWLINE = b"\n"
#: A run's entries spanning at most this many journal bytes are read with one pread.
_BATCH_READ_BYTES = 1 << 16
#: How many of the newest entry locations an open checks against the journal.
_SPOT_CHECK = 64
#: What SQLite says of an index file that is damaged (rebuilt), rather than unusable here.
_DAMAGED_INDEX = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})




class _PendingIndex:
    """Records already queued to the journal whose index rows have not reached SQLite yet:
    (end offset, (entry, offset)) and (end offset, payload row); and the runs of those
    entries (a superset between flushes: a partial flush recomputes it)."""

    __slots__ = ("entries", "payloads", "runs")

    def __init__(self) -> None:
        self.entries: list[tuple[int, tuple[Entry, int]]] = []
        self.payloads: list[tuple[int, IndexedPayload]] = []
        self.runs: set[str] = set()


class DirectoryStore:
    """A :class:`tracelock.storage.backend.Store` kept in one directory.

    ``files`` is how the journal and its synced mark are read and written (default: the
    real file system); the tests pass a simulated disk that can lose power.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        read_only: bool = False,
        clock: Callable[[], int] | None = None,
        store_id: Callable[[], str] | None = None,
        files: FileIO | None = None,
        seal_bytes: int | None = SEAL_BYTES,
        _hold_for_life: bool = False,
    ) -> None:
        self._path = Path(path)
        #: A writer seals the durable journal into a compressed segment once this much of
        #: it lies past the last segment (``tracelock.storage.directory.sealed``); None: never.
        self._seal_bytes = seal_bytes
        self._seal_at = sys.maxsize  # the durable end at which this handle seals next
        #: Why the last attempt to seal failed (the journal is then simply left as it is).
        self.seal_error: str | None = None
        self._read_only = read_only
        #: Keep the writer lock from open to close (the benchmark's comparison with the
        #: lock-per-process rule that preceded the lock per commit; nothing else uses it).
        self._hold_for_life = _hold_for_life
        #: This handle holds the writer lock now (for a commit in progress); ``_pinned``:
        #: keep it until close (an index comparison in progress).
        self._held = False
        self._pinned = False
        #: Called under the writer lock for the runs this handle appends to under a lease
        #: (tracelock.storage.ownership): refuses a lost lease's appends.
        self.append_guard: AppendGuard | None = None
        self._ownership: DirectoryOwnership | None = None
        self._queue: DirectoryQueue | None = None
        #: Where this handle's index rows not yet handed to SQLite begin in the journal.
        self._indexed_end = 0
        self._clock = clock or wall_clock_ms
        self._repairs: list[Repair] = []
        self._closed = False
        self._lock = threading.Lock()
        # Re-entrant: the Merkle tree calls back for leaf hashes while a query holds it.
        self._index_lock = threading.RLock()
        self._lock_fd: int | None = None
        self._files = files if files is not None else OS_FILES
        self._writable = False  # the journal is open for writing (this handle holds the lock)
        self._mark: SyncedMark | None = None
        self._log: GroupCommitLog | None = None
        self._heads: dict[str, tuple[int, str]] = {}
        # Runs closed by this handle whose closing entry has not reached the index yet.
        self._closed_here: set[str] = set()
        self._payloads = PayloadCache(_PAYLOAD_CACHE // 2)
        self._pending = _PendingIndex()
        self._filter: PayloadFilter | None = None  # built on the first payload look-up
        #: True while every payload of the store is in ``_payloads`` (the store had none
        #: when opened, and the cache has not evicted any): a miss there is then an answer.
        self._payloads_complete = False
        #: Where the payloads of the run :meth:`entries` read last are stored, as the query
        #: that located its entries gave them: reading a run then costs the same whatever
        #: the store's size and whatever the payload cache holds (a miss there would cost a
        #: query, and a filter built from every payload of the store).
        self._run_payloads: dict[str, tuple[int, int]] = {}
        self._tail_fragment: tuple[int, int] | None = None
        self._sealed: SealedJournal | None = None  # ``_file`` when it reads sealed segments
        #: The damage a read-only open stopped at (what a writer would refuse to open with):
        #: the handle reads the journal only up to it. ``log`` and ``show`` warn with it.
        self.damage: JournalCorruptError | None = None
        #: Why ``index.sqlite`` was found altered when a read-only handle opened it (the
        #: handle then uses a private index built from the journal); a writer refuses.
        self.index_problem: str | None = None
        #: Why this handle answers from a private index built from the journal rather than
        #: ``index.sqlite`` (another process held the writer lock throughout its open, or
        #: this process may not write the store's files); None when it uses the file.
        self.private_index_reason: str | None = None
        #: A read-only handle on a store this process may not write keeps its index and
        #: its Merkle tree in memory (``_tree_writable``: it may write the tree's files).
        self._index_writable = True
        self._tree_writable = True
        #: The failure that killed this handle (a write of the index, or of the journal
        #: outside the commit log, that failed): every later call raises it.
        self._failure: StoreError | None = None
        self._next_seq = 0  # the journal's entry count, set once it is indexed at open

        meta_path = self._path / "store.json"
        journal = self._path / "journal.log"
        try:
            if not meta_path.exists():
                if read_only or not create:
                    raise StoreNotFoundError(f"no tracelock store at {self._path}")
                self._create(store_id or random_store_id)
            self._check_format(meta_path)
            # A writer waits for the lock (one commit of another process at most); a reader
            # takes it too when it is free: it may then repair a torn tail and bring the
            # on-disk index up to date. When a commit holds it, a reader builds a private
            # in-memory index instead and repairs nothing. Either lets go once open.
            self._owns_lock = self._acquire_lock(wait_fail=not read_only)
            self._writable = self._owns_lock
            # A reader never writes the journal or the mark (only a writer repairs).
            self._file = wrap(self._files.open(journal, write=self._writable and not read_only), self._path)
            self._sealed = self._file if isinstance(self._file, SealedJournal) else None
            if self._sealed is not None and self._writable and not read_only:
                self._sealed.prepare()
            self._mark = SyncedMark.open(self._files, self._path, write=self._writable and not read_only)
            end = self._index_journal()
            self._indexed_end = end
            self._tree: MerkleTreeFile | None = None
            if self._owns_lock and not read_only:
                self._tree = MerkleTreeFile(self._path / "merkle", self._leaf_hashes)
                self._sync_tree()
            if self._writable and not read_only:
                # The log writes only past the sealed end: it takes the file itself.
                raw = self._file if self._sealed is None else self._sealed.file
                self._log = GroupCommitLog(raw, end, mark=self._record_mark(end))
                self._log.after_commit = self._release_if_idle
                if seal_bytes is not None and self._sealed is not None:
                    self._seal_at = self._sealed.sealed_end + seal_bytes
            if self._held and not self._hold_for_life:
                self._unlock()
        except OSError as exc:
            self._release()
            raise file_error(exc, f"cannot open the store at {self._path}") from None
        except sqlite3.Error as exc:
            self._release()
            raise index_error(exc, self._path / "index.sqlite") from None
        except BaseException:
            self._release()
            raise

    # -- opening -----------------------------------------------------------------------
    def _create(self, store_id: Callable[[], str]) -> None:
        try:
            self._path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise StoreFormatError(f"{self._path} is not a store: a file is in the way of the store directory") from None
        # Both made durable here; store.json, written last, syncs the directory that
        # names them, and marks the store as created.
        for name, content in (("journal.log", b""), (MARK_FILE, encode_mark(0))):
            fd = os.open(self._path / name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
        marker = {"format": STORE_FORMAT, "version": STORE_VERSION, "store_id": store_id()}
        create_durably(self._path / "store.json", dumps(marker) + b"\n")  # another process may have won
        parent = self._path.resolve().parent
        fsync_dir(parent)

    def _check_format(self, meta_path: Path) -> None:
        try:
            raw = meta_path.read_bytes()
        except OSError as exc:
            raise file_error(exc, f"cannot read {meta_path}") from None
        try:
            marker = json.loads(raw)
        except ValueError as exc:
            raise StoreFormatError(f"{meta_path} is unreadable: {exc}") from None
        if not isinstance(marker, dict) or marker.get("format") != STORE_FORMAT:
            raise StoreFormatError(f"{self._path} is not a tracelock store")
        if marker.get("version") not in (1, STORE_VERSION):
            raise StoreFormatError(
                f"{self._path} has store format version {marker.get('version')!r}; "
                f"this tracelock reads versions 1 to {STORE_VERSION}"
            )
        self._format_version = marker["version"]
        self.store_id = str(marker.get("store_id", ""))
        if not (self._path / "journal.log").exists():
            raise StoreFormatError(f"{self._path} has no journal.log")
        if (self._path / "journal.log").is_dir():
            raise StoreFormatError(f"{self._path / 'journal.log'} is a directory, not a journal file")

    def _acquire_lock(self, *, wait_fail: bool) -> bool:
        """Open the lock file and take the writer lock for the open: a writer (``wait_fail``)
        waits for it (another process holds it for one commit at most); a reader tries for
        about a tenth of a second (:meth:`_try_lock`), then returns False. A reader that may
        not write the lock file takes the lock through a read-only descriptor (``flock``
        needs no write access); when it cannot even open the file (a read-only directory
        without one), it returns False at once."""
        try:
            fd = os.open(self._path / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if wait_fail or exc.errno not in READ_ONLY_ERRNOS:
                raise
            try:
                fd = os.open(self._path / "lock", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.private_index_reason = f"this process cannot open the store's lock file ({exc.strerror})"
                return False
        try:
            if wait_fail:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                self._try_lock(fd)
        except BlockingIOError:
            self._lock_fd = fd  # kept open: a Merkle query takes the lock later
            self.private_index_reason = "another process holds the store"
            return False
        except OSError as exc:
            os.close(fd)
            raise StoreLockedError(
                f"cannot take the writer lock of the store at {self._path}: {exc.strerror or exc}",
                details={"store": str(self._path)},
            ) from None
        self._lock_fd = fd
        self._held = True
        return True

    @staticmethod
    def _try_lock(fd: int) -> None:
        """Take the lock without blocking, in up to :data:`_READER_LOCK_TRIES` tries;
        BlockingIOError when it is still taken. Without the lock a reader builds a private
        index from the whole journal, seconds for a large store, where with it the on-disk
        index needs only a catch-up of the commits since it was last written. (A blocking
        wait would take the lock at the next gap at once, but could not give up on a
        process that holds it for long.)"""
        for remaining in range(_READER_LOCK_TRIES - 1, -1, -1):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not remaining:
                    raise
                time.sleep(_READER_LOCK_PAUSE_S)  # tracelock: allow TL-CLOCK-002 -- paces a reader's tries of the lock at open; decides nothing recorded

    def _unlock(self) -> None:
        """Let go of the writer lock (the handle keeps the lock file open)."""
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        self._held = False

    def _hold_locked(self) -> None:
        """Take the writer lock for a commit, if this handle does not hold it, and catch up
        with what other processes appended meanwhile. Holds ``_lock``."""
        if self._held:
            return
        fd = self._lock_fd
        assert fd is not None  # a writer has its lock file open
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._held = True
        log = self._log
        sealed = self._sealed
        try:
            # The usual answer, inlined: free space where this handle's data ends, nobody
            # wrote since its last commit. With segments, the byte is read from the file
            # itself only past the segments this handle knows (a segment known to cover it
            # means others wrote, and sealed, past it); a NUL byte there may still be a block
            # a newer seal freed, which the generation count tells without a system call.
            written = log.written_end if log is not None else 0
            if log is None:
                self._catch_up_others()
            elif sealed is None:
                if self._file.pread(1, written) != _NUL:
                    self._catch_up_others()
            elif (
                written < sealed.sealed_end
                or sealed.file.pread(1, written) != _NUL
                or sealed.may_be_freed(written)
            ):
                self._catch_up_others()
        except BaseException:
            self._unlock()
            raise

    def _release_if_idle(self) -> None:
        """Let go of the writer lock once the commit is over (nothing queued, written or
        synced by any thread or task of this handle any more). On every append's path:
        :meth:`_release_if_idle_locked`, inlined. Seals first when it is due."""
        log = self._log
        if log is not None and log.durable_end >= self._seal_at:
            with self._lock:
                self._seal_locked()
        if self._held and not self._hold_for_life:
            with self._lock:
                log = self._log
                if self._held and not self._pinned and (log is None or log.idle()):
                    fd = self._lock_fd  # :meth:`_unlock`, inlined
                    if fd is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    self._held = False

    def _release_if_idle_locked(self) -> None:
        log = self._log
        if log is not None and log.durable_end >= self._seal_at:
            self._seal_locked()
        if self._held and not self._pinned and not self._hold_for_life and (log is None or log.idle()):
            self._unlock()

    def _seal_locked(self) -> None:
        """Seal the durable journal past the last segment, under the writer lock. A failure
        leaves the journal as it is (every byte still in ``journal.log``), is kept in
        ``seal_error``, and is tried again one ``seal_bytes`` later. Holds ``_lock``."""
        log, journal, every = self._log, self._file, self._seal_bytes
        assert log is not None and isinstance(journal, SealedJournal) and every is not None
        try:
            self._hold_locked()
            if self._format_version < STORE_VERSION:
                self._upgrade_format()
            # The mark is made to cover the sealed end durably: a segment deleted later leaves
            # a journal that ends before its mark, which a writer refuses (spec 3.5, 3.8).
            journal.seal(log.durable_end, before_freeing=None if self._mark is None else self._mark.sync)
            self.seal_error = None
        except Exception as exc:  # any failure: the appends it follows are durable already
            self.seal_error = f"{type(exc).__name__}: {exc}"
            self._seal_at = log.durable_end + every
            # Nothing is lost (every byte stays in journal.log), but the store stops
            # shrinking: said where an operator looks, once per attempt (one per seal_bytes).
            _log.warning(
                "sealing the journal of the store at %s failed; nothing is lost, the journal "
                "stays uncompressed, and the seal is tried again after %d more bytes: %s",
                self._path, every, self.seal_error,
            )
        else:
            # A backlog longer than one segment (a store written before segments) is sealed
            # on the next commits, one segment each.
            self._seal_at = journal.sealed_end + every

    def _upgrade_format(self) -> None:
        """Mark a version-1 store as version 2 before its first segment is sealed: a
        tracelock that predates segments would read their punched blocks as damage, so it
        must refuse the store instead. Holds the writer lock."""
        meta_path = self._path / "store.json"
        marker = json.loads(meta_path.read_bytes())
        if marker.get("version") == 1:
            write_durably(meta_path, dumps({**marker, "version": STORE_VERSION}) + b"\n")
        self._format_version = STORE_VERSION

    def _catch_up_others(self) -> None:
        """Read what other processes appended since this handle's last commit, under the
        writer lock, before this handle builds entries: check it as the open does (the
        chain, every payload reference; a torn tail left by a killed writer is judged by the
        repair rule), and follow it: sequence number, run heads, payload look-ups, and
        index rows (queued with this handle's own, in journal order). Holds ``_lock``."""
        log = self._log
        assert log is not None
        start = log.written_end
        probe = self._file.pread(1, start)
        if probe == _NUL:
            return  # free space: nobody wrote since
        if not probe:
            log.reallocated()  # the file ends here: another handle cut the free space
            return
        synced = self._mark.read() if self._mark is not None else None
        size = self._data_end_after(start)
        start_seq = self._next_seq
        checker = ChainChecker(
            start_seq,
            lookup=lambda run: self._known_head(run, start_seq, start),
            closed=lambda run: self._ended_before(run, start_seq),
        )
        rows: list[tuple[int, tuple[Entry, int]]] = []
        payload_rows: list[tuple[int, IndexedPayload]] = []
        end = start
        repaired = len(self._repairs)
        for item in self._sound_records(start, size, checker, synced):
            end = item.end
            if item.kind == ENTRY:
                rows.append((end, (parse_entry(item.data), item.offset)))
            else:
                payload_rows.append((end, (bytes.fromhex(item.data[1:65].decode()), item.offset, len(item.data))))
        heads = self._heads
        for _, (entry, _) in rows:
            if entry.kind in TERMINAL_KINDS:
                heads.pop(entry.run, None)
                self._closed_here.add(entry.run)
            else:
                heads[entry.run] = (entry.i, entry.hash)
        for _, (digest, at, length) in payload_rows:
            self._remember_payload(digest, at, length)
        self._pending.entries += rows
        self._pending.payloads += payload_rows
        self._pending.runs.update(entry.run for _, (entry, _) in rows)
        self._next_seq = checker.next_seq
        # A repair synced the cut; otherwise the mark says what the others synced.
        durable = end if len(self._repairs) > repaired else min(synced or 0, end)
        log.rebase(end, durable)

    def _data_end_after(self, start: int) -> int:
        """Where the data other processes appended after ``start`` ends: the first NUL byte
        (free space) or the end of the file, read forward. Between live processes the data
        is contiguous (a killed writer's write is cut short, never holed: only a power cut
        leaves NUL blocks inside data, and no process that opened the store before one is
        still running), so this reads what was appended and one block more, where
        :func:`data_end` would read the whole free space back from the end of the file."""
        position = start
        while True:
            chunk = self._file.pread(1 << 16, position)
            if not chunk:
                return position
            cut = chunk.find(_NUL)
            if cut >= 0:
                return position + cut
            position += len(chunk)

    def _ended_before(self, run: str, before_seq: int) -> bool:
        """Whether ``run`` ended before entry ``before_seq`` (chain rule 4: nothing of it may
        follow), by this handle's knowledge or the index's."""
        if run in self._closed_here:
            return True
        with self._index_lock:
            row = self._index.run_row(run)
        return row is not None and bool(row[10]) and row[7] < before_seq

    def _known_head(self, run: str, before_seq: int, before: int) -> tuple[int, str] | None:
        """A run's head as of entry ``before_seq`` at byte ``before`` (where a catch-up
        starts): this handle's own knowledge first, else the index, whose row may already
        count entries after that point (another process indexed them): the run's last entry
        before it is read then."""
        head = self._heads.get(run)
        if head is not None or run in self._closed_here:
            return head
        with self._index_lock:
            row = self._index.run_row(run)
            if row is None:
                return None
            if row[7] < before_seq:
                return None if row[10] else (row[8] - 1, row[9])
            locations = self._index.entry_locations(run)
        prior = [location for location in locations if location[0] < before]
        if not prior:
            return None
        entry = self._read_entry(*prior[-1])
        return None if entry.kind in TERMINAL_KINDS else (entry.i, entry.hash)

    def _index_journal(self) -> int:
        """Bring the index up to the journal at open (:meth:`_catch_up`); return where the
        journal's data ends. A reader that may not write ``index.sqlite`` (a read-only
        store, or a full disk) indexes the journal privately instead, as when another
        process holds the lock."""
        try:
            self._index = self._open_index()
            return self._catch_up_at_open()
        except sqlite3.Error as exc:
            if not self._read_only:
                raise
            index = getattr(self, "_index", None)
            if index is not None:
                index.close()
            self._index_writable = False
            self._owns_lock = False
            self.private_index_reason = f"this process cannot write the store's index ({exc})"
            self._index = self._open_index()
            return self._catch_up_at_open()

    def _catch_up_at_open(self) -> int:
        with self._index.transaction():
            end = self._catch_up()
            self._next_seq = self._index.entry_count
            self._payloads_complete = not self._index.has_payloads()
        return end

    def _open_index(self) -> Index:
        path = self._path / "index.sqlite"
        if not self._owns_lock or not self._index_writable:
            return Index(Path(":memory:"))
        try:
            return Index(path)
        except sqlite3.DatabaseError as exc:  # a damaged cache is rebuilt, never trusted
            code = getattr(exc, "sqlite_errorcode", None)
            if code is not None and code & 0xFF not in _DAMAGED_INDEX:
                raise  # a file this process may not write, a full disk: not damage
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            return Index(path)

    def _index_usable(self, size: int, synced: int | None) -> bool:
        """Whether the index can be caught up from where it ends (False: rebuild it).

        Stale, to be rebuilt: it ends past the journal's data, or covers bytes from the
        synced mark on that do not all hold data (it is never synced: after a power cut it
        may describe records that never reached the disk). Otherwise it covers only bytes
        that were written, and what it says about them must be true: a contradiction found
        by the spot checks of :meth:`_spot_check` is tampering (``IndexTamperedError``).
        """
        end = self._index.journal_end
        count = self._index.entry_count
        if end > size:
            return False
        position = synced or 0
        while position < end:
            chunk = self._file.pread(min(1 << 20, end - position), position)
            if not chunk or _NUL in chunk:
                return False
            position += len(chunk)
        if count == 0:
            return end == 0
        problem = self._spot_check(end, count)
        if problem is None:
            return True
        if not problem:
            return False  # the journal changed under the index: its scan judges it
        if self._journal_damaged(size, synced):
            # The journal's own damage is the verdict, as without an index (the scan that
            # follows reports it): the index is blamed only when the journal is sound.
            return False
        if not self._read_only:
            raise self._tampered(problem)
        # A reader changes nothing: it notes the lie and answers from a private index.
        self.index_problem = self._tampered(problem).message
        self._index.close()
        self._index = Index(Path(":memory:"))
        return False

    def _journal_damaged(self, size: int, synced: int | None) -> bool:
        """Whether the journal holds damage a writer refuses to open with, judged from its
        start as without an index; nothing is repaired, indexed or noted. Run only when the
        index contradicts the journal at open (rare: a whole pass)."""
        if synced is not None and synced > size:
            return True
        read_only, damage, fragment = self._read_only, self.damage, self._tail_fragment
        self._read_only, self.damage = True, None  # judge as a reader: report, never repair
        try:
            for _ in self._sound_records(0, size, ChainChecker(0), synced):
                pass
            return self.damage is not None
        finally:
            self._read_only, self.damage, self._tail_fragment = read_only, damage, fragment

    def _spot_check(self, end: int, count: int) -> str | None:
        """Cheap checks at open (a few reads, never the whole journal): the index ends at a
        record boundary, its newest entry locations hold those entries, the last one with
        the hash it records, and that entry's run row agrees with it.

        None when they pass; what is wrong when the index contradicts the journal; "" when
        the journal's own records are what changed (a record there is no valid entry, or
        the index agrees with itself about a last entry the journal holds otherwise): the
        index is then rebuilt and the journal judged by the scan, as without an index."""
        if self._file.pread(1, end - 1) != _NEWLINE:
            return f"it ends at byte {end}, which is not the end of a journal record"
        block = self._index.last_block()
        if block is None or block[0] + len(block[1]) // LOCATION.size != count:
            return f"it counts {count} entries but holds locations for another number"
        first_seq, blob = block
        checked = min(_SPOT_CHECK, len(blob) // LOCATION.size)
        last: Entry | None = None
        for seq in range(count - checked, count):
            offset, length = LOCATION.unpack_from(blob, (seq - first_seq) * LOCATION.size)
            entry = self._located_entry(seq, offset, length)
            if entry is None:
                return ""
            if isinstance(entry, str):
                return entry
            last = entry
        assert last is not None
        row = self._index.run_row(last.run)
        if last.hash != self._index.last_hash:
            if row is not None and row[9] == self._index.last_hash:
                return ""
            return f"it records hash {self._index.last_hash} for entry {last.seq}, the journal holds {last.hash}"
        problem = self._head_problem(row, last)
        if problem is None and row is not None and last.meta is not None:
            status = last.meta.get("status")
            if isinstance(status, str) and row[3] != status:
                problem = f"run {last.run} is {row[3]!r} in it, its last entry says {status!r}"
        return problem

    def _located_entry(self, seq: int, offset: int, length: int) -> Entry | str | None:
        """The entry the index places at (offset, length) for ``seq``; what is wrong with
        the index when that is not one whole entry record of that seq; None when it is one
        whole record that is no valid entry (damage of the journal, not of the index)."""
        if offset < 0 or length <= 0:
            return f"entry {seq} has no valid location in it ({offset}, {length})"
        before = 1 if offset else 0
        raw = self._file.pread(length + 1 + before, offset - before)
        if raw[:before] != _NEWLINE[:before] or raw[-1:] != _NEWLINE or len(raw) != length + 1 + before:
            return f"it places entry {seq} at bytes {offset}-{offset + length}, which is not one journal record"
        line = raw[before:-1]
        if line[:1] != b"{":
            return f"it places entry {seq} at byte {offset}, which holds a payload record"
        try:
            entry = parse_entry(line)
        except EntryFormatError:
            return None
        if entry.seq != seq:
            return f"it places entry {seq} at byte {offset}, which holds entry {entry.seq}"
        return entry

    @staticmethod
    def _head_problem(row: RunRow | None, last: Entry) -> str | None:
        """What the run row of ``last``'s run states wrongly about its head, when ``last``
        is that run's last entry."""
        if row is None:
            return f"it has no row for run {last.run}"
        closed = last.kind in TERMINAL_KINDS
        if (row[7], row[8], row[9], bool(row[10])) != (last.seq, last.i + 1, last.hash, closed):
            return (
                f"its row for run {last.run} says {row[8]} entries, last seq {row[7]}, head "
                f"{row[9][:16]}, {'closed' if row[10] else 'open'}; the journal's last entry of the "
                f"run is seq {last.seq}, index {last.i}, hash {last.hash[:16]}, "
                f"{'closed' if closed else 'open'}"
            )
        return None

    def _misplaced(self, offset: int, length: int, problem: str) -> StoreError:
        """The error for a record the index places at bytes ``offset``..``offset+length``
        that do not hold it: damage of the journal when those bytes (with the line feeds
        around them) hold a NUL byte inside the data the index covers, since no record holds
        one (blocks of the journal were lost, as ``JOURNAL_CORRUPT`` at open without the
        index); otherwise the index lies (``problem``)."""
        with self._index_lock:
            covered = self._index.journal_end
        start = max(offset - 1, 0)
        end = min(offset + length + 1, covered)
        if end > start and _NUL in self._file.pread(end - start, start):
            return JournalCorruptError(
                f"the journal holds NUL bytes at bytes {start}-{end}, where its index places a "
                "record: blocks of the journal were lost (corruption or tampering, not a torn "
                "write: nothing was repaired; run `tracelock verify --store` for details)",
                details={"offset": offset, "length": length},
            )
        return self._tampered(problem)

    def _tampered(self, problem: str) -> IndexTamperedError:
        path = self._path / "index.sqlite"
        return IndexTamperedError(
            f"the store's index (a cache of the journal) contradicts the journal: {problem}. "
            "It covers only bytes that were written, so no crash explains this: the index was "
            "altered (or the journal rewritten after it was indexed; `tracelock verify --store` "
            f"checks the journal). It is not rebuilt silently: delete {path} to have it rebuilt "
            "from the journal",
            details={"index": str(path), "problem": problem},
        )

    def _catch_up(self) -> int:
        """Bring the index up to the journal's end; repair an unacknowledged tail if writing.

        Returns the offset at which new records will be appended. What may be repaired is
        decided by the journal and the synced mark alone, never by the index
        (``docs/spec.md`` section 3.5, :meth:`_judge_tail`).
        """
        # The mark before the size: a writer beside this reader only ever moves both forward.
        synced = self._mark.read() if self._mark is not None else None
        size = data_end(self._file)
        if synced is not None and synced > size:
            self._corrupt(
                size,
                f"the journal's data ends at byte {size}, before the {synced} bytes the store "
                "recorded as synced: acknowledged records are missing",
                synced,
            )
        if not self._index_usable(size, synced):
            self._index.reset()
        start = self._index.journal_end
        checker = ChainChecker(self._index.entry_count, lookup=self._index.head, closed=self._index.has_ended)
        entries: list[tuple[Entry, int]] = []
        payloads: list[IndexedPayload] = []
        end = start
        for item in self._sound_records(start, size, checker, synced):
            end = item.end
            if item.kind == ENTRY:
                entries.append((parse_entry(item.data), item.offset))
            elif item.kind == PAYLOAD:
                payloads.append((bytes.fromhex(item.data[1:65].decode()), item.offset, len(item.data)))
            if len(entries) + len(payloads) >= 50_000:
                self._index.add(entries, payloads, journal_end=end)
                entries, payloads = [], []
        if entries or payloads or end != self._index.journal_end:
            self._index.add(entries, payloads, journal_end=end)
        return end

    def _sound_records(
        self, start: int, size: int, checker: ChainChecker, synced: int | None
    ) -> Iterator[Record]:
        """The records from byte ``start`` that pass the journal's rules, in order. At the
        first that does not, it is judged (section 3.5: an unfinished write is cut, anything
        else is corruption and raises) and nothing more is yielded."""
        known: set[bytes] = set()
        records = scan_records(self._file, start, size)
        for item in records:
            if isinstance(item, tuple):
                self._judge_tail(item[0], "torn tail: last record has no newline", records, checker, known, synced, size)
                return
            # No record holds a NUL byte, but free space does: blocks of a write that never
            # reached the disk read back as NULs.
            if _NUL in item.data:
                self._judge_tail(item.offset, "NUL bytes inside a record", records, checker, known, synced, size)
                return
            problem = self._check_record(item, checker, known)
            if problem is not None:
                # A complete line without NUL bytes is exactly what was written to it: no
                # crash leaves one that is wrong.
                self._corrupt(item.offset, f"{problem}, in a complete record without NUL bytes", synced)
                return
            yield item

    def _judge_tail(
        self,
        offset: int,
        reason: str,
        rest: Iterator[Record | tuple[int, bytes]],
        checker: ChainChecker,
        known: set[bytes],
        synced: int | None,
        size: int,
    ) -> None:
        """Decide about the first bad record (at ``offset``), one a crash can leave (the
        last record without its newline, or a record with NUL bytes): cut it with
        everything after it as an unfinished write, or report corruption.

        It is an unfinished write only if both hold: it starts at or after the synced mark
        (every byte before the mark was synced, and a crash never damages synced bytes),
        and no record after it continues the chain (the record a crash interrupts is
        followed only by records written with it, after the last sync, which cannot
        continue the chain across the bytes it lost). Without a mark (a store written before
        marks existed), no entry after it may even parse.
        """
        if synced is not None and offset < synced:
            self._corrupt(
                offset,
                f"{reason}, before byte {synced}, which the store recorded as synced: "
                "a crash cannot damage synced bytes",
                synced,
            )
            return
        follower = self._follower(rest, checker, known, strict=synced is not None)
        if follower is not None:
            self._corrupt(
                offset,
                f"{reason}, and the record at byte {follower} after it "
                + ("continues the chain" if synced is not None else "is a valid entry (the store has no synced mark)"),
                synced,
            )
            return
        tail = self._file.pread(size - offset, offset)
        self._handle_bad_tail(offset, tail, reason, synced)

    def _follower(
        self,
        rest: Iterator[Record | tuple[int, bytes]],
        checker: ChainChecker,
        known: set[bytes],
        *,
        strict: bool,
    ) -> int | None:
        """The offset of the first entry in ``rest`` that continues the chain (``strict``)
        or merely parses, or None."""
        for item in rest:
            if isinstance(item, tuple) or _NUL in item.data:
                continue
            if item.kind == ENTRY:
                if not strict:
                    try:
                        parse_entry(item.data)
                    except EntryFormatError:
                        continue
                    return item.offset
                expected = checker.next_seq
                if self._check_record(item, checker, known) is None:
                    return item.offset
                checker.next_seq = expected
            else:
                self._check_record(item, checker, known)  # learns the payloads it holds
        return None

    def _corrupt(self, offset: int, reason: str, synced: int | None) -> None:
        """Report damage: a writer refuses to open; a reader notes it (once) and indexes
        what precedes it, leaving the verdict to verification."""
        error = JournalCorruptError(
            f"journal record at byte {offset} is damaged: {reason} (corruption or tampering, "
            "not a torn write: nothing was repaired; run `tracelock verify --store` for details)",
            details={"offset": offset, "reason": reason, "synced": synced},
        )
        if not self._read_only:
            raise error
        if self.damage is None:
            self.damage = error

    def _record_mark(self, end: int) -> SyncedMark:
        """Make the journal durable up to ``end`` and record that in the mark (at open, so
        that the mark is exact from the start; created if the store had none)."""
        synced = self._mark.read() if self._mark is not None else None
        if synced != end or self._mark is None:
            self._file.fdatasync()  # what a killed writer left in the page cache, too
            if self._mark is None:
                write_durably(self._path / MARK_FILE, encode_mark(end))
                self._mark = SyncedMark.open(self._files, self._path, write=True)
                assert self._mark is not None
            else:
                self._mark.record(end)
                self._mark.record(end)
                self._mark.sync()
        return self._mark

    def _check_record(self, record: Record, checker: ChainChecker, known: set[bytes]) -> str | None:
        if record.kind == ENTRY:
            try:
                entry = parse_entry(record.data)
            except EntryFormatError as exc:
                return exc.message
            issue = checker.check(entry)
            if issue is not None:
                return issue.message
            if entry.payload is not None:
                digest = bytes.fromhex(entry.payload)
                if digest not in known and not self._payload_stored(digest):
                    return f"entry {entry.seq} references payload {entry.payload} that is not stored"
            return None
        if record.kind == PAYLOAD:
            digest = record.data[1:65]
            if hashlib.sha256(record.data[66:]).hexdigest().encode() != digest:
                return "payload record does not match its hash"
            known.add(bytes.fromhex(digest.decode()))
            return None
        if record.kind == REDACTED:
            if record.data[66:].strip(b" "):
                return "redacted payload record still holds data (interrupted redaction?)"
            known.add(bytes.fromhex(record.data[1:65].decode()))
            return None
        return "unrecognized record"

    def _payload_stored(self, digest: bytes) -> bool:
        """Whether a payload record precedes the records being checked: in the index, or
        one this handle wrote or caught up on whose row is not in the index yet."""
        if digest in self._payloads:
            return True
        with self._index_lock:
            if self._index.payload_location(digest) is not None:
                return True
        return any(row[0] == digest for _, row in self._pending.payloads)

    def _handle_bad_tail(self, offset: int, data: bytes, reason: str, synced: int | None) -> None:
        if self._read_only or not self._writable:
            # Only a writer repairs; a reader (verify, log, show) stops before the bad tail
            # and leaves its judgement to verification.
            self._tail_fragment = (offset, len(data))
            return
        quarantine = self._path / "quarantine"
        quarantine.mkdir(exist_ok=True)
        saved = quarantine / f"tail-{offset}-{len(data)}.bin"
        write_durably(saved, data)
        self._file.truncate(offset)
        self._file.fdatasync()
        self._repairs.append(
            Repair(
                what=reason,
                offset=offset,
                length=len(data),
                saved_to=str(saved),
                details={
                    "synced_mark": synced,
                    "note": "never acknowledged: damage only a crash leaves, past the synced "
                    "mark, and no record after it continues the chain (docs/spec.md 3.5)",
                },
            )
        )

    # -- the Merkle tree ---------------------------------------------------------------
    def _sync_tree(self) -> None:
        """At open: cut the tree (a cache, like the index) back if the journal lost
        entries it covers (a repaired tail). It grows only when asked (``_catch_up_tree``)."""
        tree = self._tree
        assert tree is not None
        count = self._index.entry_count
        if tree.problem is None and tree.size > count:
            tree.truncate(count)
            tree.flush()

    def _iter_leaf_hashes(self, start_seq: int) -> Iterator[bytes]:
        start = self._entry_start(start_seq) if start_seq else 0
        if start is None:
            return
        for record in scan_records(self._file, start, self._index.journal_end):
            if isinstance(record, Record) and record.kind == ENTRY:
                yield leaf_hash(record.data)

    def _leaf_hashes(self, start: int, end: int) -> list[bytes]:
        """Leaf hashes of entries ``start .. end-1`` (all already in the index)."""
        hashes: list[bytes] = []
        if start >= end:
            return hashes
        with self._index_lock:
            for digest in self._iter_leaf_hashes(start):
                hashes.append(digest)
                if len(hashes) == end - start:
                    break
        return hashes

    def _catch_up_tree(self) -> None:
        """Bring the tree up to the index (holding the index lock). Only a Merkle query
        (checkpoints, proofs) calls this: the leaves are hashed from the journal then, in
        one pass, never on the path of an append, and a store nobody asks for proofs
        never pays for its tree."""
        tree = self._tree
        if tree is None:
            return
        count = self._index.entry_count
        if tree.problem is not None:
            tree.rebuild(self._iter_leaf_hashes(0))
        elif tree.size > count:
            tree.truncate(count)
        elif tree.size < count:
            tree.append(self._iter_leaf_hashes(tree.size))

    def _merkle(self) -> MerkleTreeFile:
        """The Merkle tree, brought up to the index under the writer lock: the tree files
        are shared by every process of the store, so they are re-read (another process may
        have grown them), grown and written while no one else can; the state read then is
        answered from afterwards (the files only grow past it)."""
        self._prepare_read()
        with self._index_lock:
            tree = self._tree
            if tree is not None and tree.problem is None and tree.size == self._index.entry_count:
                return tree  # it covers the index already (a proof per entry of an export)
        with self._lock:
            held = self._held
            if not held and not self._lock_merkle():
                # A reader that cannot take the lock (a read-only directory without a lock
                # file) answers from a tree of its own, over its own index, kept in memory.
                self._tree_writable = False
                with self._index_lock:
                    return self._load_tree()
            try:
                with self._index_lock:
                    if self._log is not None:
                        self._log.flush()
                        self._flush_pending_locked()
                    try:
                        return self._load_tree()
                    except OSError as exc:
                        if not self._read_only or exc.errno not in READ_ONLY_ERRNOS:
                            raise file_error(exc, f"cannot write the Merkle tree of the store at {self._path}") from None
                        self._tree_writable = False  # a reader that may not write the tree's files
                        return self._load_tree()
            finally:
                if not held:
                    self._release_if_idle_locked()

    def _load_tree(self) -> MerkleTreeFile:
        """Open the tree files, bring the tree up to the index and write what it added
        (only in memory when this handle may not write them). Holds ``_index_lock``."""
        if self._tree is not None:
            tree, self._tree = self._tree, None
            with contextlib.suppress(OSError):  # a cache: the new tree is read from the files
                tree.close()
        self._tree = MerkleTreeFile(self._path / "merkle", self._leaf_hashes, writable=self._tree_writable)
        self._catch_up_tree()
        if self._tree.problem is None:
            self._tree.flush()
        return self._tree

    def _lock_merkle(self) -> bool:
        """Take the writer lock for a Merkle query, which maintains files every process
        shares: it waits for one commit at most. A writer catches up with other processes'
        entries first; a reader brings the on-disk index up to the journal (switching to it
        if it opened with a private one). False when the lock file cannot be opened (a
        read-only directory). Holds ``_lock``."""
        if self._lock_fd is None:
            return False
        if self._log is not None:
            self._hold_locked()
            return True
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._held = True
        try:
            with self._index_lock:
                if not self._owns_lock and self._index_writable:
                    self._use_index_file()
                with self._index.transaction():
                    self._catch_up()
        except BaseException:
            self._unlock()
            raise
        return True

    def _use_index_file(self) -> None:
        """A reader that opened with a private index switches to ``index.sqlite``, brought
        up to the journal; it keeps the private one when it may not write the file.
        Holds the writer lock and ``_index_lock``."""
        private = self._index
        self._owns_lock = True
        try:
            self._index = self._open_index()
            with self._index.transaction():
                self._catch_up()
        except sqlite3.Error as exc:
            if self._index is not private:
                self._index.close()
            self._index = private
            self._owns_lock = False
            self._index_writable = False
            self.private_index_reason = f"this process cannot write the store's index ({exc})"
            return
        private.close()
        self.private_index_reason = None

    def tree_size(self) -> int:
        """Number of leaves (= entries) covered by the store's Merkle tree."""
        tree = self._merkle()
        with self._index_lock:
            return tree.size

    def tree_root(self, size: int | None = None) -> bytes:
        tree = self._merkle()
        with self._index_lock:
            return tree.root(size)

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]:
        tree = self._merkle()
        with self._index_lock:
            return tree.inclusion_proof(seq, size)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        tree = self._merkle()
        with self._index_lock:
            return tree.consistency_proof(size1, size2)

    # -- properties --------------------------------------------------------------------
    @property
    def location(self) -> str:
        return str(self._path)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def journal_path(self) -> Path:
        return self._path / "journal.log"

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def repairs(self) -> list[Repair]:
        return list(self._repairs)

    def index_to_compare(self) -> Index | None:
        """The on-disk index, for verification to compare with the journal; None when this
        handle answers from a private one (another process held the writer lock throughout
        its open, or the file was found altered at open: see ``index_problem``) or, for a
        reader, when another process keeps the lock throughout the tries of :meth:`_try_lock`.

        The comparison needs the index and the journal to end at the same record, so the
        handle takes the writer lock, brings the index up to the journal's end, and keeps
        the lock until it is closed: other processes' commits wait for the verification."""
        if not self._owns_lock or self.index_problem is not None or self._lock_fd is None:
            return None
        with self._lock:
            if self._log is not None:
                self._hold_locked()
                self._pinned = True
                self._log.flush()
                with self._index_lock:
                    self._flush_pending_locked()
                return self._index
            if not self._held:
                try:
                    self._try_lock(self._lock_fd)  # a busy writer lets go between commits
                except BlockingIOError:
                    return None
                self._held = True
            self._pinned = True
            with self._index_lock, self._index.transaction():
                self._catch_up()
            return self._index

    @property
    def tail_fragment(self) -> tuple[int, int] | None:
        """(offset, length) of an incomplete tail a reader stopped before, if any."""
        return self._tail_fragment

    @property
    def sync_count(self) -> int:
        return self._log.syncs if self._log is not None else 0

    # -- writing -----------------------------------------------------------------------
    def append(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        durable: bool = True,
        new_run: bool = False,
    ) -> Entry:
        out, end, backlog, done = self._enqueue(((run, kind, payload, meta, new_run),), write=not durable)
        if done:
            return out[0]
        return self._settle(out, end, backlog, durable)[0]

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        out, end, backlog, _ = self._enqueue(items)
        return self._settle(out, end, backlog, durable)

    def append_held(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> int:
        """Written at once, like ``append(..., durable=False)``: a write costs no flush here."""
        return self.append(run, kind, payload=payload, meta=meta, durable=False, new_run=new_run).ts

    def _settle(self, out: list[Entry], end: int, backlog: bool, durable: bool) -> list[Entry]:
        log = self._writer()
        try:
            if durable:
                log.wait_durable(end)
            else:
                # Written at once (not fsynced): a process crash loses nothing appended; only a
                # machine crash can lose what the next durability point had not covered yet.
                log.flush()
            if backlog:
                self._flush_index()
        except StoreError:
            # The handle is dead (its log failed): the writer lock goes at once, so that
            # other processes (`tracelock recover`) are not kept waiting for this one's end.
            with self._lock:
                self._release_if_idle_locked()
            raise
        self._release_if_idle()
        return out

    def append_async(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> Awaitable[Entry]:
        """:meth:`append` (durable) for a coroutine, to be awaited: concurrent tasks of one
        event loop share each ``fdatasync`` (see ``GroupCommitLog.durable_future``). The
        entry is queued when this is called; the await returns it once it is durable."""
        out, end, backlog, _ = self._enqueue(((run, kind, payload, meta, new_run),))
        if backlog:
            self._flush_index()  # the rows of bytes already written (not yet this entry's)
        log = self._log
        assert log is not None  # _enqueue checked that this handle writes
        return log.durable_future(end, out[0])

    def append_many_async(self, items: Sequence[NewEntry]) -> Awaitable[list[Entry]]:
        """:meth:`append_many` (durable) for a coroutine, like :meth:`append_async`."""
        out, end, backlog, _ = self._enqueue(items)
        if backlog:
            self._flush_index()
        return self._writer().durable_future(end, out)

    def _enqueue(self, items: Sequence[_Item], *, write: bool = False) -> tuple[list[Entry], int, bool, bool]:
        """Build the entries and queue their bytes; return them, the queue's end, whether
        enough index rows are pending to be worth a flush, and whether the commit is over.

        ``write`` (an append without a sync, most of a run's entries): when no other thread
        writes or syncs, the entry is built, written and the writer lock let go in this one
        hold of ``_lock`` (the commit is then over); otherwise its bytes only queue, and the
        caller settles them as any append's, without holding the handle meanwhile.

        All or nothing: the handle's state (sequence, run heads, payload cache, pending
        index rows) changes only once every entry of the batch is built, so a bad item
        (an invalid kind, an ended run) fails the call with nothing half-applied.

        This is the whole CPU cost of an append, paid under the GIL by every writer, so it
        is written for speed: payloads are canonicalized before the lock, index rows wait
        as ``(entry, offset)`` pairs, and the bytes go to the log as one buffer.
        """
        log = self._writer()
        prepared = [stored_payload(item[2]) for item in items]
        with self._lock:
            if self._closed:
                self._check_open()  # raises
            if not self._held:
                self._hold_locked()
            try:
                self._check_guard(items)
                if len(items) > 1:
                    return *self._build_locked(items, prepared, log), False
                out, end, backlog, written = self._build_one(items[0], prepared[0], log, write=write)
            except BaseException:
                self._release_if_idle_locked()  # nothing of this call was queued
                raise
            done = written and not backlog
            if done:
                self._release_if_idle_locked()
            return out, end, backlog, done

    def _check_guard(self, items: Sequence[_Item]) -> None:
        """Raise what the append guard refuses of these items' runs. Holds the writer lock."""
        guard = self.append_guard
        if guard is not None:
            runs = [item[0] for item in items]
            if guard.guards(runs):
                refused = guard.refused(None, runs)  # under the writer lock
                if refused:
                    raise next(iter(refused.values()))

    def _build_one(
        self, item: _Item, stored: tuple[bytes, bytes] | None, log: GroupCommitLog, *, write: bool
    ) -> tuple[list[Entry], int, bool, bool]:
        """:meth:`_build_locked` for a batch of one entry (every single append): the same
        checks, bytes and effects, without the batch's bookkeeping. ``write``: write the
        bytes at once when the log is idle (:meth:`GroupCommitLog.append_written`); the last
        value returned says whether they were."""
        run, kind, _, meta, new_run = item
        ts = self._clock()
        seq = self._next_seq
        offset = base = log.queued_end
        heads = self._heads
        payload_hex = None
        payload_row: IndexedPayload | None = None
        record = b""
        if stored is not None:
            data, digest = stored
            payload_hex = digest.hex()
            if (self._payloads_complete and digest not in self._payloads) or self._payload_location(digest) is None:
                mark, body = (b"=", data) if data else (b"-", b" ")
                length = len(body) + 66
                payload_row = (digest, offset, length)
                record = b"".join((mark, payload_hex.encode(), b" ", body, _NEWLINE))
                offset += length + 1
        if new_run:
            if run in heads or run in self._closed_here:
                raise StoreError(f"run {run!r} already exists", details={"run": run})
            head = None
        else:
            head = heads.get(run) or self._head(run)
        entry = build_next(seq, run, head, kind, payload_hex, ts, meta)
        line = entry.line
        end = offset + len(line) + 1
        data = record + line + _NEWLINE if record else line + _NEWLINE
        if write:
            start, written = log.append_written(data)
        else:
            start, written = log.enqueue(data), False
        assert start == base, "journal offsets diverged from the queue"
        self._next_seq = seq + 1
        pending = self._pending
        if payload_row is not None:
            self._remember_payload(*payload_row)
            pending.payloads.append((offset, payload_row))
        entries = pending.entries
        entries.append((end, (entry, offset)))
        pending.runs.add(run)
        if kind in TERMINAL_KINDS:
            heads.pop(run, None)
            self._closed_here.add(run)
        else:
            heads[run] = (entry.i, entry.hash)
        # The queue's end: every enqueue happens under ``_lock``, which this holds.
        return [entry], end, len(entries) >= _INDEX_BATCH, written

    def _build_locked(
        self, items: Sequence[_Item], prepared: list[tuple[bytes, bytes] | None], log: GroupCommitLog
    ) -> tuple[list[Entry], int, bool]:
        """The body of :meth:`_enqueue`, under ``_lock`` and the writer lock."""
        ts = self._clock()
        seq = self._next_seq
        offset = base = log.queued_end
        heads = self._heads
        cache, complete = self._payloads, self._payloads_complete
        # This batch's effects, applied at the end. A run's head is None once closed.
        touched: dict[str, tuple[int, str] | None] = {}
        fresh: set[bytes] = set()  # payloads this batch stores
        payload_rows: list[tuple[int, IndexedPayload]] = []
        entry_rows: list[tuple[int, tuple[Entry, int]]] = []
        chunks: list[bytes] = []
        out: list[Entry] = []
        for (run, kind, _, meta, new_run), stored in zip(items, prepared, strict=True):
            payload_hex = None
            if stored is not None:
                data, digest = stored
                payload_hex = digest.hex()
                if digest not in fresh and (
                    # A new payload while every payload is cached: the usual miss,
                    # answered inline; anything else takes the full look-up.
                    (complete and digest not in cache) or self._payload_location(digest) is None
                ):
                    # Empty data (never canonical JSON) is a redacted payload: an
                    # erased record of one blank byte.
                    mark, body = (b"=", data) if data else (b"-", b" ")
                    length = len(body) + 66
                    fresh.add(digest)
                    payload_rows.append((offset + length + 1, (digest, offset, length)))
                    chunks += (mark, payload_hex.encode(), b" ", body, b"\n")
                    offset += length + 1
            if new_run:
                if run in touched or run in heads or run in self._closed_here:
                    raise StoreError(f"run {run!r} already exists", details={"run": run})
                head = None
            elif run in touched:
                head = touched[run]
                if head is None:
                    raise _ended(run)
            else:
                head = heads.get(run) or self._head(run)
            entry = build_next(seq, run, head, kind, payload_hex, ts, meta)
            line = entry.line
            chunks += (line, b"\n")
            end = offset + len(line) + 1
            entry_rows.append((end, (entry, offset)))
            offset = end
            seq += 1
            touched[run] = None if kind in TERMINAL_KINDS else (entry.i, entry.hash)
            out.append(entry)
        start = log.enqueue(b"".join(chunks))
        assert start == base, "journal offsets diverged from the queue"
        self._next_seq = seq
        for _, (digest, at, length) in payload_rows:
            self._remember_payload(digest, at, length)
        pending = self._pending
        pending.payloads += payload_rows
        pending.entries += entry_rows
        pending.runs.update(touched)
        for run, head in touched.items():
            if head is None:
                heads.pop(run, None)
                self._closed_here.add(run)
            else:
                heads[run] = head
        return out, log.queued_end, len(pending.entries) >= _INDEX_BATCH

    def _writer(self) -> GroupCommitLog:
        if self._read_only or self._log is None:
            raise StoreReadOnlyError(f"the store at {self._path} is open read-only")
        return self._log

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _fail(self, error: StoreError) -> StoreError:
        """Kill the handle: a write of the store failed part way (the index, a payload's
        erasure), so what this handle knows may no longer match the files. Every later
        call raises ``error`` (the journal's commit log included), and the writer lock is
        let go. Nothing is repaired here: the next open catches the index up from the
        journal. Holds ``_lock``."""
        if self._failure is None:
            self._failure = error
            if self._log is not None:
                self._log.fail(error)
        if self._held and not self._hold_for_life:
            self._unlock()
        self._pinned = False
        return self._failure

    def _head(self, run: str) -> tuple[int, str] | None:
        """The run's last (index, hash), or None for a new run. Holds ``_lock``.

        Every run this handle appended to or caught up on (another process's entries,
        read under the writer lock before building) is in ``_heads`` (open) or
        ``_closed_here`` (closed, index rows maybe pending), so the index is only asked
        about runs with no entry since this handle opened, whose rows are all in SQLite.
        """
        head = self._heads.get(run)
        if head is not None:
            return head
        closed = run in self._closed_here
        if not closed:
            with self._index_lock:
                row = self._index.run_row(run)
                if row is None:
                    return None
                # The next entry commits to this head: a wrong one would be written into
                # the journal as a broken chain, so it is checked against the journal first.
                self._check_head(row)
            last_i, last_hash, closed = row[8] - 1, row[9], bool(row[10])
            if not closed:
                self._heads[run] = (last_i, last_hash)
                return last_i, last_hash
        raise _ended(run)

    def _check_head(self, row: RunRow) -> None:
        """Raise ``IndexTamperedError`` unless the journal holds the head a run row states.
        Holds ``_index_lock``."""
        location = self._index.entry_location(row[7])
        if location is None:
            raise self._tampered(f"its row for run {row[0]} ends at seq {row[7]}, which it does not locate")
        entry = self._located_entry(row[7], *location)
        if entry is None:
            entry = self._read_entry(*location)  # raises: the journal's record is damaged
        if isinstance(entry, str):
            raise self._misplaced(*location, entry)
        problem = (
            f"its row for run {row[0]} ends at seq {row[7]}, which is an entry of run {entry.run}"
            if entry.run != row[0]
            else self._head_problem(row, entry)
        )
        if problem is not None:
            raise self._tampered(problem)

    def sync(self) -> None:
        """Make everything appended so far durable."""
        self._writer().wait_durable()
        self._flush_index()
        self._release_if_idle()

    def erase_payload(self, digest: str) -> bool:
        """Overwrite a payload's bytes in place (same length; ``=`` becomes ``-``, data
        becomes spaces) and sync. Call it after appending the redaction entry, so that a
        crash in between leaves a recorded redaction still to be completed, never an
        unexplained hole. Returns False if the payload was already erased."""
        log = self._writer()
        raw = bytes.fromhex(digest)
        log.wait_durable()
        self._flush_index()
        # Under the writer lock: another process catching up must never read the record
        # half erased.
        with self._lock:
            self._hold_locked()
            try:
                location = self._payload_location(raw)
                if location is None:
                    raise PayloadMissingError(f"payload {digest} is not stored")
                offset, length = location
                current = self._file.pread(length, offset)
                if current[:1] == b"-":
                    return False
                blank = b"-" + current[1:66] + b" " * (length - 66)
                written = 0
                try:
                    while written < len(blank):
                        written += self._file.pwrite(blank[written:], offset + written)
                    self._file.fdatasync()
                except OSError as exc:
                    raise self._fail(file_error(exc, f"erasing payload {digest} failed")) from None
                return True
            finally:
                self._release_if_idle_locked()

    # -- index maintenance ---------------------------------------------------------------
    def _flush_pending_locked(self) -> None:
        """Move pending index rows whose bytes were written to SQLite. Holds ``_lock``."""
        log = self._log
        written = log.written_end if log is not None else 0
        pending = self._pending
        # Both lists are in journal order: split each at the first record not yet written.
        cut_entries = bisect.bisect_right(pending.entries, written, key=_end_of)
        cut_payloads = bisect.bisect_right(pending.payloads, written, key=_end_of)
        if not cut_entries and not cut_payloads:
            return
        entries = [item for _, item in pending.entries[:cut_entries]]
        payloads = [item for _, item in pending.payloads[:cut_payloads]]
        journal_end = max(
            pending.entries[cut_entries - 1][0] if cut_entries else 0,
            pending.payloads[cut_payloads - 1][0] if cut_payloads else 0,
        )
        del pending.entries[:cut_entries], pending.payloads[:cut_payloads]
        pending.runs = {entry.run for _, (entry, _) in pending.entries}
        with self._index_lock:
            try:
                self._add_rows(entries, payloads, journal_end)
            except sqlite3.Error as exc:
                # Those rows are lost to this handle: it is dead, and the next open indexes
                # the journal from where the index ends.
                raise self._fail(index_error(exc, self._path / "index.sqlite")) from None
        self._indexed_end = journal_end
        for entry, _ in entries:
            if entry.kind in TERMINAL_KINDS:
                self._closed_here.discard(entry.run)

    def _add_rows(self, entries: list[tuple[Entry, int]], payloads: list[IndexedPayload], journal_end: int) -> None:
        """Hand rows covering the journal from ``_indexed_end`` to ``journal_end`` to the
        index. Another process may have indexed some of these records already (they are
        skipped); if the index ends before them (rebuilt meanwhile by a process opening the
        store), the records in between are read from the journal and added first. Holds
        ``_index_lock``."""
        index = self._index
        while not index.add(entries, payloads, journal_end=journal_end, start=self._indexed_end):
            with index.transaction():
                covered = index.journal_end
                if covered >= self._indexed_end:
                    continue  # it moved on meanwhile: try the batch again
                gap_entries: list[tuple[Entry, int]] = []
                gap_payloads: list[IndexedPayload] = []
                for record in scan_records(self._file, covered, self._indexed_end):
                    if not isinstance(record, Record):
                        break
                    if record.kind == ENTRY:
                        gap_entries.append((self._read_line(record), record.offset))
                    elif record.kind == PAYLOAD:
                        gap_payloads.append((bytes.fromhex(record.data[1:65].decode()), record.offset, len(record.data)))
                index.add(gap_entries, gap_payloads, journal_end=self._indexed_end, start=covered)

    def _flush_index(self) -> None:
        if self._log is None:
            return
        self._log.flush()
        with self._lock:
            self._flush_pending_locked()

    # -- payload locations ---------------------------------------------------------------
    def _remember_payload(self, digest: bytes, offset: int, length: int) -> None:
        cache = self._payloads
        cache.put(digest, (offset, length))
        if self._filter is not None:
            self._filter.add(digest)
        if cache.dropped:
            self._payloads_complete = False

    def _payload_location(self, digest: bytes, *, reading: bool = False) -> tuple[int, int] | None:
        """Where a payload's record is (None: not stored). ``reading``: a read of one payload,
        which queries the index at once rather than first building the filter of every
        payload hash (that filter pays for itself only over a writer's many lookups of new
        payloads; building it for one read made a handle's first such read linear in the
        store). A read also never trusts ``_payloads_complete`` or the filter, which know
        only what this handle appended or caught up with under the writer lock: another
        process may have stored the payload since."""
        if not reading:
            if self._payloads_complete:
                return self._payloads.get(digest)
            if self._filter is None:
                with self._index_lock:
                    self._filter = PayloadFilter(self._index.payload_count() * 2)
                    self._filter.update(self._index.payload_hashes())
                    self._filter.update(row[0] for _, row in self._pending.payloads)
                    self._filter.update(self._payloads)
            # First: it holds every payload the cache does, and a new payload's look-up
            # then touches one block of it, not the cache's dicts as well (each a likely
            # cache miss in a long-lived writer).
            if not self._filter.may_contain(digest):
                return None
        location = self._payloads.get(digest)
        if location is not None:
            return location
        with self._index_lock:
            location = self._index.payload_location(digest)
        if location is not None:
            problem = self._payload_record_problem(digest, *location)
            if problem is not None:
                raise self._misplaced(*location, problem)
        if location is None:
            # Queued but not indexed yet, and already gone from the cache (rare: the cache
            # is much larger than an index batch).
            location = next(((offset, length) for _, (known, offset, length) in self._pending.payloads if known == digest), None)
        if location is not None:
            self._remember_payload(digest, *location)
        return location

    def _payload_record_problem(self, digest: bytes, offset: int, length: int) -> str | None:
        """What is wrong with the index's location of a payload, judged by the record there:
        one whole record, a payload record (kept or erased) of that hash."""
        before = self._file.pread(1, offset - 1) if offset > 0 else _NEWLINE
        head = self._file.pread(66, offset)
        after = self._file.pread(1, offset + length)
        if (
            length <= 66
            or before != _NEWLINE
            or head[:1] not in (b"=", b"-")
            or head[1:] != digest.hex().encode() + b" "
            or after != _NEWLINE
        ):
            return _misplaced_payload(digest, offset, length)
        return None

    def _entry_start(self, seq: int) -> int | None:
        """The offset of entry ``seq`` by the index, checked against the journal (a scan
        started from a wrong offset would read garbage); None if the index has no such entry."""
        location = self._index.entry_location(seq)
        if location is None:
            return None
        entry = self._located_entry(seq, *location)
        if entry is None:
            self._read_entry(*location)  # raises: the journal's record is damaged
        if isinstance(entry, str):
            raise self._misplaced(*location, entry)
        return location[0]

    # -- reading -----------------------------------------------------------------------
    def _prepare_read(self, run: str | None = None) -> None:
        """Index what this handle has pending before a read; for a read of one ``run``'s
        index row, only if an entry of that run is pending (other runs' rows wait for their
        batch: a runtime asks for the admin chain's info every quarter second, and indexing
        everything first cost whichever run asked a flush of up to a batch, 1-8 ms)."""
        self._check_open()
        if self._sealed is not None:
            self._sealed.begin_read()
        log = self._log
        if log is None or (
            log.queued_end == log.written_end and not self._pending.entries and not self._pending.payloads
        ):
            return  # nothing appended since the last read: the index is current
        if run is not None:
            with self._lock:
                if run not in self._pending.runs:
                    return
        self._flush_index()

    def catch_up(self) -> None:
        """Read what other processes appended, under the writer lock as an append does, and
        index it, so that this handle's next reads see it (a queue worker taking a run over
        calls it before reading the run's journal)."""
        if self._log is None:
            return
        with self._lock:
            self._check_open()
            if not self._held:
                self._hold_locked()
            self._release_if_idle_locked()
        self._flush_index()

    def flush(self) -> None:
        """Hand everything appended so far to the file and the index (no fsync)."""
        self._prepare_read()
        self._release_if_idle()

    def size(self) -> int:
        self._prepare_read()
        with self._index_lock:
            return self._index.entry_count

    def runs(
        self,
        *,
        limit: int | None = None,
        status: str | None = None,
        offset: int = 0,
        agent: str | None = None,
        text: str | None = None,
    ) -> list[RunInfo]:
        self._prepare_read()
        with self._index_lock:
            return self._index.runs(
                limit=limit, status=status, offset=offset, agent=agent, text=text, exclude=ADMIN_RUN
            )

    def run_info(self, run: str) -> RunInfo:
        self._prepare_read(run)
        with self._index_lock:
            row = self._index.run(run)
            full = self._index.run_row(run)
            if full is not None:
                self._check_head(full)
        if row is None:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._path}")
        return row

    def entries(self, run: str) -> list[Entry]:
        self._prepare_read()
        with self._index_lock:
            row, locations, spots = self._index.run_row_and_locations(run)
        if not locations and row is None:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._path}")
        entries = self._read_entries(locations)
        problem = _run_problem(run, row, entries) or _payloads_problem(run, entries, spots)
        if problem is not None:
            raise self._tampered(problem)
        assert spots is not None  # _payloads_problem checked it
        # A location of length 0 is one the index has no row for: looked up as any other.
        self._run_payloads = {
            entry.payload: spot for entry, spot in zip(entries, spots, strict=True) if entry.payload and spot and spot[1]
        }
        return entries

    def entry_at(self, seq: int) -> Entry:
        self._prepare_read()
        with self._index_lock:
            location = self._index.entry_location(seq)
        if location is None:
            raise StoreError(f"no entry with seq {seq}")
        entry = self._located_entry(seq, *location)
        if entry is None:
            return self._read_entry(*location)  # raises: the journal's record is damaged
        if isinstance(entry, str):
            raise self._misplaced(*location, entry)
        return entry

    def _read_entries(self, locations: list[tuple[int, int]]) -> list[Entry]:
        """The entries at ``locations``; one read covers them all when they lie close
        together (a run's entries usually do), each checked as :meth:`_read_entry` checks it."""
        if not locations:
            return []
        low, high = locations[0][0], 0
        for offset, length in locations:
            if offset < low:
                low = offset
            if offset + length > high:
                high = offset + length
        base = low - 1 if low else 0
        if high + 1 - base > _BATCH_READ_BYTES:
            return [self._read_entry(offset, length) for offset, length in locations]
        raw = self._file.pread(high + 1 - base, base)
        return [self._entry_in(raw, base, offset, length) for offset, length in locations]

    def _read_entry(self, offset: int, length: int) -> Entry:
        base = offset - 1 if offset else 0
        return self._entry_in(self._file.pread(offset + length + 1 - base, base), base, offset, length)

    def _entry_in(self, raw: bytes, base: int, offset: int, length: int) -> Entry:
        """The entry at ``offset`` in ``raw`` (the file's bytes from ``base``): it must be one
        whole record, a newline on each side (none before it at the start of the file)."""
        at = offset - base
        end = at + length
        if end >= len(raw) or raw[end] != 10 or (offset and raw[at - 1] != 10):
            raise self._misplaced(offset, length, f"it places an entry at bytes {offset}-{offset + length}, which is not one journal record")
        line = raw[at:end]
        try:
            return parse_entry(line)
        except EntryFormatError as exc:
            raise JournalCorruptError(
                f"entry at byte {offset} is damaged: {exc.message}", details={"offset": offset}
            ) from None

    def iter_records(self, start_offset: int = 0) -> Iterator[Record | tuple[int, bytes]]:
        """Every record of the journal file from ``start_offset`` to the end of the file,
        damaged ones included (verification reads the file, not the index)."""
        self._prepare_read()
        return scan_records(self._file, start_offset, None)

    def iter_entries(self, start_seq: int = 0) -> Iterator[Entry]:
        self._prepare_read()
        with self._index_lock:
            start = self._entry_start(start_seq) if start_seq else 0
            end = self._index.journal_end
        if start is None:
            return
        for record in scan_records(self._file, start, end):
            if isinstance(record, Record) and record.kind == ENTRY:
                yield self._read_line(record)

    def _read_line(self, record: Record) -> Entry:
        try:
            return parse_entry(record.data)
        except EntryFormatError as exc:
            raise JournalCorruptError(
                f"entry at byte {record.offset} is damaged: {exc.message}",
                details={"offset": record.offset},
            ) from None

    def footprint(self) -> StoreFootprint:
        self._prepare_read()
        with self._index_lock:
            runs, open_runs = self._index.run_counts(exclude=ADMIN_RUN)
            entries = self._index.entry_count
            data_end = self._index.journal_end
        parts, segments = store_parts(self._path)
        sealed_end = self._sealed.sealed_end if self._sealed is not None else 0
        details = {
            "format_version": self._format_version,
            "index_schema": int(SCHEMA_VERSION),
            "journal_bytes": data_end,
            "segment_files": segments,
            "sealed_end": sealed_end,
            "unsealed_bytes": max(0, data_end - sealed_end),
            "seal_every_bytes": self._seal_bytes,
        }
        return StoreFootprint(runs, open_runs, entries, parts, details)

    def payload_state(self, digest: str) -> str:
        self._prepare_read()
        with self._lock:
            location = self._payload_location(bytes.fromhex(digest), reading=True)
        if location is None:
            return "missing"
        head = self._file.pread(1, location[0])
        return "redacted" if head == b"-" else "present"

    def payload_state_before(self, digest: str, before: int) -> str:
        """Like :meth:`payload_state`, but only a record that starts before byte ``before``
        and whose bytes match the hash counts (used by verification, which trusts no index)."""
        with self._index_lock:
            location = self._index.payload_location(bytes.fromhex(digest))
        if location is not None and location[0] < before and self._payload_record_problem(bytes.fromhex(digest), *location) is None:
            record = self._file.pread(location[1], location[0])
        else:
            # Not where the index says (if it says): a wrong index must not make a payload
            # look missing either, so the journal itself is searched (the index comparison
            # of verification then reports the index).
            found = next(
                (
                    item
                    for item in scan_records(self._file, 0, before)
                    if isinstance(item, Record) and item.kind in (PAYLOAD, REDACTED) and item.data[1:65] == digest.encode()
                ),
                None,
            )
            if found is None:
                return "missing"
            record = found.data
        if record[:1] == b"-" and record[1:65] == digest.encode():
            return "redacted"
        if record[:1] == b"=" and hashlib.sha256(record[66:]).hexdigest() == digest:
            return "present"
        return "missing"

    def _run_payload_record(self, digest: str) -> tuple[int, bytes] | None:
        """(offset, record) of a payload of the run read last, checked as one whole record of
        that payload, in one read; None when it is not one of them or the index lacks it."""
        location = self._run_payloads.get(digest)
        if location is None:
            return None
        offset, length = location
        before = 1 if offset else 0
        record = _whole_record(self._file.pread(length + 1 + before, offset - before), before, length, digest.encode())
        if record is None:
            raise self._misplaced(offset, length, _misplaced_payload(bytes.fromhex(digest), offset, length))
        return offset, record

    def get_payload_bytes(self, digest: str) -> bytes:
        self._prepare_read()
        return self._payload_bytes(digest)

    def get_payloads_bytes(self, digests: Sequence[str]) -> dict[str, bytes]:
        """A run's payloads lie close together in the journal: those this handle can locate
        without the index (its cache, the run read last) are read in one read when they fit
        in :data:`_BATCH_READ_BYTES`, each checked as one whole record of its payload; any
        other, or one that fails that check, takes :meth:`_payload_bytes` (which says what
        is wrong with it)."""
        self._prepare_read()
        found: dict[str, bytes] = {}
        for digest, record in self._nearby_payload_records(digests):
            data = record[66:]
            if record[:1] == b"=" and hashlib.sha256(data).hexdigest() == digest:
                found[digest] = data
        for digest in digests:
            if digest not in found:
                with contextlib.suppress(PayloadRedactedError, PayloadMissingError):
                    found[digest] = self._payload_bytes(digest)
        return found

    def _nearby_payload_records(self, digests: Sequence[str]) -> list[tuple[str, bytes]]:
        """(digest, whole record) of those of ``digests`` located from memory, read
        together; none when fewer than two are, or they lie too far apart."""
        spots: list[tuple[str, int, int]] = []
        run_payloads = self._run_payloads
        with self._lock:
            cache = self._payloads
            for digest in dict.fromkeys(digests):
                location = run_payloads.get(digest) or cache.get(bytes.fromhex(digest))
                if location is not None:
                    spots.append((digest, *location))
        if len(spots) < 2:
            return []
        low = min(offset for _, offset, _ in spots)
        high = max(offset + length for _, offset, length in spots)
        base = low - 1 if low else 0
        if high + 1 - base > _BATCH_READ_BYTES:
            return []
        block = self._file.pread(high + 1 - base, base)
        out = []
        for digest, offset, length in spots:
            before = 1 if offset else 0
            start = offset - before - base
            record = _whole_record(block[start : start + length + 1 + before], before, length, digest.encode())
            if record is not None:
                out.append((digest, record))
        return out

    def _payload_bytes(self, digest: str) -> bytes:
        """:meth:`get_payload_bytes` once the read is prepared."""
        raw = bytes.fromhex(digest)
        # A payload this handle wrote or read lately is located from memory, one of the run
        # read last from what the query that located its entries gave: no query. Only any
        # other payload is looked up in the index by its hash.
        with self._lock:
            cached = self._payloads.get(raw)
        found = None if cached is None else (cached[0], self._file.pread(cached[1], cached[0]))
        if found is None:
            found = self._run_payload_record(digest)
        if found is None:
            with self._lock:
                location = self._payload_location(raw, reading=True)
            if location is None:
                raise PayloadMissingError(
                    f"payload {digest} is not in the store", details={"payload": digest}
                )
            found = location[0], self._file.pread(location[1], location[0])
        offset, record = found
        if record[:1] == b"-":
            raise PayloadRedactedError(
                f"payload {digest} was redacted", details={"payload": digest}
            )
        data = record[66:]
        if record[:1] != b"=" or hashlib.sha256(data).hexdigest() != digest:
            raise JournalCorruptError(
                f"payload {digest} at byte {offset} does not match its hash",
                details={"payload": digest, "offset": offset},
            )
        return data

    def get_payload(self, digest: str) -> Any:
        return orjson.loads(self.get_payload_bytes(digest))

    # -- run ownership (tracelock.storage.ownership) ------------------------------------
    def ownership(self) -> DirectoryOwnership:
        """The run leases of this handle (made on first use; its fence guards this
        handle's appends)."""
        with self._lock:
            if self._ownership is None:
                if self._closed:
                    self._check_open()  # raises
                if self._read_only:
                    raise StoreReadOnlyError(f"the store at {self._path} is open read-only: it cannot own runs")
                self._ownership = DirectoryOwnership(self._path, clock_ms=wall_clock_ms, writer_lock=self._writer_locked)
                self.append_guard = self._ownership.guard
            return self._ownership

    @property
    def backend(self) -> str:
        return "directory"

    # -- checkpoints and the Merkle cache, for tracelock.evidence ----------------------
    def checkpoint_records(self) -> DirectoryCheckpoints:
        """Where this store keeps its checkpoint history: ``<store>/checkpoints``."""
        return DirectoryCheckpoints(self._path)

    def merkle_cache(self) -> tuple[StoredNodes | None, str | None]:
        """The stored Merkle nodes to compare with the journal: the node files under
        ``merkle/`` (see :func:`tracelock.storage.directory.merkle_tree.open_node_files`)."""
        return open_node_files(self._path / "merkle")

    def merkle_rebuild_advice(self) -> str:
        return "delete the store's merkle/ directory to have them rebuilt from the journal"

    def journal_leaf_hashes(self) -> Iterator[bytes]:
        """The leaf hash of every entry in ``seq`` order, from the journal's records
        themselves (never from a cache)."""
        for record in self.iter_records(0):
            if isinstance(record, Record) and record.kind == ENTRY:
                yield leaf_hash(record.data)

    # -- the run queue (tracelock.storage.queue_backend) --------------------------------
    def queue(self, *, clock_ms: Callable[[], int] | None = None) -> DirectoryQueue:
        """This handle's run queue, ``<store>/queue.sqlite`` (made on first use, then the
        same object; ``clock_ms`` measures its lease expiry, by default the wall clock)."""
        with self._lock:
            if self._queue is not None:
                return self._queue
            self._check_open()
        # Outside _lock: ownership() takes it. A read-only handle, which appends nothing,
        # gives its queue a fence book of its own.
        fences = FenceBook() if self._read_only else self.ownership().fences
        made = DirectoryQueue(self._path, fences=fences, clock_ms=clock_ms)
        with self._lock:
            if self._queue is None:
                self._queue = made
                return made
        made.close()
        return self._queue

    def has_queue(self) -> bool:
        """Whether someone ever queued a run on this store (a store nobody queued to is not
        given a queue: its ``queue.sqlite`` may exist for the run leases alone)."""
        if self._queue is not None:
            return True
        return queued_any(self._path / QUEUE_FILE)

    def close_queue(self) -> None:
        """Close the run queue, if it was made (before the store closes)."""
        with self._lock:
            queue, self._queue = self._queue, None
        if queue is not None:
            queue.close()

    @contextlib.contextmanager
    def _writer_locked(self) -> Iterator[None]:
        """Hold the writer lock (ordered with every append of every process) for a moment."""
        with self._lock:
            self._check_open()
            self._hold_locked()
            try:
                yield
            finally:
                self._release_if_idle_locked()

    # -- closing -----------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self.close_queue()
        if self._ownership is not None:
            self._ownership.close()
        try:
            log = self._log
            if log is not None and self._failure is None:
                try:
                    log.close(truncate=False)
                finally:
                    # A failed log is done with: nothing more is written for it.
                    with self._lock:
                        if self._failure is None and log.error is None:
                            self._flush_pending_locked()
                            self._cut_free_space(log)
        finally:
            self._closed = True
            self._release()

    def _cut_free_space(self, log: GroupCommitLog) -> None:
        """At close: cut the free space kept past this handle's data, under the writer
        lock, unless another process wrote past it since (the space is then its data's).
        Not synced: lost in a crash, the journal merely keeps free space. Holds ``_lock``."""
        if self._file is None or self._lock_fd is None:
            return
        end = log.written_end
        if not self._held:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            self._held = True
        try:
            if self._file.pread(1, end) == _NUL and self._file.size() > end:
                self._file.truncate(end)
        finally:
            self._unlock()

    def _release(self) -> None:
        index = getattr(self, "_index", None)
        if index is not None:
            index.close()
        tree = getattr(self, "_tree", None)
        if tree is not None:
            # The tree is a cache that the next query brings up to the index: a full disk
            # or a read-only file system must not turn a close into a failure.
            with contextlib.suppress(OSError):
                tree.close()
        for name in ("_file", "_mark"):
            handle = getattr(self, name, None)
            if handle is not None:
                handle.close()
                setattr(self, name, None)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ended(run: str) -> StoreError:
    return StoreError(f"run {run!r} has ended; nothing can be appended to it", details={"run": run})


def _whole_record(raw: bytes, before: int, length: int, digest: bytes) -> bytes | None:
    """The payload record of ``digest`` (lowercase hex, ASCII) in ``raw`` (its ``length``
    bytes, after ``before`` bytes that must be a newline, and followed by one), or None when
    ``raw`` is not exactly one whole record of that payload."""
    record = raw[before : before + length]
    if (
        length <= 66
        or len(raw) != length + 1 + before
        or raw[:before] != _NEWLINE[:before]
        or raw[-1:] != _NEWLINE
        or record[:1] not in (b"=", b"-")
        or record[65:66] != b" "
        or record[1:65] != digest
    ):
        return None
    return record


def _misplaced_payload(digest: bytes, offset: int, length: int) -> str:
    return (
        f"it places payload {digest.hex()} at bytes {offset}-{offset + length}, which do "
        "not hold that payload's record"
    )


def _end_of(item: tuple[int, Any]) -> int:
    return item[0]


def _payloads_problem(run: str, entries: list[Entry], spots: list[tuple[int, int] | None] | None) -> str | None:
    """What the payload locations the index gives for a run's entries contradict."""
    if spots is None or len(spots) != len(entries):
        return f"its payload locations for run {run} do not fit the run's entries"
    for entry, spot in zip(entries, spots, strict=True):
        if (entry.payload is None) != (spot is None):
            return (
                f"it says entry {entry.seq} (run {run}) names {'no' if spot is None else 'a'} payload, "
                f"which the entry {'does' if spot is None else 'does not'}"
            )
    return None


def _run_problem(run: str, row: tuple[Any, ...] | None, entries: list[Entry]) -> str | None:
    """What a run's row and entry locations state that its entries (read at those
    locations) contradict."""
    status, agent, parent = "created", None, None
    for position, entry in enumerate(entries):
        if entry.run != run or entry.i != position:
            return (
                f"it lists the entry at seq {entry.seq} (run {entry.run}, index {entry.i}) as entry "
                f"{position} of run {run}"
            )
        meta = entry.meta
        if meta:
            value = meta.get("status")
            if isinstance(value, str):
                status = value
            if position == 0 and isinstance(meta.get("agent"), str):
                agent = meta["agent"]
    if row is None:
        return f"it lists entries of run {run} but has no row for it"
    if not entries:
        return f"it has a row for run {run} but no entry locations"
    first, last = entries[0], entries[-1]
    if first.meta and isinstance(first.meta.get("parent"), str):
        parent = first.meta["parent"]
    actual: RunRow = (
        run, agent, parent, status, first.ts, last.ts, first.seq, last.seq, len(entries), last.hash,
        int(last.kind in TERMINAL_KINDS),
    )
    return None if row == actual else row_difference(typed_run_row(row), actual)
