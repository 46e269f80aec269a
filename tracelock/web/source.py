"""How the UI reaches its store: a fresh read-only handle per request, closed after it.

A directory store handle sees what was appended before it opened, not what another process
appends later; opening per request is what makes new runs appear. It also means the UI
never keeps the store's writer lock (a reader takes it while it is free): an agent started
beside the UI is blocked only during a request's few milliseconds. One request uses the
store at a time (the handles of one process would contend for that lock themselves).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tracelock.storage.backend import Store
from tracelock.storage.open import backend_of, open_store, shown_location

__all__ = ["StoreSource"]


class StoreSource:
    """Opens the store at ``location`` for one request at a time."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = os.fspath(location)
        self._lock = threading.Lock()

    @property
    def backend(self) -> str:
        return backend_of(self.location)

    @property
    def shown(self) -> str:
        """The location as the pages print it (a connection string without its password)."""
        return shown_location(self.location)

    @contextmanager
    def reading(self) -> Iterator[Store]:
        """A read-only handle, closed when the block ends."""
        with self._lock:
            store = open_store(self.location, create=False, read_only=True)
            try:
                yield store
            finally:
                store.close()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No read handle is open while the block runs (a decision opens a writer)."""
        with self._lock:
            yield
