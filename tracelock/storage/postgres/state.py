"""What every part of a PostgreSQL store handle shares: the handle's state, declared once
and set by :class:`tracelock.storage.postgres.store.PostgresStore`.

The handle is one object built from one class per concern, each in its own module and
each using only the ones below it: access (sessions, errors, the read helpers) < reads
(runs, entries, payloads, the raw rows verification reads) < tree (the Merkle node table
and proofs) < locks (advisory locks, the checkpoint table) < store (open, append, commit,
ownership, queue, close). Methods are plain methods of the one handle: no call goes
through a collaborator on the append path."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracelock.storage.errors import StoreError
from tracelock.storage.ownership import AppendGuard
from tracelock.storage.postgres.connection import CommitWatch
from tracelock.storage.postgres.group_commit import CommitQueue
from tracelock.storage.postgres.ownership import PostgresOwnership
from tracelock.storage.postgres.queue import PostgresQueue

if TYPE_CHECKING:
    import psycopg_pool

__all__ = ["PostgresState"]


class PostgresState:
    """The state of a PostgreSQL store handle, declared for every part that uses it."""

    #: The location without its password, as messages show it.
    _shown: str
    #: The location as libpq gets it (keepalives and timeouts added).
    _url: str
    _statement_timeout: float
    #: The commit leader's session and its watch.
    _writer: Any
    _watch: CommitWatch
    _read_only: bool
    _clock: Callable[[], int]
    _closed: bool
    #: Set when the handle failed and accepts no more work.
    _failed: StoreError | None
    _state_lock: threading.Lock
    _queue: CommitQueue
    _tip: int | None
    _alone: bool
    _heads: dict[str, tuple[int, str] | None]
    append_guard: AppendGuard | None
    _ownership: PostgresOwnership | None
    _run_queue: PostgresQueue | None
    #: The psycopg module (imported when the store opens: the driver is optional).
    _psycopg: Any
    _pool: psycopg_pool.ConnectionPool[Any]
    store_id: str
