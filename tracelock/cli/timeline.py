"""``tracelock run`` writes its run's timeline on stderr as the entries are journaled, in
the words of ``tracelock show`` (stdout stays the result, and pure JSON under ``--json``)."""

from __future__ import annotations

import threading
from typing import Any

import click

from tracelock.cli.describe import Describer
from tracelock.core.canonical import Encoded
from tracelock.core.entry import ADMIN_RUN, Entry
from tracelock.storage.backend import NO_PAYLOAD, Store

__all__ = ["TimelineStore"]


class TimelineStore:
    """A store that describes every run entry appended through it, once it is written.

    The runtime appends with :meth:`append` only; everything else is the wrapped store's."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._describer = Describer()
        # Tools run on worker threads; their entries are described one at a time.
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

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
        entry = self._store.append(run, kind, payload=payload, meta=meta, durable=durable, new_run=new_run)
        self._show(entry, payload)
        return entry

    def _show(self, entry: Entry, payload: Any) -> None:
        if entry.run == ADMIN_RUN:
            return
        with self._lock:
            if type(payload) is Encoded:  # a document the journal serialized already
                payload = payload.value
            summary = self._describer(entry, None if payload is NO_PAYLOAD else payload)
            click.echo(f"{entry.i:>4}  {summary}", err=True)
