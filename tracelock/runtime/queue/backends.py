"""The queue backend of a store handle: one per handle, since the handle's appends are fenced
by that backend's leases (``store.append_guard``)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

from tracelock.storage.backend import Store
from tracelock.storage.queue_backend import QueueBackend, QueueError

__all__ = ["close_queue", "existing_queue", "queue_for"]

_LOCK = threading.Lock()
_BACKENDS: weakref.WeakKeyDictionary[Any, QueueBackend] = weakref.WeakKeyDictionary()


def _open(store: Store, clock_ms: Callable[[], int] | None) -> QueueBackend:
    # Each backend module is imported only for a store of its kind (psycopg is optional).
    from tracelock.storage.directory import DirectoryStore

    if isinstance(store, DirectoryStore):
        from tracelock.storage.queue_dir import DirectoryQueue

        return DirectoryQueue(store.path, store=store, clock_ms=clock_ms)
    from tracelock.storage.postgres.location import is_postgres_location

    url = getattr(store, "_url", None)
    if isinstance(url, str) and is_postgres_location(url):
        from tracelock.storage.postgres.queue import PostgresQueue

        return PostgresQueue(store)  # type: ignore[arg-type]
    raise QueueError(
        f"the store at {store.location} has no run queue: the queue needs the directory store or PostgreSQL"
    )


def queue_for(store: Store, *, clock_ms: Callable[[], int] | None = None) -> QueueBackend:
    """The queue backend of ``store`` (made on first use, then the same object)."""
    with _LOCK:
        backend = _BACKENDS.get(store)
        if backend is None:
            backend = _open(store, clock_ms)
            _BACKENDS[store] = backend
        return backend


def existing_queue(store: Store) -> QueueBackend | None:
    """The queue backend of ``store`` if the store has a queue (someone submitted to it),
    else None: a store nobody queued to is not given queue tables. (The queue's file or
    tables may exist without a queued run: they also hold the run leases.)"""
    with _LOCK:
        backend = _BACKENDS.get(store)
    if backend is not None:
        return backend
    from tracelock.storage.directory import DirectoryStore

    if isinstance(store, DirectoryStore):
        import sqlite3

        from tracelock.storage.queue_dir import QUEUE_FILE

        path = store.path / QUEUE_FILE
        if not path.exists():
            return None
        try:
            with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as conn:
                if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone() is None:
                    return None
                if conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None:
                    return None
        except sqlite3.Error as exc:
            raise QueueError(f"cannot read the queue {path}: {exc}") from None
    elif getattr(store, "_url", None) is not None:
        row = store._one(  # type: ignore[attr-defined]
            "SELECT to_regclass('tracelock_queue_runs') IS NOT NULL "
            "AND EXISTS (SELECT 1 FROM pg_class WHERE relname = 'tracelock_queue_runs')"
        )
        if not (row and row[0]):
            return None
        found = store._one("SELECT EXISTS (SELECT 1 FROM tracelock_queue_runs)")  # type: ignore[attr-defined]
        if not (found and found[0]):
            return None
    else:
        return None
    return queue_for(store)


def close_queue(store: Store) -> None:
    """Close the queue backend of ``store``, if one was made (before the store closes)."""
    with _LOCK:
        backend = _BACKENDS.pop(store, None)
    if backend is not None:
        backend.close()
