"""A :class:`tracelock.storage.backend.Store` kept in a PostgreSQL database.

Each append is one transaction that first locks the single row of ``tracelock_head``
(``SELECT ... FOR UPDATE``): that row lock is the store-wide writer lock, held for one commit
and never across a run, so appends from any number of threads, processes and machines
get a dense ``seq``, and each run's ``i`` and ``prev`` continue from the committed head.
Commits happen in ``seq`` order (the next writer takes the row only after the previous
commit), so every snapshot a reader sees is a prefix of the journal.

Entries are built by :func:`tracelock.core.entry.build_entry` exactly as the directory
store builds them, and stored as their canonical line; a durable append returns once its
transaction has committed (``synchronous_commit`` is never off on the store's sessions).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self, TypeVar

import orjson

from tracelock.core.canonical import dumps
from tracelock.core.entry import ADMIN_RUN, TERMINAL_KINDS, Entry, build_entry, parse_entry
from tracelock.core.merkle import (
    ProofRequestError,
    consistency_proof_from_leaves,
    inclusion_proof_from_leaves,
    leaf_hash,
    root,
)
from tracelock.errors import TracelockError
from tracelock.storage.backend import NO_PAYLOAD, NewEntry, RedactedPayload, Repair, RunInfo
from tracelock.storage.defaults import random_store_id, wall_clock_ms
from tracelock.storage.errors import (
    DurabilityError,
    JournalCorruptError,
    PayloadMissingError,
    PayloadRedactedError,
    RunNotFoundError,
    StoreClosedError,
    StoreConnectionError,
    StoreDriverMissingError,
    StoreError,
    StorePermissionError,
    StoreReadOnlyError,
)
from tracelock.storage.postgres.location import redact_location, scrub
from tracelock.storage.postgres.schema import prepare_schema
from tracelock.storage.run_fold import fold_runs

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresStore"]

_T = TypeVar("_T")
_Item = tuple[str, str, Any, dict[str, Any] | None, bool]

_RUN_COLUMNS = "run, agent, parent, status, started_ts, updated_ts, entries, first_seq, last_seq"
_READ_BATCH = 4096


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


def _ended(run: str) -> StoreError:
    return StoreError(f"run {run!r} has ended; nothing can be appended to it", details={"run": run})


class PostgresStore:
    """A store in one PostgreSQL database, selected by a ``postgresql://`` location.

    ``clock`` gives entry timestamps (milliseconds; default the wall clock) and
    ``store_id`` names a store this handle creates (default random). ``pool_size`` bounds
    the connections this handle opens.
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
    ) -> None:
        self._url = location
        self._shown = redact_location(location)
        self._read_only = read_only
        self._clock = clock or wall_clock_ms
        self._closed = False
        self._failed: StoreError | None = None
        self._state_lock = threading.Lock()
        psycopg, pool_module = _driver()
        self._psycopg = psycopg
        options: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in location:
            options["connect_timeout"] = max(1, round(connect_timeout))
        try:
            conn = psycopg.connect(location, **options)
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
        except psycopg.Error as exc:
            raise self._translate(exc, "cannot open the store in") from None
        finally:
            conn.close()
        self._pool: psycopg_pool.ConnectionPool[Any] = pool_module.ConnectionPool(
            location,
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
            raise StoreConnectionError(
                f"cannot connect to {self._shown}: no connection within {connect_timeout * 3:g} s",
                details={"store": self._shown},
            ) from None

    # -- errors and connections ----------------------------------------------------------
    def _translate(self, exc: BaseException, doing: str) -> StoreError:
        psycopg = self._psycopg
        message = scrub(str(exc).strip() or type(exc).__name__, self._url)
        details = {"store": self._shown, "driver_error": type(exc).__name__}
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return StorePermissionError(f"{doing} {self._shown}: permission denied: {message}", details=details)
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) or doing == "cannot connect to":
            return StoreConnectionError(f"{doing} {self._shown}: {message}", details=details)
        return StoreError(f"{doing} {self._shown}: {message}", details=details)

    def _check_open(self) -> None:
        if self._failed is not None:
            raise StoreClosedError(
                f"the store handle failed earlier and accepts no more work: {self._failed.message}"
            )
        if self._closed:
            raise StoreClosedError("the store is closed")

    @contextmanager
    def _connection(self, doing: str, *, writing: bool = False) -> Iterator[Any]:
        self._check_open()
        psycopg = self._psycopg
        try:
            with self._pool.connection() as conn:
                yield conn
        except TracelockError:
            raise
        except psycopg.Error as exc:
            error = self._translate(exc, doing)
            if writing and isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                # The commit's outcome is unknown: never retried, and the handle is done.
                failure = DurabilityError(error.message, details=error.details)
                self._failed = failure
                raise failure from None
            raise error from None
        except Exception as exc:
            if type(exc).__name__ == "PoolTimeout":
                raise StoreConnectionError(
                    f"{doing} {self._shown}: no connection available: {scrub(str(exc), self._url)}",
                    details={"store": self._shown},
                ) from None
            raise

    def _writer_check(self) -> None:
        self._check_open()
        if self._read_only:
            raise StoreReadOnlyError(f"the store at {self._shown} is open read-only")

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
        return self._append(((run, kind, payload, meta, new_run),))[0]

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        return self._append(items)

    def append_async(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> Awaitable[Entry]:
        """The entry is committed when this is called, in call order like the directory
        store; the awaitable returns it. The commit blocks the event loop in this version."""
        return _ready(self._append(((run, kind, payload, meta, new_run),))[0])

    def append_many_async(self, items: Sequence[NewEntry]) -> Awaitable[list[Entry]]:
        return _ready(self._append(items))

    def _append(self, items: Sequence[_Item]) -> list[Entry]:
        """Append ``items`` in one transaction: all of them or none."""
        self._writer_check()
        if not items:
            return []
        sha256 = hashlib.sha256
        prepared: list[tuple[bytes, bytes] | None] = []
        for _, _, payload, _, _ in items:
            if payload is NO_PAYLOAD:
                prepared.append(None)
            elif type(payload) is RedactedPayload:
                prepared.append((b"", bytes.fromhex(payload.digest)))
            else:
                data = dumps(payload)
                prepared.append((data, sha256(data).digest()))
        ts = self._clock()
        with self._connection("cannot append to", writing=True) as conn, conn.transaction(), conn.cursor() as cur:
            row = cur.execute("SELECT next_seq FROM tracelock_head WHERE id = 1 FOR UPDATE").fetchone()
            seq = int(row[0])
            names = list(dict.fromkeys(item[0] for item in items))
            cur.execute(
                "SELECT run, entries, last_hash, closed FROM tracelock_runs WHERE run = ANY(%s)", (names,)
            )
            known: dict[str, tuple[int, str] | None] = {
                str(name): None if closed else (int(count) - 1, str(last))
                for name, count, last, closed in cur.fetchall()
            }
            touched: dict[str, tuple[int, str] | None] = {}
            payload_rows: dict[bytes, bytes] = {}
            entry_rows: list[tuple[int, str, int, bytes, bytes]] = []
            out: list[Entry] = []
            for (run, kind, _, meta, new_run), stored in zip(items, prepared, strict=True):
                payload_hex = None
                if stored is not None:
                    data, digest = stored
                    payload_hex = digest.hex()
                    payload_rows.setdefault(digest, data)
                if new_run:
                    if run in touched or run in known:
                        raise StoreError(f"run {run!r} already exists", details={"run": run})
                    head = None
                elif run in touched:
                    head = touched[run]
                    if head is None:
                        raise _ended(run)
                elif run in known:
                    head = known[run]
                    if head is None:
                        raise _ended(run)
                else:
                    head = None
                if head is None:
                    entry = build_entry(seq, run, 0, kind, payload_hex, None, ts, meta)
                else:
                    entry = build_entry(seq, run, head[0] + 1, kind, payload_hex, head[1], ts, meta)
                entry_rows.append((seq, run, entry.i, entry.line, leaf_hash(entry.line)))
                touched[run] = None if kind in TERMINAL_KINDS else (entry.i, entry.hash)
                out.append(entry)
                seq += 1
            if payload_rows:
                # Empty data (never canonical JSON) is a redacted payload: stored erased.
                cur.executemany(
                    "INSERT INTO tracelock_payloads (hash, data, redacted) VALUES (%s, %s, %s) "
                    "ON CONFLICT (hash) DO NOTHING",
                    [(digest, data or None, not data) for digest, data in payload_rows.items()],
                )
            cur.executemany(
                "INSERT INTO tracelock_entries (seq, run, i, line, leaf) VALUES (%s, %s, %s, %s, %s)",
                entry_rows,
            )
            self._update_runs(cur, out, set(known))
            cur.execute("UPDATE tracelock_head SET next_seq = %s WHERE id = 1", (seq,))
        return out

    @staticmethod
    def _update_runs(cur: Any, entries: list[Entry], known: set[str]) -> None:
        """One row change per run of the batch (folded as the directory index folds it)."""
        batch = fold_runs(entries)
        inserts = []
        updates = []
        for run, fold in batch.items():
            first, last = fold.first, fold.last
            closed = last.kind in TERMINAL_KINDS
            if run in known:
                updates.append((fold.status, fold.agent, last.ts, last.seq, fold.count, last.hash, closed, run))
            else:
                inserts.append(
                    (run, fold.agent, fold.parent, fold.status or "created",
                     first.ts, last.ts, fold.count, first.seq, last.seq, last.hash, closed)
                )
        if inserts:
            cur.executemany(
                "INSERT INTO tracelock_runs (run, agent, parent, status, started_ts, updated_ts, "
                "entries, first_seq, last_seq, last_hash, closed) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                inserts,
            )
        if updates:
            cur.executemany(
                "UPDATE tracelock_runs SET status = COALESCE(%s, status), agent = COALESCE(agent, %s), "
                "updated_ts = %s, last_seq = %s, entries = entries + %s, last_hash = %s, closed = %s "
                "WHERE run = %s",
                updates,
            )

    def sync(self) -> None:
        """Nothing to do: every append returned after its transaction committed."""
        self._writer_check()

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

    # -- reading -----------------------------------------------------------------------
    def _one(self, query: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        with self._connection("cannot read from") as conn:
            row: tuple[Any, ...] | None = conn.execute(query.encode(), args).fetchone()
            return row

    def _all(self, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._connection("cannot read from") as conn:
            rows: list[tuple[Any, ...]] = conn.execute(query.encode(), args).fetchall()
            return rows

    def size(self) -> int:
        row = self._one("SELECT next_seq FROM tracelock_head WHERE id = 1")
        return 0 if row is None else int(row[0])

    def runs(self, *, limit: int | None = None, status: str | None = None) -> list[RunInfo]:
        query = f"SELECT {_RUN_COLUMNS} FROM tracelock_runs WHERE run <> %s"
        args: list[Any] = [ADMIN_RUN]
        if status is not None:
            query += " AND status = %s"
            args.append(status)
        query += " ORDER BY started_ts DESC, first_seq DESC"
        if limit is not None:
            query += " LIMIT %s"
            args.append(limit)
        return [RunInfo(*row) for row in self._all(query, tuple(args))]

    def run_info(self, run: str) -> RunInfo:
        row = self._one(f"SELECT {_RUN_COLUMNS} FROM tracelock_runs WHERE run = %s", (run,))
        if row is None:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._shown}")
        return RunInfo(*row)

    def entries(self, run: str) -> list[Entry]:
        rows = self._all("SELECT seq, line FROM tracelock_entries WHERE run = %s ORDER BY i", (run,))
        if not rows:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._shown}")
        return [self._parse(seq, line) for seq, line in rows]

    def entry_at(self, seq: int) -> Entry:
        row = self._one("SELECT seq, line FROM tracelock_entries WHERE seq = %s", (seq,))
        if row is None:
            raise StoreError(f"no entry with seq {seq}")
        return self._parse(*row)

    def iter_entries(self, start_seq: int = 0) -> Iterator[Entry]:
        """Entries from ``start_seq`` to the end the journal had when iteration began."""
        end = self.size()
        position = max(0, start_seq)
        while position < end:
            rows = self._all(
                "SELECT seq, line FROM tracelock_entries WHERE seq >= %s AND seq < %s ORDER BY seq",
                (position, min(end, position + _READ_BATCH)),
            )
            for seq, line in rows:
                yield self._parse(seq, line)
            position += _READ_BATCH

    def _parse(self, seq: int, line: bytes) -> Entry:
        try:
            entry = parse_entry(bytes(line))
        except TracelockError as exc:
            raise JournalCorruptError(
                f"entry {seq} in {self._shown} is damaged: {exc.message}", details={"seq": seq}
            ) from None
        if entry.seq != seq:
            raise JournalCorruptError(
                f"the row of entry {seq} in {self._shown} holds entry {entry.seq}", details={"seq": seq}
            )
        return entry

    def payload_state(self, digest: str) -> str:
        row = self._one("SELECT redacted FROM tracelock_payloads WHERE hash = %s", (bytes.fromhex(digest),))
        if row is None:
            return "missing"
        return "redacted" if row[0] else "present"

    def get_payload_bytes(self, digest: str) -> bytes:
        row = self._one(
            "SELECT data, redacted FROM tracelock_payloads WHERE hash = %s", (bytes.fromhex(digest),)
        )
        if row is None:
            raise PayloadMissingError(f"payload {digest} is not in the store", details={"payload": digest})
        if row[1]:
            raise PayloadRedactedError(f"payload {digest} was redacted", details={"payload": digest})
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise JournalCorruptError(
                f"payload {digest} in {self._shown} does not match its hash", details={"payload": digest}
            )
        return data

    def get_payload(self, digest: str) -> Any:
        return orjson.loads(self.get_payload_bytes(digest))

    # -- the Merkle tree: computed from the stored leaf hashes ---------------------------
    def _leaves(self, size: int | None) -> list[bytes]:
        current = self.size()
        if size is None:
            size = current
        if not 0 <= size <= current:
            raise ProofRequestError(
                f"tree size {size} is not between 0 and the current size {current}",
                details={"size": size, "current_size": current},
            )
        rows = self._all("SELECT leaf FROM tracelock_entries WHERE seq < %s ORDER BY seq", (size,))
        return [bytes(leaf) for (leaf,) in rows]

    def tree_size(self) -> int:
        return self.size()

    def tree_root(self, size: int | None = None) -> bytes:
        return root(self._leaves(size))

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]:
        return inclusion_proof_from_leaves(seq, self._leaves(size))

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        leaves = self._leaves(size2)
        if not 0 <= size1 <= len(leaves):
            raise ProofRequestError(
                f"tree size {size1} is not between 0 and {len(leaves)}",
                details={"size": size1, "current_size": len(leaves)},
            )
        return consistency_proof_from_leaves(size1, leaves)

    # -- properties and closing ----------------------------------------------------------
    @property
    def location(self) -> str:
        """The connection string without its password."""
        return self._shown

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def repairs(self) -> list[Repair]:
        return []

    def close(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
