"""The daily budgets' ledger in the store (see :mod:`tracelock.runtime.daily.ledger`).

Each run under daily budgets writes a ``budget.spend`` entry of the ``tracelock:admin``
chain when it starts (counting it in its day), when it waits (approval, blocked) and when
it ends, with its cumulative counters: ``{"v": 1, "run", "day", "agent", "tenant",
"usage": {"runs", "llm_calls", "tokens", "cost_micro_usd", "effects"}}``. A runtime folds
them into its :class:`DailyLedger` when it opens and, paced, before a run starts and
before each step it authorizes under daily budgets; it reads only what was appended since
its last look.
"""

from __future__ import annotations

from typing import Any

from tracelock.core.entry import ADMIN_RUN
from tracelock.runtime.admin_feed import admin_entries_after
from tracelock.runtime.daily.ledger import SPEND_KIND, DailyLedger, RunDaily
from tracelock.storage.backend import Store

__all__ = ["refresh_ledger", "write_spend"]


def refresh_ledger(store: Store, ledger: DailyLedger) -> None:
    """Fold the admin chain's spend entries the ledger has not seen yet into it."""
    for entry in admin_entries_after(store, ledger.seen):
        doc: Any = None
        if entry.kind == SPEND_KIND and entry.payload is not None:
            doc = store.get_payload(entry.payload)
        ledger.apply(entry.seq, entry.kind, doc if isinstance(doc, dict) else {})


def write_spend(store: Store, ledger: DailyLedger, daily: RunDaily, usage: dict[str, int]) -> None:
    """Journal a run's cumulative counters in the admin chain (not durable by itself: the
    run's next durable entry, its state change or end, covers it) and note them."""
    counters = {"runs": 1} | {name: usage.get(name, 0) for name in ("llm_calls", "tokens", "cost_micro_usd", "effects")}
    doc = {
        "v": 1,
        "run": daily.run_id,
        "day": daily.day,
        "agent": daily.agent,
        "tenant": daily.tenant,
        "usage": counters,
    }
    store.append(ADMIN_RUN, SPEND_KIND, payload=doc, durable=False)
    ledger.note(daily.run_id, daily.day, daily.agent, daily.tenant, counters)
