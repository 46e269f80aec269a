"""The sessions of a PostgreSQL store handle: driver errors translated into the store's,
the pooled connections reads run on (a read whose connection died is tried once more),
and the checks every call makes first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from tracelock.core.entry import Entry, parse_entry
from tracelock.errors import TracelockError
from tracelock.storage.backend import Repair
from tracelock.storage.errors import (
    DurabilityError,
    JournalCorruptError,
    StoreClosedError,
    StoreConnectionError,
    StoreConnectionLostError,
    StoreError,
    StorePermissionError,
    StoreReadOnlyError,
)
from tracelock.storage.postgres.location import scrub
from tracelock.storage.postgres.state import PostgresState

__all__ = ["PostgresAccess"]


class _ConnectionLost(StoreConnectionError):
    """A read's pooled connection died under it (same code: the caller sees a connection
    failure if the retry fails too)."""


class PostgresAccess(PostgresState):
    """Sessions, error translation and the one-row and all-rows reads the other parts use."""

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
        conn = None
        try:
            with self._pool.connection() as conn:
                yield conn
        except TracelockError:
            raise
        except psycopg.Error as exc:
            error = self._translate(exc, doing)
            if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                if writing:
                    # The commit's outcome is unknown: never retried, and the handle is done.
                    kind = StoreConnectionLostError if conn is not None and conn.broken else DurabilityError
                    failure = kind(error.message, details=error.details)
                    self._failed = failure
                    raise failure from None
                # A lost connection (a server restart): the pool replaces its dead
                # connections, and a read is tried once more (_one, _all).
                self._refresh_pool()
                raise _ConnectionLost(error.message, details=error.details) from None
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


    def _refresh_pool(self) -> None:
        """Replace the pool's dead connections (after a server restart), so that the next
        call gets a live one; a server that is still down is reported by that call."""
        with suppress(Exception):  # the next connection attempt reports the real error
            self._pool.check()

    # -- reading -----------------------------------------------------------------------
    def _one(self, query: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        for attempt in (1, 2):
            try:
                with self._connection("cannot read from") as conn:
                    row: tuple[Any, ...] | None = conn.execute(query.encode(), args).fetchone()
                    return row
            except StoreConnectionError as exc:
                if attempt == 2 or not self._lost(exc):
                    raise
        raise AssertionError("unreachable")

    def _all(self, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        for attempt in (1, 2):
            try:
                with self._connection("cannot read from") as conn:
                    rows: list[tuple[Any, ...]] = conn.execute(query.encode(), args).fetchall()
                    return rows
            except StoreConnectionError as exc:
                if attempt == 2 or not self._lost(exc):
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def _lost(exc: StoreConnectionError) -> bool:
        """A pooled connection that died (a server restart): a read is retried once on a
        fresh one. (Not a pool timeout: the server is down, and waiting again would not help.)"""
        return isinstance(exc, _ConnectionLost)

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

    @property
    def backend(self) -> str:
        return "postgresql"

    @property
    def damage(self) -> TracelockError | None:
        """Nothing: the server keeps the journal whole or refuses it."""
        return None
