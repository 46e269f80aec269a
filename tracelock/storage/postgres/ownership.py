"""Run ownership of the PostgreSQL store (:mod:`tracelock.storage.ownership`).

The leases are the rows of ``tracelock_queue_leases`` (the run queue's own: a worker's
lease is the run's lease), with tokens from ``tracelock_queue_tokens``; expiry is measured
on the server's clock, one clock for every machine. Taking a lease is one
``INSERT ... ON CONFLICT DO UPDATE ... WHERE expired``: of two callers racing for a run, one
inserts and the other finds the live row. Lease transactions commit with
``synchronous_commit = off``: a lease matters only while its owner lives, and losing one in
a server crash only refuses its owner's next append.

Fencing (:class:`_Fence`) runs inside each append transaction of a leased run, after the
store's head row lock: ``SELECT ... FOR SHARE`` of the lease rows, in ``run`` order (the
append function checks the tokens the same way when it is sent them). A take-over updates
the lease row, so it waits for an append that checked the old token to commit, and an
append that comes after it reads the new token and is refused.

Presence: a shared session advisory lock held on a connection of its own (the server drops
it when the session ends); another runtime is present when the exclusive lock cannot be
taken. Beside it, on a session of its own, each runtime holds an exclusive advisory lock
keyed by its owner name (:func:`owner_key`): a lease whose owner's lock can be taken is void
at once (its session, and so its process or its connection, is gone), whatever its expiry
says. A lease held by an owner without such a lock (a queue worker) lasts until it expires.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any, Protocol

from tracelock.errors import StoreError
from tracelock.storage.ownership import FenceBook, LeaseHolder, Presence, RunLease, lost
from tracelock.storage.postgres.location import redact_location, scrub
from tracelock.storage.postgres.queue import migrate_queue
from tracelock.storage.queue_backend import QueueError

__all__ = ["PRESENCE_KEY", "PostgresOwnership"]

#: The advisory lock key of presence (an arbitrary constant, "tlpresen").
PRESENCE_KEY = 0x746C70726573656E

_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"


class _Fence:
    """The append guard of a PostgreSQL store handle (see the module docstring)."""

    def __init__(self, book: FenceBook) -> None:
        self.book = book

    def tokens(self, runs: Iterable[str]) -> dict[str, int]:
        return self.book.wanted(runs)

    def refused(self, cursor: Any, runs: Sequence[str]) -> dict[str, StoreError]:
        wanted = self.book.wanted(runs)
        if not wanted:
            return {}
        names = sorted(wanted)
        cursor.execute(
            "SELECT run, token FROM tracelock_queue_leases WHERE run = ANY(%s) ORDER BY run FOR SHARE", (names,)
        )
        found = {str(run): int(token) for run, token in cursor.fetchall()}
        return {
            run: lost(run, token, found.get(run)) for run, token in wanted.items() if found.get(run) != token
        }


class AdvisoryLocks(Protocol):
    """What presence needs of the store: its session advisory locks."""

    def hold_advisory_lock(self, key: int, *, shared: bool) -> Any: ...
    def release_advisory_lock(self, session: Any) -> None: ...
    def advisory_lock_free(self, key: int) -> bool: ...


def owner_key(owner: str) -> int:
    """The advisory lock key a runtime named ``owner`` holds while it lives."""
    return int.from_bytes(hashlib.sha256(b"tracelock-owner:" + owner.encode()).digest()[:8], "big", signed=True)


class _SessionPresence:
    """A runtime's mark: a shared advisory lock held by a session of its own, and its owner
    lock on another (:func:`owner_key`)."""

    def __init__(self, token: str, owner: str, store: AdvisoryLocks) -> None:
        self.token = token
        self._store = store
        self.session: Any = store.hold_advisory_lock(PRESENCE_KEY, shared=True)
        try:
            self._owner: Any = store.hold_advisory_lock(owner_key(owner), shared=False)
        except BaseException:
            store.release_advisory_lock(self.session)
            raise

    def release(self, *, leave_mark: bool = False) -> None:
        # Either way the owner lock goes with its session: a lease left behind reads as a
        # dead owner's.
        for name in ("session", "_owner"):
            session = getattr(self, name)
            if session is not None:
                self._store.release_advisory_lock(session)
                setattr(self, name, None)


class PostgresOwnership:
    """The run leases of one PostgreSQL store handle, through a connection of its own."""

    def __init__(self, url: str, locks: AdvisoryLocks) -> None:
        import psycopg

        self._psycopg = psycopg
        self._store = locks
        self._url = url
        self._shown = redact_location(self._url)
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False
        self.fences = FenceBook()
        self.guard = _Fence(self.fences)
        self._migrated = False  # the tables are made by the first lease taken or read

    def _run(self, doing: str, work: Any) -> Any:
        """Run ``work(conn)`` in one transaction on the leases' connection (reconnecting once
        if it died: a server restart)."""
        psycopg = self._psycopg
        with self._lock:
            if self._closed:
                raise QueueError("the store is closed")
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    try:
                        self._conn = psycopg.connect(self._url, autocommit=True)
                    except psycopg.Error as exc:
                        raise self._error(exc, doing) from None
                conn = self._conn
                try:
                    if not self._migrated:
                        with conn.transaction():
                            migrate_queue(conn, self._shown)
                        self._migrated = True
                    with conn.transaction():
                        conn.execute("SET LOCAL synchronous_commit = off")
                        return work(conn)
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    with suppress(Exception):
                        conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise self._error(exc, doing) from None
                except psycopg.Error as exc:
                    raise self._error(exc, doing) from None
        raise AssertionError("unreachable")

    def _error(self, exc: BaseException, doing: str) -> QueueError:
        message = scrub(str(exc).strip() or type(exc).__name__, self._url)
        return QueueError(f"{doing} {self._shown}: {message}", details={"store": self._shown})

    def acquire_fresh(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        return self.acquire(run, owner, lease_ms)  # a row, as any run's

    def acquire(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        def work(conn: Any) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                "INSERT INTO tracelock_queue_leases AS l (run, worker, token, expires_ms) "
                f"VALUES (%s, %s, nextval('tracelock_queue_tokens'), {_NOW_MS} + %s) "
                "ON CONFLICT (run) DO UPDATE SET worker = EXCLUDED.worker, token = EXCLUDED.token, "
                f"expires_ms = EXCLUDED.expires_ms WHERE l.expires_ms < {_NOW_MS} RETURNING token, expires_ms",
                (run, owner, lease_ms),
            ).fetchone()
            if row is not None:
                return row
            found = conn.execute("SELECT worker, token FROM tracelock_queue_leases WHERE run = %s", (run,)).fetchone()
            if found is None or not _dead(conn, str(found[0])):
                return None
            # Its owner is gone: take the lease over (a row lock, ordered with the fenced
            # appends like any take-over), unless it changed hands meanwhile.
            taken: tuple[Any, ...] | None = conn.execute(
                "UPDATE tracelock_queue_leases SET worker = %s, token = nextval('tracelock_queue_tokens'), "
                f"expires_ms = {_NOW_MS} + %s WHERE run = %s AND token = %s RETURNING token, expires_ms",
                (owner, lease_ms, run, found[1]),
            ).fetchone()
            return taken

        row = self._run("cannot take a run's lease in", work)
        if row is None:
            return None
        lease = RunLease(run, owner, int(row[0]), int(row[1]))
        self.fences.hold(run, lease.token)
        return lease

    def renew(self, held: Mapping[str, int], lease_ms: int) -> set[str]:
        if not held:
            return set()
        names = sorted(held)

        def work(conn: Any) -> set[str]:
            rows = conn.execute(
                f"UPDATE tracelock_queue_leases SET expires_ms = {_NOW_MS} + %s "
                "WHERE run = ANY(%s) AND token = ANY(%s) RETURNING run, token",
                (lease_ms, names, [held[run] for run in names]),
            ).fetchall()
            kept = {str(run) for run, token in rows if held.get(str(run)) == int(token)}
            return set(names) - kept

        gone: set[str] = self._run("cannot renew run leases in", work)
        return gone

    def release(self, run: str, token: int) -> bool:
        self.fences.drop(run, token)

        def work(conn: Any) -> bool:
            return bool(
                conn.execute("DELETE FROM tracelock_queue_leases WHERE run = %s AND token = %s", (run, token)).rowcount
            )

        done: bool = self._run("cannot give back a run's lease in", work)
        return done

    def holder(self, run: str) -> LeaseHolder | None:
        def work(conn: Any) -> tuple[Any, ...] | None:
            found: tuple[Any, ...] | None = conn.execute(
                f"SELECT worker, token, expires_ms, expires_ms >= {_NOW_MS} FROM tracelock_queue_leases WHERE run = %s",
                (run,),
            ).fetchone()
            return None if found is None else (*found[:3], bool(found[3]) and not _dead(conn, str(found[0])))

        row = self._run("cannot read a run's lease in", work)
        return None if row is None else LeaseHolder(run, str(row[0]), int(row[1]), int(row[2]), bool(row[3]))

    # -- presence ----------------------------------------------------------------------
    def announce(self, token: str, pid: int) -> Presence | None:
        return _SessionPresence(token, f"{pid}-{token}", self._store)

    def others_present(self, mine: Presence | None) -> list[str]:
        store = self._store
        if isinstance(mine, _SessionPresence) and mine.session is not None:
            # Our own shared lock keeps the exclusive one from being taken: let go of it for
            # the look, then take it again.
            store.release_advisory_lock(mine.session)
            try:
                free = store.advisory_lock_free(PRESENCE_KEY)
            finally:
                mine.session = store.hold_advisory_lock(PRESENCE_KEY, shared=True)
        else:
            free = store.advisory_lock_free(PRESENCE_KEY)
        return [] if free else ["another session of this database"]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.close()
                self._conn = None


def _dead(conn: Any, owner: str) -> bool:
    """Whether ``owner``'s lock (:func:`owner_key`) is free, taken and given back at once.
    Only a runtime's lease names an owner that holds one: for any other owner (a queue
    worker) nothing is proven, and its lease lasts until it expires."""
    if not _runtime_owner(owner):
        return False
    key = owner_key(owner)
    (taken,) = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    if taken:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    return bool(taken)


def _runtime_owner(owner: str) -> bool:
    """A runtime's owner name: ``<pid>-<12 hex digits>`` (tracelock.runtime.runs.engine)."""
    pid, _, token = owner.partition("-")
    return pid.isdigit() and len(token) == 12 and all(char in "0123456789abcdef" for char in token)
