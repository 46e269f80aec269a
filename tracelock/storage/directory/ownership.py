"""Run ownership of the embedded directory store (:mod:`tracelock.storage.ownership`).

The leases are the rows of the ``leases`` table of ``<store>/queue.sqlite``, the run
queue's own (a worker's lease is the run's lease), with tokens from its ``token`` counter.
Expiry is measured on the machine's wall clock (one machine, one clock; never the store's
injected entry clock, which a lease must not advance). The lease connection
commits with ``synchronous=NORMAL``: a lease matters only while its owner's process lives,
and a machine crash ends every owner, so it is not worth a sync (the queue's own rows are
written with ``FULL``).

Fencing: the guard (:class:`_Fence`) reads the lease rows under the store's writer lock,
inside the append (``DirectoryStore.append_guard``). A take-over of an expired lease
changes the token while holding that same writer lock (``flock`` on ``<store>/lock``), so
an append either finished before the take-over (and the new holder reads it in the
journal) or comes after it and is refused. A lease taken where there was none needs no
lock: nobody appends under a token that was never drawn.

The fence reads the lease rows only when the **take-over epoch** moved since it last found
the handle's tokens current: an 8-byte counter in ``<store>/leases.epoch``, mapped into
memory, that every take-over (and a queue worker's hand-back) increments under the writer
lock before it lets go. Nothing else can void a live token (only its owner gives a lease
back), so an unchanged epoch proves the handle's tokens current, and an append pays a read
of mapped memory instead of a query.

Presence: a file ``runtimes/<pid>-<token>.lock`` with an exclusive ``flock`` held on it
(the kernel drops the lock when the process dies; a mark whose lock can be taken is stale).
A runtime's leases name it by that same ``<pid>-<token>``, so a lease whose owner's mark is
stale is void at once: its process is dead, whatever the lease's expiry says (a mark that is
missing proves nothing, and the lease then lasts until it expires). A stale mark is removed
once no lease names its owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tracelock.errors import StoreError
from tracelock.storage.directory.lease_epoch import EPOCH_FILE, LeaseEpoch, bump_epoch
from tracelock.storage.directory.queue import QUEUE_FILE, open_queue_db, renew_leases
from tracelock.storage.failures import sqlite_error
from tracelock.storage.ownership import FenceBook, LeaseHolder, Presence, RunLease, lost
from tracelock.storage.queue_backend import QueueError

__all__ = ["DirectoryOwnership"]

_PRESENCE = "runtimes"

#: How many fencing tokens a handle reserves at once.
_TOKEN_BLOCK = 64


class _Fence:
    """The append guard of a directory store handle (see the module docstring)."""

    def __init__(self, book: FenceBook, path: Path) -> None:
        self.book = book
        self._path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._epoch: LeaseEpoch | None = None
        #: The take-over epoch when the tokens below were last found current.
        self._version: int | None = None
        self._current: dict[str, int] = {}

    def tokens(self, runs: Iterable[str]) -> dict[str, int]:
        return self.book.wanted(runs)

    def refused(self, cursor: Any, runs: Sequence[str]) -> dict[str, StoreError]:
        wanted = self.book.wanted(runs)
        if not wanted:
            return {}
        with self._lock:
            if self._epoch is None:
                self._epoch = LeaseEpoch(self._path.with_name(EPOCH_FILE))
            version = self._epoch.value()
            if version == self._version:
                current = self._current
                for run, token in wanted.items():
                    if current.get(run) != token:
                        break
                else:
                    return {}
            if self._conn is None:
                self._conn = open_queue_db(self._path, synchronous="NORMAL")
            conn = self._conn
            marks = ",".join("?" * len(wanted))
            rows = conn.execute(f"SELECT run, token FROM leases WHERE run IN ({marks})", list(wanted)).fetchall()
            found = {str(run): int(token) for run, token in rows}
            if version != self._version:
                self._current.clear()
                self._version = version
            for run, token in found.items():
                self._current[run] = token
        return {run: lost(run, token, found.get(run)) for run, token in wanted.items() if found.get(run) != token}

    def forget(self, run: str) -> None:
        """This handle gave ``run``'s lease back: its token is no longer current."""
        with self._lock:
            self._current.pop(run, None)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._epoch is not None:
                self._epoch.close()
                self._epoch = None


class _FilePresence:
    """A runtime's mark: an exclusive ``flock`` on its own file, until released."""

    def __init__(self, token: str, path: Path) -> None:
        self.token = token
        self.path = path
        path.parent.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self, *, leave_mark: bool = False) -> None:
        if self._fd is not None:
            if not leave_mark:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            os.close(self._fd)  # drops the lock
            self._fd = None


class DirectoryOwnership:
    """The run leases of the directory store at ``store_dir`` (one object per store handle,
    whose appends its fence guards)."""

    def __init__(self, store_dir: Path, *, clock_ms: Callable[[], int], writer_lock: Callable[[], Any]) -> None:
        self._dir = store_dir
        self._path = store_dir / QUEUE_FILE
        self._clock = clock_ms
        #: A context manager holding the store's writer lock (ordered with fenced appends).
        self._writer_lock = writer_lock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        #: Tokens this handle reserved and has not used yet (see :meth:`_token`).
        self._tokens: list[int] = []
        self.fences = FenceBook()
        self.guard = _Fence(self.fences, self._path)

    # -- the lease table ---------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The leases' connection (made on first use). Holds ``_lock``."""
        if self._closed:
            raise QueueError("the store is closed")
        if self._conn is None:
            self._conn = open_queue_db(self._path, synchronous="NORMAL")
        return self._conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._failed(exc) from None

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        """The coded error for a failed write of the leases (a full disk is ``STORE_FULL``)."""
        what = f"the run leases in {self._path} cannot be written ({exc})"
        return sqlite_error(exc, self._path, what) or QueueError(what, details={"path": str(self._path)})

    def _token(self, conn: sqlite3.Connection) -> int:
        """A fencing token no other lease ever had: drawn from the store's ``token`` counter
        a block at a time (a token is compared only for equality, so a block this handle
        reserved serves its leases in any order). Holds ``_lock``."""
        if not self._tokens:
            top = int(
                conn.execute(
                    "UPDATE counters SET value = value + ? WHERE name = 'token' RETURNING value", (_TOKEN_BLOCK,)
                ).fetchone()[0]
            )
            self._tokens = list(range(top, top - _TOKEN_BLOCK, -1))
        return self._tokens.pop()

    def acquire(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        # Most runs have no lease row at all: one insert, without the writer lock (nobody
        # appends under a token that was never drawn).
        with self._lock:
            conn = self._connection()
            try:
                token = self._token(conn)
                expires = self._clock() + lease_ms
                inserted = conn.execute(
                    "INSERT INTO leases (run, worker, token, expires_ms) VALUES (?, ?, ?, ?) ON CONFLICT (run) DO NOTHING",
                    (run, owner, token, expires),
                ).rowcount
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
        taken: RunLease | str | None = RunLease(run, owner, token, expires) if inserted else None
        if taken is None:
            taken = self._take(run, owner, lease_ms, take_over=False)
        if isinstance(taken, str):  # an expired (or dead) owner's lease: take it over
            previous = taken
            with self._writer_lock():
                taken = self._take(run, owner, lease_ms, take_over=True)
            if taken is not None and self._dead(previous) and not self._names_a_lease(previous):
                with contextlib.suppress(OSError):
                    (self._dir / _PRESENCE / f"{previous}.lock").unlink()  # its last lease is gone
        if taken is None or isinstance(taken, str):
            return None
        self.fences.hold(run, taken.token)
        return taken

    def _take(self, run: str, owner: str, lease_ms: int, *, take_over: bool) -> RunLease | str | None:
        """The lease; None while someone holds it live; or, when it can be taken over only
        under the writer lock (not ``take_over``), the name of its expired or dead owner."""
        with self._write() as conn:
            now = self._clock()
            row = conn.execute("SELECT expires_ms, worker FROM leases WHERE run = ?", (run,)).fetchone()
            if row is not None:
                if int(row[0]) >= now and not self._dead(str(row[1])):
                    return None
                if not take_over:
                    return str(row[1])
            token = self._token(conn)
            conn.execute(
                "INSERT INTO leases (run, worker, token, expires_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run) DO UPDATE SET worker = excluded.worker, token = excluded.token, "
                "expires_ms = excluded.expires_ms",
                (run, owner, token, now + lease_ms),
            )
            if row is not None:
                bump_epoch(self._dir)  # under the writer lock (take_over): the old token is void
            return RunLease(run, owner, token, now + lease_ms)

    def renew(self, held: Mapping[str, int], lease_ms: int) -> set[str]:
        if not held:
            return set()
        with self._write() as conn:
            return renew_leases(conn, held, self._clock() + lease_ms)

    def release(self, run: str, token: int) -> bool:
        self.fences.drop(run, token)
        self.guard.forget(run)
        with self._lock:
            conn = self._connection()
            try:
                return bool(conn.execute("DELETE FROM leases WHERE run = ? AND token = ?", (run, token)).rowcount)
            except sqlite3.Error as exc:
                raise self._failed(exc) from None

    def holder(self, run: str) -> LeaseHolder | None:
        if not self._path.exists():
            return None
        with self._write() as conn:
            row = conn.execute("SELECT worker, token, expires_ms FROM leases WHERE run = ?", (run,)).fetchone()
            now = self._clock()
        if row is None:
            return None
        return LeaseHolder(run, str(row[0]), int(row[1]), int(row[2]), int(row[2]) >= now and not self._dead(str(row[0])))

    def _dead(self, owner: str) -> bool:
        """Whether ``owner`` is a runtime whose presence mark is stale (its process died)."""
        if "/" in owner or owner.startswith("."):
            return False
        try:
            fd = os.open(self._dir / _PRESENCE / f"{owner}.lock", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False  # no mark: nothing is proven, the lease lasts until it expires
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # also lets go of the lock, if it was taken
        return True

    # -- presence ----------------------------------------------------------------------
    def announce(self, token: str, pid: int) -> Presence | None:
        return _FilePresence(token, self._dir / _PRESENCE / f"{pid}-{token}.lock")

    def others_present(self, mine: Presence | None) -> list[str]:
        folder = self._dir / _PRESENCE
        own = mine.path if isinstance(mine, _FilePresence) else None
        found = []
        for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
            if path == own:
                continue
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # released meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.append(f"process {path.name.split('-', 1)[0]}")
            else:
                # A mark its dead process left behind; kept while a lease names that process,
                # which the mark proves void.
                if not self._names_a_lease(path.stem):
                    with contextlib.suppress(OSError):
                        path.unlink()
            finally:
                os.close(fd)
        return found

    def _names_a_lease(self, owner: str) -> bool:
        if not self._path.exists():
            return False
        with self._write() as conn:
            return conn.execute("SELECT 1 FROM leases WHERE worker = ? LIMIT 1", (owner,)).fetchone() is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self.guard.close()
