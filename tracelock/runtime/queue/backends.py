"""The run queue of a store handle (``Store.queue()``): one per handle, since the handle's
appends are fenced by that queue's leases (the run's leases, tracelock.storage.ownership).
Thin functions over the store's own, kept for the callers that name them."""

from __future__ import annotations

from collections.abc import Callable

from tracelock.storage.backend import Store
from tracelock.storage.queue_backend import QueueBackend

__all__ = ["close_queue", "existing_queue", "queue_for"]


def queue_for(store: Store, *, clock_ms: Callable[[], int] | None = None) -> QueueBackend:
    """The queue backend of ``store`` (made on first use, then the same object)."""
    return store.queue(clock_ms=clock_ms)


def existing_queue(store: Store) -> QueueBackend | None:
    """The queue backend of ``store`` if the store has a queue (someone submitted to it),
    else None: a store nobody queued to is not given queue tables."""
    return store.queue() if store.has_queue() else None


def close_queue(store: Store) -> None:
    """Close the queue backend of ``store``, if one was made (before the store closes)."""
    store.close_queue()
