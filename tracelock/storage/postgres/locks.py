"""Session advisory locks of a PostgreSQL store (each held on a connection of its own:
the checkpoint signers' lock, run owners' presence) and its checkpoint table
(``tracelock_checkpoints``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tracelock.storage.postgres.checkpoints import TableCheckpoints
from tracelock.storage.postgres.tree import PostgresTree

__all__ = ["PostgresLocks"]

# pg_advisory_lock key of the checkpoint signers: "tlchkpts" as an integer.
_CHECKPOINT_LOCK = int.from_bytes(b"tlchkpts", "big") - (1 << 63)


class PostgresLocks(PostgresTree):
    """Advisory locks and the checkpoint history."""

    # -- signed checkpoints (tracelock.evidence.history keeps the history here) --------
    @contextmanager
    def checkpoint_lock(self) -> Iterator[None]:
        """Serialize the signers of this store's checkpoints (any process, any machine): a
        session advisory lock, held on a connection of its own (a signer reads through the
        pool meanwhile, which may have a single connection)."""
        session = self.hold_advisory_lock(_CHECKPOINT_LOCK, shared=False)
        try:
            yield
        finally:
            self.release_advisory_lock(session)

    def hold_advisory_lock(self, key: int, *, shared: bool) -> Any:
        """Take the session advisory lock ``key`` (waiting for it) on a connection of its
        own, and return that session: the lock lasts until :meth:`release_advisory_lock`, or
        until the session ends with its process."""
        conn, _ = self._lock_session("SELECT pg_advisory_lock_shared(%s)" if shared else "SELECT pg_advisory_lock(%s)", key)
        return (conn, key, shared)

    def try_advisory_lock(self, key: int) -> Any:
        """Take the exclusive session advisory lock ``key`` if nobody holds it, on a
        connection of its own: that session (release it with :meth:`release_advisory_lock`),
        or None when another session holds the lock."""
        conn, row = self._lock_session("SELECT pg_try_advisory_lock(%s)", key)
        if row is None or not row[0]:
            conn.close()
            return None
        return (conn, key, False)

    def _lock_session(self, query: str, key: int) -> tuple[Any, tuple[Any, ...] | None]:
        """A new autocommit session that ran the advisory lock ``query``, and its row."""
        self._check_open()
        psycopg = self._psycopg
        conn = None
        try:
            conn = psycopg.connect(self._url, autocommit=True)
            row = conn.execute(query.encode(), (key,)).fetchone()
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            raise self._translate(exc, "cannot take an advisory lock of") from None
        return conn, row

    def release_advisory_lock(self, session: Any) -> None:
        """Give the lock back, then end its session. Unlocking first makes the release
        synchronous: the server ends a closed session's backend (and drops its locks) only
        some time after the client has gone."""
        conn, key, shared = session
        try:
            conn.execute("SELECT pg_advisory_unlock_shared(%s)" if shared else "SELECT pg_advisory_unlock(%s)", (key,))
        except self._psycopg.Error:
            pass  # the session is gone already, and its locks with it
        finally:
            conn.close()

    def advisory_lock_free(self, key: int) -> bool:
        """Whether no session holds the advisory lock ``key`` (shared or not): it is taken
        and given back at once."""
        with self._connection("cannot look at the advisory locks of") as conn:
            (taken,) = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if taken:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return bool(taken)

    def checkpoint_numbers(self) -> list[int]:
        return [int(number) for (number,) in self._all("SELECT number FROM tracelock_checkpoints ORDER BY number")]

    def checkpoint_record(self, number: int) -> tuple[bytes, bytes | None, str] | None:
        """Checkpoint ``number``'s note, its consistency record and its signers' keys
        (canonical JSON list), or None."""
        row = self._one(
            "SELECT note, consistency, vkeys FROM tracelock_checkpoints WHERE number = %s", (number,)
        )
        if row is None:
            return None
        return bytes(row[0]), None if row[1] is None else bytes(row[1]), str(row[2])

    def add_checkpoint(self, number: int, note: bytes, consistency: bytes | None, vkeys: str) -> None:
        """Store checkpoint ``number`` (committed when this returns)."""
        with self._connection("cannot store a checkpoint in") as conn, conn.transaction():
            conn.execute(
                "INSERT INTO tracelock_checkpoints (number, note, consistency, vkeys) VALUES (%s, %s, %s, %s)",
                (number, note, consistency, vkeys),
            )

    # -- checkpoints and the Merkle cache, for tracelock.evidence ----------------------
    def checkpoint_records(self) -> TableCheckpoints:
        """Where this store keeps its checkpoint history: ``tracelock_checkpoints``."""
        return TableCheckpoints(self)
