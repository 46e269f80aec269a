"""The writer lock, held while a commit places its bytes: taking it (and catching up with
other writers), letting it go once everything queued is written (before the sync, and
after sealing the journal when due), and the failure that kills a handle."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator

from tracelock.core.canonical import dumps
from tracelock.storage.directory.catch_up import CatchUp
from tracelock.storage.directory.files import write_durably
from tracelock.storage.directory.journal import GroupCommitLog
from tracelock.storage.directory.sealed import SealedJournal
from tracelock.storage.directory.state import NUL, STORE_VERSION
from tracelock.storage.errors import (
    StoreClosedError,
    StoreError,
    StoreLockedError,
    StoreReadOnlyError,
)
from tracelock.storage.failures import READ_ONLY_ERRNOS

__all__ = ["WriterLock"]

_log = logging.getLogger("tracelock.storage")

#: A reader opening the store tries the writer lock this many times, this long apart (about
#: 0.1 s in all). A busy writer holds it for most of the time (each commit holds it through
#: its sync) but lets go between commits: many short tries find one of those gaps.
_READER_LOCK_TRIES = 400

_READER_LOCK_PAUSE_S = 0.00025


class WriterLock(CatchUp):
    """Takes and releases the per-commit writer lock; seals the journal when it lets go."""

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
            mark = self._mark
            shared = mark.shared if mark is not None else None
            if log is not None and shared is not None:
                # Other processes are writing (the counter they share moved past this
                # handle's end): its syncs are shared with theirs.
                log.others_active = shared.written != log.written_end
            # The usual answer, inlined: free space where this handle's data ends, nobody
            # wrote since its last commit. With segments, the byte is read from the file
            # itself only past the segments this handle knows (a segment known to cover it
            # means others wrote, and sealed, past it); a NUL byte there may still be a block
            # a newer seal freed, which the generation count tells without a system call.
            written = log.written_end if log is not None else 0
            if log is None:
                self._catch_up_others()
            elif sealed is None:
                if self._file.pread(1, written) != NUL:
                    self._catch_up_others()
            elif (
                written < sealed.sealed_end
                or sealed.file.pread(1, written) != NUL
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
                if self._held and not self._pinned and (log is None or log.placed()):
                    fd = self._lock_fd  # :meth:`_unlock`, inlined
                    if fd is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    self._held = False

    def _release_if_idle_locked(self) -> None:
        log = self._log
        if log is not None and log.durable_end >= self._seal_at:
            self._seal_locked()
        if self._held and not self._pinned and not self._hold_for_life and (log is None or log.placed()):
            self._unlock()

    def _release_before_sync(self) -> None:
        """The commit log's ``before_sync``: let go of the writer lock before the disk
        flushes, once everything queued is written, so that other processes place their
        bytes meanwhile and their syncs overlap this one (the lock orders writes; a sync
        makes durable whatever was written before it, whoever wrote it). Skipped when
        another thread of this handle holds ``_lock`` (it may be the one syncing, from
        under it): the lock then goes when that commit settles, as it always did."""
        if not self._held or self._hold_for_life or not self._lock.acquire(blocking=False):
            return
        try:
            log = self._log
            if self._held and not self._pinned and log is not None and log.placed():
                self._unlock()
        finally:
            self._lock.release()

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

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _writer(self) -> GroupCommitLog:
        if self._read_only or self._log is None:
            raise StoreReadOnlyError(f"the store at {self._path} is open read-only")
        return self._log

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
