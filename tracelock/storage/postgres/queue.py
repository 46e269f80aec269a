"""The run queue in the PostgreSQL store's database (see :mod:`tracelock.storage.queue_backend`).

Workers on any machine take runs with ``SELECT ... FOR UPDATE SKIP LOCKED`` (two workers
never wait for each other's rows, and never take the same row), and sleep on ``LISTEN``:
``enqueue`` and ``requeue`` send ``NOTIFY tracelock_queue`` in their transaction, so a
worker wakes as soon as a run can be taken; a poll with backoff covers expired leases.

Lease expiry is measured on the server's clock (``clock_timestamp()``), one clock for every
machine. The leases are the runs' leases (:mod:`tracelock.storage.postgres.ownership`,
whose fence checks them inside each append transaction): a claim never takes a run whose
lease another owner holds live, and takes the lease over only once it expired.

The queue's tables have their own schema version (``tracelock_queue_schema``), migrated
like the store's, so the store's migration list and this one never collide.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from tracelock.storage.errors import StoreSchemaTooNewError
from tracelock.storage.postgres.location import redact_location, scrub
from tracelock.storage.queue_backend import (
    ITEM_COLUMNS,
    ITEM_WIDTH,
    Claim,
    FenceBook,
    QueueError,
    QueueItem,
    QueueNotEmptyError,
    QueueRow,
    leased_error,
)

__all__ = ["QUEUE_MIGRATIONS", "PostgresQueue"]

CHANNEL = "tracelock_queue"

#: Migration ``n`` brings the queue's schema from version ``n`` to ``n + 1``. Append only.
QUEUE_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE tracelock_queue_schema (id smallint PRIMARY KEY CHECK (id = 1), version integer NOT NULL)",
        "INSERT INTO tracelock_queue_schema (id, version) VALUES (1, 0)",
        # Fencing tokens: every lease (first take, take-over) draws a new one.
        "CREATE SEQUENCE tracelock_queue_tokens",
        "CREATE SEQUENCE tracelock_queue_positions",
        "CREATE TABLE tracelock_queue_runs ("
        " run text PRIMARY KEY,"
        " queue text NOT NULL,"
        " agent text NOT NULL,"
        " input bytea NOT NULL,"
        " idempotency_key text,"
        " state text NOT NULL CHECK (state IN ('queued', 'leased', 'waiting', 'done', 'error')),"
        " position bigint NOT NULL DEFAULT nextval('tracelock_queue_positions'),"
        " enqueued_ms bigint NOT NULL,"
        " attempts integer NOT NULL DEFAULT 0,"
        " note text)",
        "CREATE INDEX tracelock_queue_ready ON tracelock_queue_runs (queue, position) WHERE state = 'queued'",
        "CREATE INDEX tracelock_queue_held ON tracelock_queue_runs (queue) WHERE state = 'leased'",
        "CREATE TABLE tracelock_queue_leases ("
        " run text PRIMARY KEY REFERENCES tracelock_queue_runs (run),"
        " worker text NOT NULL,"
        " token bigint NOT NULL,"
        " expires_ms bigint NOT NULL)",
    ),
    # 2: the tenant a run was submitted with (rows queued before have none).
    ("ALTER TABLE tracelock_queue_runs ADD COLUMN tenant text",),
    # 3: the leases are every run's, queued or not (tracelock.storage.ownership).
    ("ALTER TABLE tracelock_queue_leases DROP CONSTRAINT IF EXISTS tracelock_queue_leases_run_fkey",),
)
QUEUE_SCHEMA_VERSION = len(QUEUE_MIGRATIONS)

# pg_advisory_xact_lock key of the queue's migrations: "tlqueue!" as an integer.
_MIGRATION_LOCK = int.from_bytes(b"tlqueue!", "big") - (1 << 63)
_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"



def migrate_queue(conn: Any, shown: str) -> None:
    """Bring the queue's tables (and the run leases) to this version, in ``conn``'s
    transaction, serialized with every other process's migration."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    row = conn.execute("SELECT to_regclass('tracelock_queue_schema') IS NOT NULL").fetchone()
    version = 0
    if row and row[0]:
        found = conn.execute("SELECT version FROM tracelock_queue_schema WHERE id = 1").fetchone()
        version = int(found[0]) if found else 0
    if version > QUEUE_SCHEMA_VERSION:
        raise StoreSchemaTooNewError(
            f"{shown} has queue schema version {version}; this tracelock knows versions up to "
            f"{QUEUE_SCHEMA_VERSION}: upgrade tracelock to use its queue",
            details={"queue_schema_version": version, "supported": QUEUE_SCHEMA_VERSION},
        )
    for statements in QUEUE_MIGRATIONS[version:]:
        for statement in statements:
            conn.execute(statement.encode())
    if version < QUEUE_SCHEMA_VERSION:
        conn.execute("UPDATE tracelock_queue_schema SET version = %s WHERE id = 1", (QUEUE_SCHEMA_VERSION,))


def _worker(row: Any) -> str | None:
    """The lease's worker, selected right after :data:`ITEM_COLUMNS` (None: no lease)."""
    found = row[ITEM_WIDTH]
    return None if found is None else str(found)


def _queue_lock(queue: str) -> int:
    """The advisory lock key serializing claims of one queue with a concurrency limit."""
    return zlib.crc32(b"tracelock-queue:" + queue.encode()) - (1 << 31)


class PostgresQueue:
    """The queue of one PostgreSQL store, through connections of its own (the store's pool
    stays for appends). ``attach`` installs the fencing guard on the store handle."""

    def __init__(self, url: str, fences: FenceBook, *, clock_ms: Any = None) -> None:
        import psycopg

        self._psycopg = psycopg
        self._url = url
        self._shown = redact_location(self._url)
        self._lock = threading.Lock()
        self._conn: Any = None
        self._listener: Any = None
        self._closed = False
        self._clock_ms = clock_ms
        self._prepare()
        #: The fence book of the store handle (its run ownership): a worker's leases fence
        #: that handle's appends.
        self.fences = fences

    # -- connections -----------------------------------------------------------------------
    def _error(self, exc: BaseException, doing: str) -> QueueError:
        message = scrub(str(exc).strip() or type(exc).__name__, self._url)
        return QueueError(f"{doing} {self._shown}: {message}", details={"store": self._shown})

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self._url, autocommit=True)
        except self._psycopg.Error as exc:
            raise self._error(exc, "cannot connect to the queue in") from None

    def _run(self, doing: str, work: Any) -> Any:
        """Run ``work(conn)`` on the queue's connection (reconnecting once if it died: a
        server restart), in one transaction."""
        with self._lock:
            if self._closed:
                raise QueueError("the queue is closed")
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                conn = self._conn
                try:
                    with conn.transaction():
                        return work(conn)
                except (self._psycopg.OperationalError, self._psycopg.InterfaceError) as exc:
                    with suppress(Exception):
                        conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise self._error(exc, doing) from None
                except self._psycopg.Error as exc:
                    raise self._error(exc, doing) from None
        raise AssertionError("unreachable")

    def _prepare(self) -> None:
        self._run("cannot prepare the queue in", lambda conn: migrate_queue(conn, self._shown))

    # -- submitting --------------------------------------------------------------------
    def enqueue(
        self, run: str, queue: str, agent: str, input: bytes, key: str | None, tenant: str | None = None
    ) -> tuple[QueueItem, bool]:
        def work(conn: Any) -> tuple[QueueItem, bool]:
            row = conn.execute(
                "INSERT INTO tracelock_queue_runs AS r (run, queue, agent, input, idempotency_key, state, enqueued_ms, "
                f"tenant) VALUES (%s, %s, %s, %s, %s, 'queued', {_NOW_MS}, %s) ON CONFLICT (run) DO NOTHING "
                f"RETURNING {ITEM_COLUMNS}",
                (run, queue, agent, input, key, tenant),
            ).fetchone()
            if row is not None:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, queue))
                return QueueItem.from_row(row), True
            existing = conn.execute(f"SELECT {ITEM_COLUMNS} FROM tracelock_queue_runs r WHERE run = %s", (run,)).fetchone()
            return QueueItem.from_row(existing), False

        result: tuple[QueueItem, bool] = self._run("cannot queue a run in", work)
        return result

    # -- taking runs -------------------------------------------------------------------
    def claim(
        self, queues: Sequence[str], worker: str, limit: int, lease_ms: int, queue_limit: int | None
    ) -> list[Claim]:
        if limit <= 0:
            return []

        def work(conn: Any) -> list[Claim]:
            claims: list[Claim] = []
            for queue in queues:
                room = limit - len(claims)
                if room <= 0:
                    break
                if queue_limit is not None:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_queue_lock(queue),))
                    held = conn.execute(
                        "SELECT count(*) FROM tracelock_queue_runs r JOIN tracelock_queue_leases l USING (run) "
                        f"WHERE r.queue = %s AND r.state = 'leased' AND l.expires_ms >= {_NOW_MS}",
                        (queue,),
                    ).fetchone()
                    room = min(room, queue_limit - int(held[0]))
                    if room <= 0:
                        continue
                # Runs whose holder's lease expired first (they are the oldest work), then
                # queued runs, oldest first; rows another worker is taking are skipped.
                # Runs whose holder's lease expired (or was given back by another owner that
                # had taken it over) first: they are the oldest work; then queued runs that
                # no other owner holds, oldest first. Rows another worker is taking are skipped.
                expired = conn.execute(
                    "SELECT r.run FROM tracelock_queue_runs r LEFT JOIN tracelock_queue_leases l USING (run) "
                    f"WHERE r.queue = %s AND ((r.state IN ('leased', 'queued') AND l.expires_ms < {_NOW_MS}) "
                    "OR (r.state = 'leased' AND l.run IS NULL)) "
                    "ORDER BY r.position LIMIT %s FOR UPDATE OF r SKIP LOCKED",
                    (queue, room),
                ).fetchall()
                taken = [(str(run), True) for (run,) in expired]
                if len(taken) < room:
                    fresh = conn.execute(
                        "SELECT r.run FROM tracelock_queue_runs r WHERE r.queue = %s AND r.state = 'queued' "
                        "AND NOT EXISTS (SELECT 1 FROM tracelock_queue_leases l WHERE l.run = r.run) "
                        "ORDER BY r.position LIMIT %s FOR UPDATE SKIP LOCKED",
                        (queue, room - len(taken)),
                    ).fetchall()
                    taken += [(str(run), False) for (run,) in fresh]
                if not taken:
                    continue
                recovered = {run for run, again in taken if again}
                # The leases first, and never over a live one: another owner may have taken
                # a run's lease since the rows were read (its insert then wins).
                leases = conn.execute(
                    "INSERT INTO tracelock_queue_leases AS l (run, worker, token, expires_ms) "
                    f"SELECT run, %s, nextval('tracelock_queue_tokens'), {_NOW_MS} + %s FROM unnest(%s::text[]) AS run "
                    "ON CONFLICT (run) DO UPDATE SET worker = EXCLUDED.worker, token = EXCLUDED.token, "
                    f"expires_ms = EXCLUDED.expires_ms WHERE l.expires_ms < {_NOW_MS} RETURNING run, token",
                    (worker, lease_ms, sorted(run for run, _ in taken)),
                ).fetchall()
                if not leases:
                    continue
                rows = conn.execute(
                    "UPDATE tracelock_queue_runs r SET state = 'leased', attempts = attempts + 1 "
                    f"WHERE run = ANY(%s) RETURNING {ITEM_COLUMNS}",
                    (sorted(str(run) for run, _ in leases),),
                ).fetchall()
                items = {str(row[0]): QueueItem.from_row(row, worker) for row in rows}
                for run, token in sorted(leases, key=lambda lease: items[str(lease[0])].enqueued_ms):
                    claims.append(Claim(items[str(run)], int(token), str(run) in recovered))
            return claims

        claims: list[Claim] = self._run("cannot take runs from the queue in", work)
        return claims

    def heartbeat(self, worker: str, held: dict[str, int], lease_ms: int) -> set[str]:
        if not held:
            return set()
        names = sorted(held)

        def work(conn: Any) -> set[str]:
            rows = conn.execute(
                "SELECT run, token FROM tracelock_queue_leases WHERE run = ANY(%s) ORDER BY run FOR UPDATE",
                (names,),
            ).fetchall()
            current = {str(run): int(token) for run, token in rows}
            mine = [run for run in names if current.get(run) == held[run]]
            if mine:
                conn.execute(
                    f"UPDATE tracelock_queue_leases SET expires_ms = {_NOW_MS} + %s WHERE run = ANY(%s)",
                    (lease_ms, mine),
                )
            return set(names) - set(mine)

        gone: set[str] = self._run("cannot renew leases in", work)
        return gone

    def _release(self, run: str, token: int, state: str, note: str | None, notify: bool) -> bool:
        def work(conn: Any) -> bool:
            row = conn.execute(
                "SELECT token FROM tracelock_queue_leases WHERE run = %s FOR UPDATE", (run,)
            ).fetchone()
            if row is None or int(row[0]) != token:
                return False
            conn.execute("DELETE FROM tracelock_queue_leases WHERE run = %s", (run,))
            queue = conn.execute(
                "UPDATE tracelock_queue_runs SET state = %s, note = %s WHERE run = %s RETURNING queue",
                (state, note, run),
            ).fetchone()
            if notify and queue is not None:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(queue[0])))
            return True

        done: bool = self._run("cannot release a lease in", work)
        return done

    def finish(self, run: str, token: int, state: str, note: str | None) -> bool:
        return self._release(run, token, state, note, notify=False)

    def hand_back(self, run: str, token: int) -> bool:
        return self._release(run, token, "queued", "handed back", notify=True)

    def requeue(self, run: str) -> bool:
        def work(conn: Any) -> bool:
            row = conn.execute(
                "UPDATE tracelock_queue_runs SET state = 'queued', note = 'resumable' "
                "WHERE run = %s AND state = 'waiting' RETURNING queue",
                (run,),
            ).fetchone()
            if row is not None:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(row[0])))
            return row is not None

        done: bool = self._run("cannot queue a run again in", work)
        return done

    # -- reading -----------------------------------------------------------------------
    def item(self, run: str) -> QueueItem | None:
        def work(conn: Any) -> QueueItem | None:
            row = conn.execute(
                f"SELECT {ITEM_COLUMNS}, l.worker FROM tracelock_queue_runs r LEFT JOIN tracelock_queue_leases l "
                "USING (run) WHERE r.run = %s",
                (run,),
            ).fetchone()
            return None if row is None else QueueItem.from_row(row, _worker(row))

        found: QueueItem | None = self._run("cannot read the queue in", work)
        return found

    def items(self, *, queue: str | None = None, state: str | None = None, limit: int | None = None) -> list[QueueItem]:
        query = (
            f"SELECT {ITEM_COLUMNS}, l.worker FROM tracelock_queue_runs r LEFT JOIN tracelock_queue_leases l "
            "USING (run) WHERE (%s::text IS NULL OR r.queue = %s) AND (%s::text IS NULL OR r.state = %s) "
            "ORDER BY r.position LIMIT %s"
        )

        def work(conn: Any) -> list[QueueItem]:
            rows = conn.execute(query, (queue, queue, state, state, limit)).fetchall()
            return [QueueItem.from_row(row, _worker(row)) for row in rows]

        found: list[QueueItem] = self._run("cannot read the queue in", work)
        return found

    def counts(self) -> dict[str, dict[str, int]]:
        def work(conn: Any) -> dict[str, dict[str, int]]:
            rows = conn.execute(
                "SELECT queue, state, count(*) FROM tracelock_queue_runs GROUP BY queue, state ORDER BY queue, state"
            ).fetchall()
            out: dict[str, dict[str, int]] = {}
            for queue, state, count in rows:
                out.setdefault(str(queue), {})[str(state)] = int(count)
            return out

        found: dict[str, dict[str, int]] = self._run("cannot read the queue in", work)
        return found

    def rows(self) -> list[QueueRow]:
        def work(conn: Any) -> list[QueueRow]:
            rows = conn.execute(
                f"SELECT {ITEM_COLUMNS}, l.worker, r.position FROM tracelock_queue_runs r "
                "LEFT JOIN tracelock_queue_leases l USING (run) ORDER BY r.position"
            ).fetchall()
            return [QueueRow(int(row[ITEM_WIDTH + 1]), QueueItem.from_row(row, _worker(row))) for row in rows]

        found: list[QueueRow] = self._run("cannot read the queue in", work)
        return found

    # -- copying -----------------------------------------------------------------------
    def restore(self, rows: Sequence[QueueRow]) -> int:
        if any(row.item.state == "leased" for row in rows):
            raise leased_error(rows, self._shown)
        values = [
            (
                i.run, i.queue, i.agent, i.input, i.idempotency_key, i.state, row.position, i.enqueued_ms,
                i.attempts, i.note, i.tenant,
            )
            for row in rows
            for i in (row.item,)
        ]
        top = max((row.position for row in rows), default=0)
        ready = sorted({row.item.queue for row in rows if row.item.state == "queued"})

        def work(conn: Any) -> int:
            # No submit may slip in between the check and the inserts.
            conn.execute("LOCK TABLE tracelock_queue_runs IN SHARE ROW EXCLUSIVE MODE")
            held = int(conn.execute("SELECT count(*) FROM tracelock_queue_runs").fetchone()[0])
            if held:
                raise QueueNotEmptyError(
                    f"the run queue in {self._shown} already holds {held} runs: restore into an empty queue",
                    details={"store": self._shown, "runs": held},
                )
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO tracelock_queue_runs (run, queue, agent, input, idempotency_key, state, position, "
                    "enqueued_ms, attempts, note, tenant) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    values,
                )
            if top > 0:
                # The sequence may be ahead already (a rolled-back submit still draws a value).
                used = conn.execute(
                    "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM tracelock_queue_positions"
                ).fetchone()
                conn.execute("SELECT setval('tracelock_queue_positions', %s)", (max(top, int(used[0])),))
            for queue in ready:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, queue))
            return len(values)

        done: int = self._run("cannot restore rows into the queue in", work)
        return done

    # -- waking ------------------------------------------------------------------------
    def wait(self, timeout: float) -> bool:
        """Sleep on ``LISTEN tracelock_queue`` for at most ``timeout`` seconds."""
        psycopg = self._psycopg
        try:
            if self._listener is None or self._listener.closed:
                self._listener = self._connect()
                self._listener.execute(f"LISTEN {CHANNEL}")
            woken = False
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                woken = True
            return woken
        except (psycopg.Error, QueueError):
            # The server went away: sleep out the timeout (the caller's backoff), then the
            # caller polls again and the next wait listens on a new connection.
            if self._listener is not None:
                with suppress(Exception):
                    self._listener.close()
            self._listener = None
            threading.Event().wait(timeout)
            return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for conn in (self._conn, self._listener):
                if conn is not None:
                    with suppress(Exception):
                        conn.close()
            self._conn = self._listener = None
