"""The run queue of the embedded directory store: ``<store>/queue.sqlite`` beside the journal,
for several worker processes on one machine (see :mod:`tracelock.storage.queue_backend`).

SQLite serializes the writers (``BEGIN IMMEDIATE``), so a run is taken by one worker only.
Lease expiry is measured on the injected clock (one machine, one clock). A worker polls
for work with backoff; it wakes early when SQLite's ``data_version`` says another process
committed to the queue.

The ``leases`` table is the store's run ownership (:mod:`tracelock.storage.directory.ownership`,
which fences the appends): a worker's lease is the run's lease. A take-over of an expired
lease changes the token while holding the store's writer lock (``flock`` on
``<store>/lock``), so an append either finished before the take-over (and the new holder
reads it in the journal) or comes after it and is refused.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any

from tracelock.storage.defaults import wall_clock_ms
from tracelock.storage.directory.lease_epoch import bump_epoch
from tracelock.storage.directory.run_slots import PRESENCE_FOLDER, SlotReader
from tracelock.storage.errors import StoreSchemaTooNewError
from tracelock.storage.failures import sqlite_error
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

__all__ = ["DirectoryQueue", "QUEUE_FILE", "open_queue_db", "queued_any", "renew_leases"]

QUEUE_FILE = "queue.sqlite"

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE runs ("
        " run TEXT PRIMARY KEY,"
        " queue TEXT NOT NULL,"
        " agent TEXT NOT NULL,"
        " input BLOB NOT NULL,"
        " idempotency_key TEXT,"
        " state TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'waiting', 'done', 'error')),"
        " position INTEGER NOT NULL,"
        " enqueued_ms INTEGER NOT NULL,"
        " attempts INTEGER NOT NULL DEFAULT 0,"
        " note TEXT)",
        "CREATE INDEX runs_ready ON runs (queue, position) WHERE state = 'queued'",
        "CREATE INDEX runs_held ON runs (queue) WHERE state = 'leased'",
        "CREATE TABLE leases (run TEXT PRIMARY KEY, worker TEXT NOT NULL, token INTEGER NOT NULL, expires_ms INTEGER NOT NULL)",
        "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "INSERT INTO counters (name, value) VALUES ('token', 0), ('position', 0)",
    ),
    # 2: the tenant a run was submitted with (rows queued before have none).
    ("ALTER TABLE runs ADD COLUMN tenant TEXT",),
)
_VERSION = len(_MIGRATIONS)

#: The runs a claim takes over (under the store's writer lock, ordered with the fenced
#: appends): those whose lease expired (a leased run's worker, or another owner of a queued
#: run), and leased runs whose lease another owner took over and gave back. One parameter:
#: the clock now.
_TAKE_OVER = (
    "((r.state IN ('leased', 'queued') AND l.expires_ms < ?) OR (r.state = 'leased' AND l.run IS NULL))"
)



def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=60000")
    # Switching a new file to WAL needs it alone for a moment: two processes opening a new
    # queue at once may see SQLITE_BUSY here, which the busy handler does not cover.
    for attempt in range(200):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError:
            if attempt == 199:
                conn.close()
                raise
            threading.Event().wait(0.01)
    conn.execute("PRAGMA synchronous=FULL")  # a queued run survives a machine crash
    return conn


def open_queue_db(path: Path, *, synchronous: str = "FULL") -> sqlite3.Connection:
    """A connection to ``queue.sqlite`` at ``path`` (created and migrated when needed).
    ``synchronous``: FULL for the queue (a queued run survives a machine crash); the run
    leases alone may use NORMAL (a lease matters only while its owner's process lives)."""
    try:
        conn = _connect(path)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        _migrate(conn, path)
    except sqlite3.Error as exc:
        what = f"cannot open the queue {path} ({exc})"
        raise sqlite_error(exc, path, what) or QueueError(what) from None
    return conn


def renew_leases(conn: sqlite3.Connection, held: Mapping[str, int], expires_ms: int) -> set[str]:
    """Extend the leases ``held`` (run -> token) to ``expires_ms``, in ``conn``'s write
    transaction; returns the runs whose lease no longer carries that token (lost)."""
    gone: set[str] = set()
    for run, token in sorted(held.items()):
        changed = conn.execute(
            "UPDATE leases SET expires_ms = ? WHERE run = ? AND token = ?", (expires_ms, run, token)
        ).rowcount
        if not changed:
            gone.add(run)
    return gone


def queued_any(path: Path) -> bool:
    """Whether the queue file at ``path`` holds any queued run (read-only; a file made for
    the run leases alone holds none)."""
    if not path.exists():
        return False
    try:
        with closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone() is None:
                return False
            return conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None
    except sqlite3.Error as exc:
        raise QueueError(f"cannot read the queue {path}: {exc}") from None


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > _VERSION:
            raise StoreSchemaTooNewError(
                f"{path} has queue schema version {version}; this tracelock knows versions up to "
                f"{_VERSION}: upgrade tracelock to use its queue",
                details={"queue_schema_version": version, "supported": _VERSION},
            )
        for statements in _MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version < _VERSION:
            conn.execute(f"PRAGMA user_version = {_VERSION}")
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class DirectoryQueue:
    """The queue of the directory store at ``store_dir``. ``fences``: the fence book of the
    store handle whose appends its leases fence (its run ownership's)."""

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        *,
        fences: FenceBook,
        clock_ms: Callable[[], int] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._dir = Path(store_dir)
        self._path = self._dir / QUEUE_FILE
        self._clock = clock_ms or wall_clock_ms
        self._sleep = sleep
        self._lock = threading.Lock()
        self._closed = False
        self._conn = open_queue_db(self._path)
        self._seen_version = self._data_version()
        self.fences = fences
        #: The slot leases of the runtimes present (runs they started under fresh ids, held
        #: without a row here): a claim never takes a run one of them holds.
        self._slots = SlotReader(self._dir / PRESENCE_FOLDER)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise QueueError("the queue is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise QueueError(f"cannot write the queue {self._path}: {exc}") from None
            try:
                yield conn
            except BaseException:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise QueueError(f"cannot commit to the queue {self._path}: {exc}") from None

    def _read(self, query: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise QueueError("the queue is closed")
            try:
                return list(self._conn.execute(query, args).fetchall())
            except sqlite3.Error as exc:
                raise QueueError(f"cannot read the queue {self._path}: {exc}") from None

    @contextmanager
    def _writer_lock(self) -> Iterator[None]:
        """The store's writer lock (its own descriptor): a take-over holds it, so that it is
        ordered with every fenced append of every process, and moves the take-over epoch
        (:mod:`tracelock.storage.directory.lease_epoch`) before it lets go."""
        fd = os.open(self._dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                bump_epoch(self._dir)
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def _counter(conn: sqlite3.Connection, name: str) -> int:
        row = conn.execute("UPDATE counters SET value = value + 1 WHERE name = ? RETURNING value", (name,)).fetchone()
        return int(row[0])

    # -- submitting --------------------------------------------------------------------
    def enqueue(
        self, run: str, queue: str, agent: str, input: bytes, key: str | None, tenant: str | None = None
    ) -> tuple[QueueItem, bool]:
        with self._write() as conn:
            row = conn.execute(f"SELECT {ITEM_COLUMNS} FROM runs r WHERE run = ?", (run,)).fetchone()
            if row is not None:
                return QueueItem.from_row(row), False
            position = self._counter(conn, "position")
            conn.execute(
                "INSERT INTO runs (run, queue, agent, input, idempotency_key, state, position, enqueued_ms, tenant) "
                "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
                (run, queue, agent, input, key, position, self._clock(), tenant),
            )
            row = conn.execute(f"SELECT {ITEM_COLUMNS} FROM runs r WHERE run = ?", (run,)).fetchone()
            return QueueItem.from_row(row), True

    # -- taking runs -------------------------------------------------------------------
    def claim(
        self, queues: Sequence[str], worker: str, limit: int, lease_ms: int, queue_limit: int | None
    ) -> list[Claim]:
        if limit <= 0:
            return []
        marks = ",".join("?" * len(queues))
        now = self._clock()
        claims: list[Claim] = []
        expired = self._read(
            f"SELECT 1 FROM runs r LEFT JOIN leases l USING (run) WHERE r.queue IN ({marks}) AND {_TAKE_OVER} LIMIT 1",
            [*queues, now],
        )
        if expired:
            with self._writer_lock():
                claims += self._take(queues, worker, limit, lease_ms, queue_limit, expired=True)
        if len(claims) < limit:
            claims += self._take(queues, worker, limit - len(claims), lease_ms, queue_limit, expired=False)
        return claims

    def _take(
        self, queues: Sequence[str], worker: str, limit: int, lease_ms: int, queue_limit: int | None, *, expired: bool
    ) -> list[Claim]:
        claims: list[Claim] = []
        with self._write() as conn:
            now = self._clock()
            for queue in queues:
                room = limit - len(claims)
                if room <= 0:
                    break
                if queue_limit is not None:
                    held = conn.execute(
                        "SELECT count(*) FROM runs r JOIN leases l USING (run) WHERE r.queue = ? "
                        "AND r.state = 'leased' AND l.expires_ms >= ?",
                        (queue, now),
                    ).fetchone()
                    room = min(room, queue_limit - int(held[0]))
                    if room <= 0:
                        continue
                if expired:
                    rows = conn.execute(
                        f"SELECT r.run FROM runs r LEFT JOIN leases l USING (run) WHERE r.queue = ? AND {_TAKE_OVER} "
                        "ORDER BY r.position LIMIT ?",
                        (queue, now, room),
                    ).fetchall()
                else:
                    # Not a queued run another owner holds a live lease on.
                    rows = conn.execute(
                        "SELECT r.run FROM runs r LEFT JOIN leases l USING (run) WHERE r.queue = ? "
                        "AND r.state = 'queued' AND l.run IS NULL ORDER BY r.position LIMIT ?",
                        (queue, room),
                    ).fetchall()
                for (run,) in rows:
                    if self._slots.held(run):
                        continue
                    token = self._counter(conn, "token")
                    conn.execute("UPDATE runs SET state = 'leased', attempts = attempts + 1 WHERE run = ?", (run,))
                    conn.execute(
                        "INSERT INTO leases (run, worker, token, expires_ms) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (run) DO UPDATE SET worker = excluded.worker, token = excluded.token, "
                        "expires_ms = excluded.expires_ms",
                        (run, worker, token, now + lease_ms),
                    )
                    row = conn.execute(f"SELECT {ITEM_COLUMNS} FROM runs r WHERE run = ?", (run,)).fetchone()
                    claims.append(Claim(QueueItem.from_row(row, worker), token, expired))
        return claims

    def heartbeat(self, worker: str, held: dict[str, int], lease_ms: int) -> set[str]:
        if not held:
            return set()
        with self._write() as conn:
            return renew_leases(conn, held, self._clock() + lease_ms)

    def _release(self, run: str, token: int, state: str, note: str | None) -> bool:
        with self._write() as conn:
            row = conn.execute("SELECT token FROM leases WHERE run = ?", (run,)).fetchone()
            if row is None or int(row[0]) != token:
                return False
            conn.execute("DELETE FROM leases WHERE run = ?", (run,))
            conn.execute("UPDATE runs SET state = ?, note = ? WHERE run = ?", (state, note, run))
            return True

    def finish(self, run: str, token: int, state: str, note: str | None) -> bool:
        return self._release(run, token, state, note)

    def hand_back(self, run: str, token: int) -> bool:
        # Under the writer lock: the holder's threads may still append until they notice.
        with self._writer_lock():
            return self._release(run, token, "queued", "handed back")

    def requeue(self, run: str) -> bool:
        with self._write() as conn:
            changed = conn.execute(
                "UPDATE runs SET state = 'queued', note = 'resumable' WHERE run = ? AND state = 'waiting'", (run,)
            ).rowcount
            return bool(changed)

    # -- reading -----------------------------------------------------------------------
    def item(self, run: str) -> QueueItem | None:
        rows = self._read(
            f"SELECT {ITEM_COLUMNS}, l.worker FROM runs r LEFT JOIN leases l USING (run) WHERE r.run = ?", (run,)
        )
        return QueueItem.from_row(rows[0], rows[0][ITEM_WIDTH]) if rows else None

    def items(self, *, queue: str | None = None, state: str | None = None, limit: int | None = None) -> list[QueueItem]:
        rows = self._read(
            f"SELECT {ITEM_COLUMNS}, l.worker FROM runs r LEFT JOIN leases l USING (run) "
            "WHERE (? IS NULL OR r.queue = ?) AND (? IS NULL OR r.state = ?) ORDER BY r.position LIMIT ?",
            (queue, queue, state, state, -1 if limit is None else limit),
        )
        return [QueueItem.from_row(row, row[ITEM_WIDTH]) for row in rows]

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for queue, state, count in self._read("SELECT queue, state, count(*) FROM runs GROUP BY queue, state ORDER BY queue, state"):
            out.setdefault(str(queue), {})[str(state)] = int(count)
        return out

    def rows(self) -> list[QueueRow]:
        rows = self._read(
            f"SELECT {ITEM_COLUMNS}, l.worker, r.position FROM runs r LEFT JOIN leases l USING (run) ORDER BY r.position"
        )
        return [QueueRow(int(row[ITEM_WIDTH + 1]), QueueItem.from_row(row, row[ITEM_WIDTH])) for row in rows]

    # -- copying -----------------------------------------------------------------------
    def restore(self, rows: Sequence[QueueRow]) -> int:
        if any(row.item.state == "leased" for row in rows):
            raise leased_error(rows, str(self._path))
        with self._write() as conn:
            held = int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
            if held:
                raise QueueNotEmptyError(
                    f"the run queue {self._path} already holds {held} runs: restore into an empty queue",
                    details={"queue": str(self._path), "runs": held},
                )
            values = [
                (
                    i.run, i.queue, i.agent, i.input, i.idempotency_key, i.state, row.position, i.enqueued_ms,
                    i.attempts, i.note, i.tenant,
                )
                for row in rows
                for i in (row.item,)
            ]
            try:
                conn.executemany(
                    "INSERT INTO runs (run, queue, agent, input, idempotency_key, state, position, enqueued_ms, "
                    "attempts, note, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
            except sqlite3.Error as exc:  # a run twice, a state the table does not know
                raise QueueError(f"cannot restore rows into the queue {self._path}: {exc}") from None
            top = max((row.position for row in rows), default=0)
            conn.execute("UPDATE counters SET value = max(value, ?) WHERE name = 'position'", (top,))
        return len(rows)

    # -- waking ------------------------------------------------------------------------
    def _data_version(self) -> int:
        return int(self._read("PRAGMA data_version")[0][0])

    def wait(self, timeout: float) -> bool:
        """Poll SQLite's ``data_version`` (another process committed) every few
        milliseconds, for at most ``timeout`` seconds."""
        waited = 0.0
        step = 0.002
        pause = self._sleep or threading.Event().wait
        while waited < timeout:
            version = self._data_version()
            if version != self._seen_version:
                self._seen_version = version
                return True
            pause(min(step, timeout - waited))
            waited += step
            step = min(step * 2, 0.05)
        return False

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
            self._slots.close()
