"""The admin chain's entries a reader has not seen yet, for the runtime's caches of it (the
emergency stops, the daily budget ledger).

The first look reads the chain (``Store.entries``); later ones read only what the store
appended after the last entry seen (``Store.iter_entries``), so a chain that grows with every
run (``budget.spend``) does not make each look cost its whole length.
"""

from __future__ import annotations

from collections.abc import Iterator

from tracelock.core.entry import ADMIN_RUN, Entry
from tracelock.storage.backend import Store
from tracelock.storage.errors import RunNotFoundError

__all__ = ["admin_entries_after"]


def admin_entries_after(store: Store, seen: int) -> Iterator[Entry]:
    """The admin chain's entries with ``seq > seen`` (``seen`` -1: from the start)."""
    try:
        info = store.run_info(ADMIN_RUN)
    except RunNotFoundError:
        return
    if info.last_seq <= seen:
        return
    entries = store.entries(ADMIN_RUN) if seen < 0 else (e for e in store.iter_entries(seen + 1) if e.run == ADMIN_RUN)
    for entry in entries:
        if entry.seq > seen:
            yield entry
