"""The embedded default store: a directory, like ``.git``, that needs no server.

Layout::

    <dir>/store.json     format marker and store id (written once, fsynced)
    <dir>/journal.log    entries and payload records (see ``journal``)
    <dir>/journal.synced how much of the journal is known durable (see ``synced_mark``)
    <dir>/lock           advisory lock held by a writer while a commit writes its bytes
    <dir>/journal.shared the writers' shared written end and sync lock (see ``shared_end``)
    <dir>/index.sqlite   derived index (rebuilt from the journal when lost or stale; one
                         that contradicts the journal is reported, never rebuilt silently)
    <dir>/quarantine/    bytes cut from an unfinished write, kept for inspection

The journal and the mark are read and written through a ``FileIO`` (``fileio``), so that
tests can run the store on a simulated disk.

Several processes may write, one commit at a time; any number read, and readers never
wait. The writer lock (``flock`` on ``lock``) is held while a commit writes its bytes, never
across a run nor through the sync that follows (docs/spec.md 3.7):

* A handle takes it when the first entry of a commit is queued (entries queued meanwhile by
  other threads or tasks of the process join that commit, as before) and lets go once
  everything queued is written (``GroupCommitLog.placed``), before syncing it: syncs of
  several processes overlap or are shared (``GroupCommitLog._sync``, ``shared_end``).
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

import contextlib
import fcntl
import json
import os
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Self

from tracelock.core.canonical import dumps
from tracelock.storage.backend import Repair
from tracelock.storage.defaults import random_store_id, wall_clock_ms
from tracelock.storage.directory.checkpoints import DirectoryCheckpoints
from tracelock.storage.directory.fileio import OS_FILES, FileIO
from tracelock.storage.directory.files import create_durably, fsync_dir
from tracelock.storage.directory.journal import GroupCommitLog
from tracelock.storage.directory.merkle_tree import MerkleTreeFile
from tracelock.storage.directory.ownership import DirectoryOwnership
from tracelock.storage.directory.payload_cache import PayloadCache
from tracelock.storage.directory.queue import QUEUE_FILE, DirectoryQueue, queued_any
from tracelock.storage.directory.sealed import SEAL_BYTES, SealedJournal, wrap
from tracelock.storage.directory.state import NUL, STORE_VERSION, PendingIndex
from tracelock.storage.directory.synced_mark import MARK_FILE, SyncedMark, encode_mark
from tracelock.storage.directory.writes import Writes
from tracelock.storage.errors import StoreFormatError, StoreNotFoundError, StoreReadOnlyError
from tracelock.storage.failures import file_error, index_error
from tracelock.storage.ownership import FenceBook

__all__ = ["STORE_FORMAT", "STORE_VERSION", "DirectoryStore"]

STORE_FORMAT = "tracelock-store"

#: The payload cache holds the last 32,768 to 65,536 payload locations (PayloadCache).
_PAYLOAD_CACHE = 65536


class DirectoryStore(Writes):
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
        self.seal_error = None
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
        self.append_guard = None
        self._ownership = None
        self._queue = None
        #: Where this handle's index rows not yet handed to SQLite begin in the journal.
        self._indexed_end = 0
        self._clock = clock or wall_clock_ms
        self._repairs = []
        self._closed = False
        self._lock = threading.Lock()
        # Re-entrant: the Merkle tree calls back for leaf hashes while a query holds it.
        self._index_lock = threading.RLock()
        self._lock_fd = None
        self._files = files if files is not None else OS_FILES
        self._writable = False  # the journal is open for writing (this handle holds the lock)
        self._mark = None
        self._log = None
        self._heads = {}
        # Runs closed by this handle whose closing entry has not reached the index yet.
        self._closed_here = set()
        self._payloads = PayloadCache(_PAYLOAD_CACHE // 2)
        self._pending = PendingIndex()
        self._filter = None  # built on the first payload look-up
        #: True while every payload of the store is in ``_payloads`` (the store had none
        #: when opened, and the cache has not evicted any): a miss there is then an answer.
        self._payloads_complete = False
        #: Where the payloads of the run :meth:`entries` read last are stored, as the query
        #: that located its entries gave them: reading a run then costs the same whatever
        #: the store's size and whatever the payload cache holds (a miss there would cost a
        #: query, and a filter built from every payload of the store).
        self._run_payloads = {}
        self._tail_fragment = None
        self._sealed = None  # ``_file`` when it reads sealed segments
        #: The damage a read-only open stopped at (what a writer would refuse to open with):
        #: the handle reads the journal only up to it. ``log`` and ``show`` warn with it.
        self.damage = None
        #: Why ``index.sqlite`` was found altered when a read-only handle opened it (the
        #: handle then uses a private index built from the journal); a writer refuses.
        self.index_problem = None
        #: Why this handle answers from a private index built from the journal rather than
        #: ``index.sqlite`` (another process held the writer lock throughout its open, or
        #: this process may not write the store's files); None when it uses the file.
        self.private_index_reason = None
        #: A read-only handle on a store this process may not write keeps its index and
        #: its Merkle tree in memory (``_tree_writable``: it may write the tree's files).
        self._index_writable = True
        self._tree_writable = True
        #: The failure that killed this handle (a write of the index, or of the journal
        #: outside the commit log, that failed): every later call raises it.
        self._failure = None
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
            self._tree = None
            if self._owns_lock and not read_only:
                self._tree = MerkleTreeFile(self._path / "merkle", self._leaf_hashes)
                self._sync_tree()
            if self._writable and not read_only:
                # The log writes only past the sealed end: it takes the file itself.
                raw = self._file if self._sealed is None else self._sealed.file
                self._log = GroupCommitLog(raw, end, mark=self._record_mark(end))
                self._log.after_commit = self._release_if_idle
                self._log.before_sync = self._release_before_sync
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

    @property
    def tail_fragment(self) -> tuple[int, int] | None:
        """(offset, length) of an incomplete tail a reader stopped before, if any."""
        return self._tail_fragment

    @property
    def sync_count(self) -> int:
        return self._log.syncs if self._log is not None else 0

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
            if self._file.pread(1, end) == NUL and self._file.size() > end:
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
