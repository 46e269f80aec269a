"""A :class:`tracelock.storage.backend.Store` kept in a PostgreSQL database.

Each append transaction (the appends a handle's threads and coroutines queued together:
:mod:`tracelock.storage.postgres.group_commit`) first locks the single row of
``tracelock_head`` (``SELECT ... FOR UPDATE``): that row lock is the store-wide writer lock,
held for one transaction and never across a run, so appends from any number of threads,
processes and machines get a dense ``seq``, and each run's ``i`` and ``prev`` continue from
the committed head.
Commits happen in ``seq`` order (the next writer takes the row only after the previous
commit), so every snapshot a reader sees is a prefix of the journal.

The transaction commits without waiting for its WAL flush, so the lock is let go as soon
as its commit record is written; a durable append then waits for the flush in a second,
tiny transaction (schema migration 5), whose flush is shared with every other writer's
(docs/storage-postgres.md, "Durability"). WAL order is ``seq`` order, so a server crash
keeps a prefix of the journal.

Entries are built by :func:`tracelock.core.entry.build_entry` exactly as the directory
store builds them, and stored as their canonical line; an append returns once its
transaction has committed, a durable one once that commit is flushed
(``synchronous_commit`` is never off on the store's sessions but for that first commit).
"""

from __future__ import annotations

import select
import threading
from base64 import b64encode
from collections.abc import Awaitable, Callable, Container, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Self, TypeVar

import orjson

from tracelock.core.entry import TERMINAL_KINDS, Entry, build_entry, build_next, split_line
from tracelock.core.merkle import leaf_hash
from tracelock.errors import TracelockError
from tracelock.storage.backend import NO_PAYLOAD, NewEntry, stored_payload
from tracelock.storage.defaults import random_store_id, wall_clock_ms
from tracelock.storage.errors import (
    DurabilityError,
    PayloadMissingError,
    StoreConnectionError,
    StoreConnectionLostError,
    StoreDriverMissingError,
    StoreError,
    StoreReadOnlyError,
)
from tracelock.storage.ownership import AppendGuard, FenceBook
from tracelock.storage.postgres.connection import WATCH_GRACE_S, CommitWatch, connection_settings
from tracelock.storage.postgres.group_commit import CommitQueue, Request
from tracelock.storage.postgres.location import redact_location
from tracelock.storage.postgres.locks import PostgresLocks
from tracelock.storage.postgres.ownership import PostgresOwnership
from tracelock.storage.postgres.queue import PostgresQueue
from tracelock.storage.postgres.schema import FLUSH_WAIT, prepare_schema
from tracelock.storage.run_fold import fold_runs

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

_T = TypeVar("_T")
_Item = tuple[str, str, Any, dict[str, Any] | None, bool]


def _driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreDriverMissingError(
            f"the PostgreSQL backend needs psycopg 3 and psycopg_pool ({exc.name} is not "
            "installed): pip install 'tracelock[postgres]'"
        ) from None
    return psycopg, psycopg_pool


def _configure(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Every session of the store commits durably, whatever the server's default."""
    row = conn.execute("SHOW synchronous_commit").fetchone()
    if row is None or row[0] == "off":
        conn.execute("SET synchronous_commit TO on")


async def _ready(value: _T) -> _T:
    return value


#: A run the store has no row for (its first entry gets ``i`` 0).
_FRESH: Any = ("fresh",)


#: The writer's statement timeout (seconds) unless the location sets
#: ``tracelock_statement_timeout`` (:mod:`tracelock.storage.postgres.connection`).
DEFAULT_STATEMENT_TIMEOUT = 5.0


#: How long a held entry may wait for a later one to share its commit (ms, by the store's
#: clock): a held entry is committed by the next append, or at once with the next held one
#: once it is older than this.
HOLD_WINDOW_MS = 100


#: The calls of the append procedures (schema migration 5), their parameters sent in
#: binary: entries numbered by the handle (valid while ``next_seq`` is still its guess), and
#: entries the server numbers. Each commits without waiting for the WAL flush, then, when
#: its last parameter says durable, waits for it.
_GUESSED_CALL = "CALL tracelock_append_commit(%b::bigint, %b::bigint, %b::jsonb, %b::boolean)"
_NUMBERED_CALL = "CALL tracelock_append_entries_commit(%b::jsonb, %b::boolean, NULL, NULL)"

#: How :meth:`PostgresStore._write` sends a batch: in a transaction that holds the writer
#: lock, numbered on the handle's guess of ``next_seq``, or numbered by the server.
_LOCKED, _GUESSED, _NUMBERED = "locked", "guessed", "numbered"


def _closed_by_server(conn: Any) -> bool:
    """Whether the server has closed this idle connection, found without a round trip: a
    server that stops sends its last words (an error) and then ends the stream, which makes
    the socket readable. What an idle connection may read otherwise (a notice) is consumed
    and the connection kept."""
    pgconn = conn.pgconn
    for _ in range(4):
        readable, _, _ = select.select([pgconn.socket], [], [], 0)
        if not readable:
            return bool(pgconn.status != 0)  # CONNECTION_OK is 0
        try:
            pgconn.consume_input()
        except Exception:  # libpq: "server closed the connection unexpectedly"
            return True
    return True


def _run_rows(entries: list[Entry], known: Container[str]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The run rows a batch changes (folded as the directory index folds them): updates of
    the runs in ``known`` (run, status, agent, updated_ts, last_seq, added entries, last
    hash, closed) and inserts of the others (every column of ``tracelock_runs``)."""
    updates: list[tuple[Any, ...]] = []
    inserts: list[tuple[Any, ...]] = []
    for run, fold in fold_runs(entries).items():
        first, last = fold.first, fold.last
        closed = last.kind in TERMINAL_KINDS
        if run in known:
            updates.append((run, fold.status, fold.agent, last.ts, last.seq, fold.count, last.hash, closed))
        else:
            inserts.append(
                (run, fold.agent, fold.parent, fold.status or "created",
                 first.ts, last.ts, fold.count, first.seq, last.seq, last.hash, closed)
            )
    return updates, inserts


def _batch(
    payload_rows: dict[bytes, bytes], entries: list[Any], updates: list[Any], inserts: list[Any], leases: dict[str, int]
) -> str:
    """The JSON argument of an append function (migration 3 documents its members)."""
    batch: dict[str, Any] = {
        "p": [[digest.hex(), b64encode(data).decode() if data else None] for digest, data in payload_rows.items()],
        "e": entries,
        "u": updates,
        "n": inserts,
    }
    if leases:
        batch["l"] = sorted(leases.items())
    return orjson.dumps(batch).decode()


def _ended(run: str) -> StoreError:
    return StoreError(f"run {run!r} has ended; nothing can be appended to it", details={"run": run})


class PostgresStore(PostgresLocks):
    """A store in one PostgreSQL database, selected by a ``postgresql://`` location.

    ``clock`` gives entry timestamps (milliseconds; default the wall clock) and
    ``store_id`` names a store this handle creates (default random). ``pool_size`` bounds
    the connections this handle reads on; appends are written on one session of their own.
    ``connect_timeout`` and ``statement_timeout`` (the writer's, seconds, 0 for none) apply
    unless the location sets them (``connect_timeout``, ``tracelock_statement_timeout``).
    """

    def __init__(
        self,
        location: str,
        *,
        create: bool = True,
        read_only: bool = False,
        clock: Callable[[], int] | None = None,
        store_id: Callable[[], str] | None = None,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
    ) -> None:
        self._shown = redact_location(location)
        settings = connection_settings(
            location, connect_timeout=connect_timeout, statement_timeout=statement_timeout
        )
        #: The location as libpq gets it (keepalives and timeouts added): every session of
        #: the store, the run queue's too, connects with it.
        self._url = settings.url
        self._statement_timeout = settings.statement_timeout
        #: The commit leader's session (:meth:`_writer_session`) and its deadline.
        self._writer: Any = None
        self._watch = CommitWatch(settings.watch_limit)
        self._read_only = read_only
        self._clock = clock or wall_clock_ms
        self._closed = False
        self._failed: StoreError | None = None
        self._state_lock = threading.Lock()
        self._queue = CommitQueue(self._commit_batch)
        # What this handle's last append transaction left (used by its commit leader only):
        # the next seq, whether nobody else had appended since the one before (its next
        # batch then guesses next_seq), and the heads of the open runs it read or wrote (a
        # batch of those runs is built on them and sent in one call: see _write).
        self._tip: int | None = None
        self._alone = False
        self._heads: dict[str, tuple[int, str] | None] = {}
        # Whether a commit of this handle may not be flushed yet (a non-durable append's),
        # and how many commits waited for their flush (a durable append's, a sync's).
        self._unflushed = False
        self._flush_waits = 0
        #: Called inside each append transaction for the runs this handle appends to under
        #: a lease (tracelock.storage.ownership): refuses a lost lease's appends.
        self.append_guard: AppendGuard | None = None
        self._ownership: PostgresOwnership | None = None
        self._run_queue: PostgresQueue | None = None
        psycopg, pool_module = _driver()
        self._psycopg = psycopg
        options: dict[str, Any] = {"autocommit": True}
        try:
            conn = psycopg.connect(self._url, **options)
        except psycopg.Error as exc:
            raise self._translate(exc, "cannot connect to") from None
        try:
            _configure(conn)
            self.store_id = prepare_schema(
                conn,
                create=create,
                read_only=read_only,
                where=self._shown,
                store_id=store_id or random_store_id,
            )
            if not read_only:  # the session that opened the store becomes the writer's
                self._limit_statements(conn)
                self._writer = conn
        except psycopg.Error as exc:
            raise self._translate(exc, "cannot open the store in") from None
        finally:
            if self._writer is not conn:
                conn.close()
        self._pool = pool_module.ConnectionPool(
            self._url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs=options,
            configure=_configure,
            open=False,
            name="tracelock",
            timeout=connect_timeout * 3,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout * 3)
        except pool_module.PoolTimeout:
            self._pool.close()
            self._drop_writer()
            raise StoreConnectionError(
                f"cannot connect to {self._shown}: no connection within {connect_timeout * 3:g} s",
                details={"store": self._shown},
            ) from None

    # -- writing: group commit (tracelock.storage.postgres.group_commit) ---------------
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
        """Returns once the transaction holding the entry has committed, and, unless
        ``durable=False``, once that commit is flushed (an entry's ``seq`` exists only in a
        committed transaction: a non-durable append commits too, without waiting for the
        flush, which the next durable append or :meth:`sync` of any writer brings)."""
        request = self._request(((run, kind, payload, meta, new_run),), durable=durable)
        entries: list[Entry] = self._queue.submit(request, self._clock)
        return entries[0]

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        request = self._request(items, durable=durable)
        if not items:
            return []
        entries: list[Entry] = self._queue.submit(request, self._clock)
        return entries

    def append_held(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> int:
        """Held in the process, not committed: this handle's next append (of any run) or
        :meth:`sync` commits it in front of itself, in its transaction, with the timestamp
        returned here; so does the next held entry once this one is older than
        ``HOLD_WINDOW_MS`` (docs/storage-postgres.md, "Held entries")."""
        request = self._request(((run, kind, payload, meta, new_run),), durable=False)
        return self._queue.hold(request, self._clock, HOLD_WINDOW_MS)

    def append_async(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
        durable: bool = True,
    ) -> Awaitable[Entry]:
        """Queued when called (one handle's appends commit in call order); the awaitable
        resolves once the transaction holding the entry has committed (and is flushed,
        unless ``durable=False``), as with :meth:`append`. The event loop keeps running
        meanwhile (the commit runs on the handle's commit thread, shared with the appends
        queued with it). An invalid item fails the awaitable, not the call."""
        request = self._request(((run, kind, payload, meta, new_run),), durable=durable)
        future: Awaitable[Entry] = self._queue.submit_async(request, self._clock, single=True)
        return future

    def append_many_async(self, items: Sequence[NewEntry], *, durable: bool = True) -> Awaitable[list[Entry]]:
        """:meth:`append_many` for a coroutine, like :meth:`append_async` (``durable=False``
        resolves once the transaction has committed, without waiting for its flush)."""
        request = self._request(items, durable=durable)
        if not items:
            return _ready([])
        future: Awaitable[list[Entry]] = self._queue.submit_async(request, self._clock, single=False)
        return future

    @property
    def transactions(self) -> int:
        """How many append transactions this handle has run (several appends share one when
        they are queued together)."""
        return self._queue.transactions

    @property
    def append_calls(self) -> int:
        """How many append calls (each an ``append*`` call) this handle has queued."""
        return self._queue.appends

    @property
    def flush_waits(self) -> int:
        """How many of this handle's commits waited for their WAL flush (a durable
        append's transaction, or a :meth:`sync`'s): the commits a caller waits for. A
        non-durable append's commit does not wait."""
        return self._flush_waits

    def _request(self, items: Sequence[_Item], *, durable: bool = True) -> Request:
        """An append call's request, with its payloads canonicalized and hashed here, in
        the caller's thread, before it queues."""
        self._writer_check()
        return Request(items, [stored_payload(item[2]) for item in items], durable=durable)

    def _barrier(self) -> Request | None:
        """An empty durable request for :meth:`sync`, when a commit of this handle may not
        be flushed yet; None otherwise."""
        return Request((), [], durable=True) if self._unflushed else None

    def _commit_batch(self, batch: list[Request]) -> None:
        """Append the requests of ``batch`` in one transaction, each all or nothing.

        Two round trips: (1) ``BEGIN``, the head row locked ``FOR UPDATE`` and the heads of
        the batch's runs; the entries are then built here; (2) the inserts, the run rows,
        ``next_seq`` and ``COMMIT``. One round trip when nobody else appended since this
        handle's last commit (one writer, a quiet store): the entries are built on the heads
        that commit left and sent with the lock in one query (one implicit transaction); if
        another writer got in between, its entry holds that ``seq`` (or that run's next
        ``i``), the unique keys refuse the insert, nothing commits, and the two round trips
        follow. An invalid item fails its own request only.

        The transaction runs on the writer's own session (:meth:`_writer_session`), under
        its statement timeout and the handle's watch (:class:`CommitWatch`). A session that
        died idle (a server restart) is found before anything that could commit is sent,
        and the batch is tried once more on a new one. A connection lost once the commit
        was sent, a statement the server cancelled at the timeout, or one left unanswered
        past the watch's limit (a server gone without closing the socket) leaves the commit
        in doubt: every request of the batch, and every one queued behind it, fails with
        ``STORE_CONNECTION_LOST``, never retried, and the handle accepts no more work.
        """
        failed = self._failed
        if isinstance(failed, StoreConnectionLostError):
            # Queued before the handle lost its server: these appends fail with that loss.
            raise StoreConnectionLostError(failed.message, details=failed.details)
        self._check_open()
        psycopg = self._psycopg
        names = list(dict.fromkeys(item[0] for request in batch for item in request.items))
        durable = any(request.durable for request in batch)
        for attempt in (1, 2):
            committing = [False]
            known = self._writer is not None and not self._writer.closed
            conn = None
            try:
                conn = self._writer_session()
                with self._watch.watching(conn):
                    try:
                        self._transact(conn, batch, names, committing, durable)
                    except BaseException:
                        self._forget()
                        if not conn.broken:
                            with suppress(psycopg.Error):
                                conn.rollback()
                        raise
                return
            except psycopg.Error as exc:
                lost = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
                error = self._translate(exc, "cannot append to")
                gone = self._gone(exc, conn, committing[0])
                if lost:
                    self._drop_writer()
                failure: DurabilityError
                if gone is not None:
                    failure = StoreConnectionLostError(
                        f"{gone}: the outcome of the append is unknown, so it is never retried and "
                        f"this handle accepts no more work: {error.message}",
                        details={**error.details, "statement_timeout": self._statement_timeout},
                    )
                    self._failed = failure
                    raise failure from None
                if lost and committing[0]:
                    failure = DurabilityError(
                        f"the outcome of a commit is unknown (the connection was lost during it), "
                        f"so it is never retried and this handle accepts no more work: {error.message}",
                        details=error.details,
                    )
                    self._failed = failure
                    raise failure from None
                if lost and known and attempt == 1:
                    continue  # a session that died idle (a server restart): once more, on a new one
                raise error from None

    def _gone(self, exc: BaseException, conn: Any, committing: bool) -> str | None:
        """Why the server is taken for gone after ``exc`` on the writer's session ``conn``,
        or None: the watch cut a statement that went unanswered, the server cancelled one
        (its statement timeout), or the session broke while a commit was under way."""
        if self._watch.was_cut(conn):
            limit = self._statement_timeout + WATCH_GRACE_S
            return f"the server gave no answer within {limit:g} s (the statement timeout and {WATCH_GRACE_S:g} s)"
        if isinstance(exc, self._psycopg.errors.QueryCanceled):
            return f"the server cancelled the append (statement timeout {self._statement_timeout:g} s)"
        if committing and conn is not None and conn.broken:
            return "the connection was lost during a commit"
        return None

    def _writer_session(self) -> Any:
        """The session the commit leader writes on (one leader at a time uses it), opened
        again when it was lost, with the writer's statement timeout."""
        conn = self._writer
        if conn is None or conn.closed:
            conn = self._psycopg.connect(self._url, autocommit=True)
            try:
                _configure(conn)
                self._limit_statements(conn)
            except BaseException:
                conn.close()
                raise
            self._writer = conn
        return conn

    def _limit_statements(self, conn: Any) -> None:
        """Give the writer's session its statement timeout (``statement_timeout``, so the
        server cancels, and rolls back, an append stuck longer, e.g. waiting for the
        writers' lock). Only this session: reads, migrations, lock and queue waits keep the
        server's setting."""
        if self._statement_timeout > 0:
            conn.execute(f"SET statement_timeout = {max(1, round(self._statement_timeout * 1000))}".encode())

    def _drop_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            with suppress(Exception):
                conn.close()

    def _transact(
        self, conn: Any, batch: list[Request], names: list[str], committing: list[bool], durable: bool
    ) -> None:
        # The usual case, one call of the append function (server-side parameters, binary).
        # That call commits: a connection the server closed meanwhile (a restart) must be
        # found before it is sent, while a retry cannot commit twice.
        # Its entries are numbered on the handle's guess of next_seq while nobody else
        # appends (the cheaper call); otherwise, or when the guess turns out wrong, by the
        # server. Both check that the runs' heads this handle knows are still the heads.
        if self._knows_heads(batch):
            if _closed_by_server(conn):
                raise self._psycopg.OperationalError("the server closed this pooled connection")
            cur = conn.cursor()
            if self._alone and self._tip is not None and self._attempt(conn, cur, batch, committing, _GUESSED, durable):
                return
            if self._attempt(conn, cur, batch, committing, _NUMBERED, durable):
                return
        # Otherwise a client-side cursor sends each step as one simple query (the parameters
        # bound by the driver's own quoting): one round trip each. In READ COMMITTED each
        # statement reads a snapshot taken when it starts, so the runs' heads are read after
        # the head row lock was granted.
        cur = self._psycopg.ClientCursor(conn)
        # Lock first, then read the heads (after the lock was granted), build, write and
        # commit (without waiting for the flush, as the append procedures do): this always
        # succeeds.
        cur.execute(
            "BEGIN; SET LOCAL synchronous_commit TO off; "
            "SELECT next_seq FROM tracelock_head WHERE id = 1 FOR UPDATE; "
            "SELECT run, entries, last_hash, closed FROM tracelock_runs WHERE run = ANY(%s)",
            (names,),
        )
        cur.nextset()
        cur.nextset()
        seq, known = self._observe(cur)
        self._fence(cur, batch, names)
        self._write(cur, batch, seq, known, committing, _LOCKED, durable)

    def _fence(self, cur: Any, batch: list[Request], names: list[str]) -> None:
        """Refuse (in this transaction, after the head row lock) the requests of runs this
        handle appends to under a lease it has lost (``append_guard``)."""
        guard = self.append_guard
        if guard is None:
            return
        refused = guard.refused(cur, names)
        for request in batch:
            if request.error is None and any(item[0] in refused for item in request.items):
                request.error = next(refused[item[0]] for item in request.items if item[0] in refused)

    def _observe(self, cur: Any) -> tuple[int, dict[str, tuple[int, str] | None]]:
        """The head's ``next_seq`` and the batch's runs' heads (remembered) from the current
        and next result of ``cur``."""
        row = cur.fetchone()
        cur.nextset()
        known: dict[str, tuple[int, str] | None] = {
            str(name): None if closed else (int(count) - 1, str(last))
            for name, count, last, closed in cur.fetchall()
        }
        self._remember(known)
        seq = int(row[0])
        self._alone = seq == self._tip
        return seq, known

    def _attempt(
        self, conn: Any, cur: Any, batch: list[Request], committing: list[bool], mode: str, durable: bool
    ) -> bool:
        """:meth:`_write` on the heads this handle knows, without holding the lock; False
        (nothing committed) if the guess of ``next_seq`` (``_GUESSED``) or a head moved on
        meanwhile."""
        errors = self._psycopg.errors
        try:
            first = self._tip if mode == _GUESSED and self._tip is not None else 0
            self._write(cur, batch, first, self._heads, committing, mode, durable)
        except (errors.SerializationFailure, errors.UniqueViolation):
            # Another writer appended (to one of the batch's runs, for ``_NUMBERED``), or a
            # queue lease changed hands (or a run this batch starts exists already: a
            # caller's new_run on a used id, which the locked path reports): the error rolled
            # the implicit transaction back, lock included, with nothing to flush.
            conn.rollback()
            committing[0] = False
            self._alone = False
            if mode == _NUMBERED:
                self._forget()
            return False
        return True

    def _knows_heads(self, batch: list[Request]) -> bool:
        """Whether this batch may be sent in one round trip, built on the heads this handle
        knows: it knows the head of every run the batch appends to, the item starts a new
        run, or an earlier item of the batch started it (a run's held start and first
        effects commit together)."""
        heads = self._heads
        started: set[str] = set()
        for request in batch:
            if request.error is None:
                for item in request.items:
                    if item[4]:
                        started.add(item[0])
                    elif item[0] not in heads and item[0] not in started:
                        return False
        return True

    def _forget(self) -> None:
        self._tip = None
        self._heads = {}

    def _remember(self, heads: dict[str, tuple[int, str] | None]) -> None:
        """Keep the heads of open runs only: an ended run's would make this dict grow
        with every run a long-lived handle writes (and a run this handle does not know
        goes through the locked path, which reads its head, ended or not)."""
        mine = self._heads
        for run, head in heads.items():
            if head is None:
                mine.pop(run, None)
            else:
                mine[run] = head

    def _write(
        self,
        cur: Any,
        batch: list[Request],
        seq: int,
        known: dict[str, tuple[int, str] | None],
        committing: list[bool],
        mode: str,
        durable: bool,
    ) -> None:
        """Build the batch's entries from ``seq`` on and send them with ``COMMIT`` (which
        does not wait for the WAL flush), and, when ``durable``, a wait for the flush.

        ``_LOCKED``: the transaction is open and holds the head row lock, ``seq`` is
        ``next_seq``; the writes go as statements of one simple query ending with
        ``COMMIT``. Otherwise ``known`` holds the heads this handle remembers and
        everything goes in one call (one implicit transaction) that takes the lock:
        ``_GUESSED``, ``seq`` is the handle's guess of ``next_seq`` and
        ``tracelock_append`` writes only if it is right; ``_NUMBERED``, the entries are
        built from ``seq`` 0 as stand-ins and ``tracelock_append_entries`` checks the
        heads and numbers them. Either raises ``SerializationFailure`` when it refuses.
        A batch with nothing to write only waits for the flush, when ``durable`` and a
        commit of this handle may not be flushed yet.
        """
        first = seq
        touched: dict[str, tuple[int, str] | None] = {}
        payload_rows: dict[bytes, bytes] = {}
        built: list[Entry] = []
        results: list[tuple[Request, list[Entry]]] = []
        for request in batch:
            if request.error is not None:
                continue
            try:
                out, own_touched, own_payloads = self._build(request, seq, known, touched)
            except TracelockError as exc:  # an invalid item: this call fails, the others go on
                request.error = exc
                continue
            seq += len(out)
            touched.update(own_touched)
            for digest, data in own_payloads.items():
                payload_rows.setdefault(digest, data)
            built += out
            results.append((request, out))
        if not built:
            if mode == _LOCKED:
                cur.execute(b"ROLLBACK")
            if durable and self._unflushed:
                committing[0] = True
                cur.execute(FLUSH_WAIT.encode())
                self._flushed()
            for request, _ in results:  # requests without items (a sync's)
                request.result = []
            return
        updates, inserts = _run_rows(built, known)
        committing[0] = True
        guard = self.append_guard
        leases = guard.tokens(touched) if guard is not None and mode != _LOCKED else {}
        if mode == _NUMBERED:
            built = self._call_numbered(cur, built, payload_rows, updates, inserts, leases, durable)
            self._alone = built[0].seq == self._tip
            seq = built[-1].seq + 1
            touched = {entry.run: None if entry.kind in TERMINAL_KINDS else (entry.i, entry.hash) for entry in built}
            at = 0
            for index, (request, out) in enumerate(results):
                results[index] = (request, built[at : at + len(out)])
                at += len(out)
        else:
            # The rows of the entries as built here (numbered from next_seq or the guess).
            entry_rows = [(entry.seq, entry.run, entry.i, entry.line, leaf_hash(entry.line)) for entry in built]
            if mode == _LOCKED:
                self._send_statements(cur, payload_rows, entry_rows, updates, inserts, seq, durable)
            else:
                self._call_guessed(cur, first, seq, payload_rows, entry_rows, updates, inserts, leases, durable)
        if durable:
            self._flushed()
        else:
            self._unflushed = True
        self._tip = seq
        for request, out in results:
            request.result = out
        self._remember(touched)

    @staticmethod
    def _send_statements(
        cur: Any,
        payload_rows: dict[bytes, bytes],
        entry_rows: list[tuple[int, str, int, bytes, bytes]],
        updates: list[tuple[Any, ...]],
        inserts: list[tuple[Any, ...]],
        next_seq: int,
        durable: bool,
    ) -> None:
        """The writes of a locked transaction and its ``COMMIT``, and when ``durable`` the
        wait for its flush (a transaction of its own), as one simple query."""
        statements: list[str] = []
        args: list[Any] = []
        if payload_rows:
            # Empty data (never canonical JSON) is a redacted payload: stored erased.
            statements.append(
                "INSERT INTO tracelock_payloads (hash, data, redacted) VALUES "
                + ", ".join(["(%s, %s, %s)"] * len(payload_rows))
                + " ON CONFLICT (hash) DO NOTHING"
            )
            for digest, data in payload_rows.items():
                args += (digest, data or None, not data)
        statements.append(
            "INSERT INTO tracelock_entries (seq, run, i, line, leaf) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %s)"] * len(entry_rows))
        )
        for entry_row in entry_rows:
            args += entry_row
        for run, status, agent, ts, last, count, digest, closed in updates:
            statements.append(
                "UPDATE tracelock_runs SET status = COALESCE(%s, status), agent = COALESCE(agent, %s), "
                "updated_ts = %s, last_seq = %s, entries = entries + %s, last_hash = %s, closed = %s "
                "WHERE run = %s"
            )
            args += (status, agent, ts, last, count, digest, closed, run)
        if inserts:
            statements.append(
                "INSERT INTO tracelock_runs (run, agent, parent, status, started_ts, updated_ts, "
                "entries, first_seq, last_seq, last_hash, closed) VALUES "
                + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(inserts))
            )
            for insert in inserts:
                args += insert
        statements.append("UPDATE tracelock_head SET next_seq = %s WHERE id = 1")
        args.append(next_seq)
        statements.append("COMMIT")
        if durable:
            statements.append(FLUSH_WAIT)
        cur.execute("; ".join(statements), args)

    @staticmethod
    def _call_guessed(
        cur: Any,
        expect: int,
        next_seq: int,
        payload_rows: dict[bytes, bytes],
        entry_rows: list[tuple[int, str, int, bytes, bytes]],
        updates: list[tuple[Any, ...]],
        inserts: list[tuple[Any, ...]],
        leases: dict[str, int],
        durable: bool,
    ) -> None:
        """One call of ``tracelock_append_commit`` (schema migration 5), which runs
        ``tracelock_append`` (migrations 3 and 4; 3 documents ``batch``)."""
        batch = _batch(
            payload_rows,
            [[seq, run, i, b64encode(line).decode(), leaf.hex()] for seq, run, i, line, leaf in entry_rows],
            updates,
            inserts,
            leases,
        )
        cur.execute(_GUESSED_CALL, (expect, next_seq, batch, durable))

    def _call_numbered(
        self,
        cur: Any,
        built: list[Entry],
        payload_rows: dict[bytes, bytes],
        updates: list[tuple[Any, ...]],
        inserts: list[tuple[Any, ...]],
        leases: dict[str, int],
        durable: bool,
    ) -> list[Entry]:
        """One call of ``tracelock_append_entries_commit`` (schema migration 5), which runs
        ``tracelock_append_entries`` (migration 4 documents its batch) with ``built``,
        numbered from 0; returns them as numbered by the server. The server
        built the same lines from the same parts: the last entry's hash, which chains every
        entry of its run in the batch, is compared, and a difference fails the handle."""
        rows: list[list[Any]] = []
        last_at: dict[str, int] = {}
        for index, entry in enumerate(built):
            a, b, c = split_line(entry)
            before = last_at.get(entry.run)
            last_at[entry.run] = index
            rows.append([entry.run, entry.i, entry.prev if before is None else before,
                         b64encode(a).decode(), b64encode(b).decode(), b64encode(c).decode()])
        batch = _batch(
            payload_rows,
            rows,
            # Version 3's run rows, less their hashes, with batch indices for seq values.
            [[run, status, agent, ts, last, count, closed] for run, status, agent, ts, last, count, _, closed in updates],
            [[*row[:9], row[10]] for row in inserts],
            leases,
        )
        cur.execute(_NUMBERED_CALL, (batch, durable))
        base, last_hash = cur.fetchone()
        numbered: list[Entry] = []
        for index, (entry, row) in enumerate(zip(built, rows, strict=True)):
            prev = numbered[row[2]].hash if type(row[2]) is int else entry.prev
            numbered.append(
                build_entry(int(base) + index, entry.run, entry.i, entry.kind, entry.payload, prev, entry.ts, entry.meta)
            )
        if numbered[-1].hash != last_hash:
            self._failed = DurabilityError(
                f"the server stored entries other than this handle built (last hash {last_hash}, "
                f"expected {numbered[-1].hash}): this handle accepts no more work"
            )
            raise self._failed
        return numbered

    @staticmethod
    def _build(
        request: Request,
        seq: int,
        known: dict[str, tuple[int, str] | None],
        touched: dict[str, tuple[int, str] | None],
    ) -> tuple[list[Entry], dict[str, tuple[int, str] | None], dict[bytes, bytes]]:
        """The entries of one request from ``seq`` on, given the runs' committed heads
        (``known``) and the heads the batch's earlier requests left (``touched``). Raises
        for an invalid item, with nothing of the request kept."""
        ts = request.ts
        own: dict[str, tuple[int, str] | None] = {}
        payloads: dict[bytes, bytes] = {}
        out: list[Entry] = []
        for (run, kind, _, meta, new_run), stored in zip(request.items, request.prepared, strict=True):
            payload_hex = None
            if stored is not None:
                data, digest = stored
                payload_hex = digest.hex()
                payloads.setdefault(digest, data)
            if new_run:
                if run in own or run in touched or run in known:
                    raise StoreError(f"run {run!r} already exists", details={"run": run})
                head = None
            else:
                head = own[run] if run in own else touched[run] if run in touched else known.get(run, _FRESH)
                if head is None:
                    raise _ended(run)
                if head is _FRESH:
                    head = None
            entry = build_next(seq, run, head, kind, payload_hex, ts, meta)
            own[run] = None if kind in TERMINAL_KINDS else (entry.i, entry.hash)
            out.append(entry)
            seq += 1
        return out, own, payloads

    def catch_up(self) -> None:
        """Nothing to do: every read sees every committed transaction."""

    def sync(self) -> None:
        """Commit the held entries (:meth:`append_held`), and wait for the WAL flush of
        every commit of this handle (a non-durable append's commit did not wait)."""
        self._writer_check()
        self._queue.flush(self._barrier())

    def sync_async(self) -> Awaitable[None]:
        """:meth:`sync` for a coroutine: the held entries ride on a commit led by the
        handle's commit thread; the loop is not blocked."""
        self._writer_check()
        future: Awaitable[None] = self._queue.flush_async(self._clock, pending=self._unflushed)
        return future

    def _flushed(self) -> None:
        """A commit of this handle waited for its flush, which covers every earlier one."""
        self._unflushed = False
        self._flush_waits += 1

    def erase_payload(self, digest: str) -> bool:
        """Remove a payload's bytes (after its redaction entry was appended). Returns False
        if it was already erased."""
        self._writer_check()
        raw = bytes.fromhex(digest)
        with self._connection("cannot erase a payload in", writing=True) as conn, conn.transaction():
            row = conn.execute(
                "SELECT redacted FROM tracelock_payloads WHERE hash = %s FOR UPDATE", (raw,)
            ).fetchone()
            if row is None:
                raise PayloadMissingError(f"payload {digest} is not stored", details={"payload": digest})
            if row[0]:
                return False
            conn.execute(
                "UPDATE tracelock_payloads SET data = NULL, redacted = true WHERE hash = %s", (raw,)
            )
            return True

    # -- run ownership (tracelock.storage.ownership) ------------------------------------
    def ownership(self) -> PostgresOwnership:
        """The run leases of this handle (made on first use; its fence guards this
        handle's appends)."""
        with self._state_lock:
            self._check_open()
            if self._ownership is None:
                if self._read_only:
                    raise StoreReadOnlyError(f"the store at {self._shown} is open read-only: it cannot own runs")
                self._ownership = PostgresOwnership(self._url, self)
                self.append_guard = self._ownership.guard
            return self._ownership

    # -- the run queue (tracelock.storage.queue_backend) --------------------------------
    def queue(self, *, clock_ms: Callable[[], int] | None = None) -> PostgresQueue:
        """This handle's run queue, in the store's database (made on first use, then the same
        object; lease expiry is measured on the server's clock, ``clock_ms`` is unused)."""
        with self._state_lock:
            if self._run_queue is not None:
                return self._run_queue
            self._check_open()
        # Outside the state lock: ownership() takes it. A read-only handle, which appends
        # nothing, gives its queue a fence book of its own.
        made = PostgresQueue(self._url, FenceBook() if self._read_only else self.ownership().fences)
        with self._state_lock:
            if self._run_queue is None:
                self._run_queue = made
                return made
        made.close()
        return self._run_queue

    def has_queue(self) -> bool:
        """Whether someone ever queued a run on this store (its queue tables may exist for
        the run leases alone)."""
        if self._run_queue is not None:
            return True
        row = self._one("SELECT to_regclass('tracelock_queue_runs') IS NOT NULL")
        if not (row and row[0]):
            return False
        found = self._one("SELECT EXISTS (SELECT 1 FROM tracelock_queue_runs)")
        return bool(found and found[0])

    def close_queue(self) -> None:
        """Close the run queue, if it was made (before the store closes)."""
        with self._state_lock:
            queue, self._run_queue = self._run_queue, None
        if queue is not None:
            queue.close()

    def close(self) -> None:
        """Commit the appends still queued (coroutines' appends not awaited yet), then
        close the connections."""
        with self._state_lock:
            if self._closed:
                return
        self.close_queue()
        self._queue.close()
        if self._unflushed and self._failed is None:
            # A non-durable append's commit, the last of this handle: flushed before closing.
            with suppress(TracelockError):
                self._queue.flush(self._barrier())
        if self._ownership is not None:
            self._ownership.close()
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._watch.close()
        self._drop_writer()
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
