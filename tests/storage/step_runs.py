"""Runs whose steps break the step rule (docs/spec.md 3.9), made of real entries.

A real agent run is recorded by the runtime; its journal is then appended again, entry by
entry, through the store API into another store, with the run's entries changed on the way
as a writer that breaks the rule would change them: a second caller executing the run at the
same time appends a second intent and result of the refund step; a writer that skipped a
number; a result whose intent was never written. Unchanged, the copy verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracelock import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.backend import NO_PAYLOAD, Store
from tracelock.storage.directory import DirectoryStore

RUN = "run-refund"
#: The refund step (an irreversible tool: an ``effect.intent`` then an ``effect.result``).
REFUND_STEP = 4

POLICY = {
    "version": 1,
    "tools": [{"name": "lookup_order"}, {"name": "check_stock"}, {"name": "reserve"}, {"name": "issue_refund"}],
}

kit = Toolkit()


@kit.tool(side_effect="read_only", timeout=None)
def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "paid_cents": 24999}


@kit.tool(side_effect="read_only", timeout=None)
def check_stock(sku: str) -> dict[str, Any]:
    return {"sku": sku, "units": len(sku)}


@kit.tool(side_effect="idempotent", timeout=None)
def reserve(sku: str) -> str:
    return "held:" + sku


@kit.tool(side_effect="irreversible", timeout=None)
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    return {"refunded_cents": amount_cents, "order_id": order_id}


@kit.agent("refund-desk")
def agent(ctx: Any, ticket: dict[str, Any]) -> dict[str, Any]:
    order = ctx.call("lookup_order", order_id=ticket["order"])  # step 0
    stock = ctx.gather(ctx.task("check_stock", sku="KB-42"), ctx.task("check_stock", sku="MS-7"))  # 1, 2
    held = ctx.call("reserve", sku="KB-42")  # 3: intent, result
    refund = ctx.call("issue_refund", order_id=order["order_id"], amount_cents=order["paid_cents"])  # 4
    again = ctx.call("lookup_order", order_id=ticket["order"])  # 5
    return {"stock": stock, "held": held, "refund": refund, "again": again}


class TickClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000

    def __call__(self) -> int:
        self.now += 3
        return self.now


#: One entry of a run as a writer appends it: kind, payload document (NO_PAYLOAD: none), meta.
Item = tuple[str, Any, dict[str, Any] | None]


def record(directory: Path) -> DirectoryStore:
    """A store holding one completed run of the refund agent (read-only handle)."""
    clock = TickClock()
    with DirectoryStore(directory, clock=clock) as store, Runtime(
        store, POLICY, toolkits=(kit,), clock=clock, ids=lambda: RUN
    ) as runtime:
        result = runtime.run(agent, {"order": "A-1001"})
        assert result.status == "completed", result
    return DirectoryStore(directory, read_only=True)


def copy_journal(source: Store, destination: Store, change: Callable[[list[Item]], list[Item]]) -> None:
    """Append every entry of ``source`` to ``destination`` in journal order; the entries of
    :data:`RUN` are appended as ``change`` returns them (all at once, where its first was)."""
    own = [(entry.kind, _document(source, entry.payload), entry.meta) for entry in source.entries(RUN)]
    for entry in source.iter_entries():
        if entry.run != RUN:
            doc = _document(source, entry.payload)
            destination.append(entry.run, entry.kind, payload=doc, meta=entry.meta, durable=False)
        elif entry.i == 0:
            for kind, doc, meta in change(own):
                destination.append(RUN, kind, payload=doc, meta=meta, durable=False, new_run=kind == "run.start")
    destination.sync()


def _document(source: Store, payload: str | None) -> Any:
    return NO_PAYLOAD if payload is None else source.get_payload(payload)


def _step(item: Item) -> int | None:
    doc = item[1]
    return doc.get("step") if isinstance(doc, dict) else None


def unchanged(items: list[Item]) -> list[Item]:
    return list(items)


def racing_second_caller(items: list[Item]) -> list[Item]:
    """A second caller executes the refund step as well: its intent and result follow the
    first caller's (the same intent, the same result: both ran the same code)."""
    intent = next(item for item in items if item[0] == "effect.intent" and _step(item) == REFUND_STEP)
    result = next(item for item in items if item[0] == "effect.result" and _step(item) == REFUND_STEP)
    at = items.index(result) + 1
    return [*items[:at], intent, result, *items[at:]]


def skipped_step(items: list[Item]) -> list[Item]:
    """The steps from the refund on are numbered one higher: step 4 is never recorded."""
    changed: list[Item] = []
    for kind, doc, meta in items:
        if kind.startswith("effect") and isinstance(doc, dict) and doc["step"] >= REFUND_STEP:
            doc = {**doc, "step": doc["step"] + 1}
        changed.append((kind, doc, meta))
    return changed


def result_without_intent(items: list[Item]) -> list[Item]:
    """The refund's result is there, its intent never was."""
    return [item for item in items if not (item[0] == "effect.intent" and _step(item) == REFUND_STEP)]
