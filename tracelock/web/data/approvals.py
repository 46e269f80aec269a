"""The approvals queue: runs waiting for a human at a step, and the decision on one.

A decision is recorded exactly as ``tracelock approve`` / ``tracelock reject`` record it:
:meth:`Runtime.approve` / :meth:`Runtime.reject` on a runtime over the store, which check
that the run waits on that step, that no decision was made yet and that it names who
decided, then journal the ``approval`` entry durably. As with the CLI, the run continues
with ``tracelock resume RUN_ID``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime
from tracelock.storage.backend import Store
from tracelock.storage.open import open_store
from tracelock.web.data.run import check_run_id

__all__ = ["QUEUE_LIMIT", "Waiting", "approval_queue", "decide"]

#: The most waiting runs the queue lists (oldest first within them).
QUEUE_LIMIT = 500


@dataclass(frozen=True)
class Waiting:
    """A run waiting for a decision on one step."""

    run: str
    agent: str | None
    started_ts: int
    waiting_since: int
    step: int | None
    reason: str
    pending: dict[str, Any] | None
    #: The decision already recorded on the step (the run waits for ``tracelock resume``).
    decision: dict[str, Any] | None


def approval_queue(store: Store) -> list[Waiting]:
    """Runs in ``awaiting_approval``, the longest-waiting first (a run whose step was
    decided stays in that state until it is resumed: ``decision`` says so)."""
    waiting = []
    for info in store.runs(limit=QUEUE_LIMIT, status="awaiting_approval"):
        record = load_run(store, info.run)
        step = record.waiting_step
        state = record.states[-1] if record.states else {}
        waiting.append(
            Waiting(
                run=info.run,
                agent=info.agent,
                started_ts=info.started_ts,
                waiting_since=info.updated_ts,
                step=step,
                reason=str(state.get("reason") or ""),
                pending=record.pending.get(step) if step is not None else None,
                decision=record.approvals.get(step) if step is not None else None,
            )
        )
    waiting.sort(key=lambda item: (item.waiting_since, item.run))
    return waiting


def decide(location: str | os.PathLike[str], run_id: str, step: int, *, approve: bool, by: str, reason: str) -> None:
    """Record the decision as the CLI does (a runtime over a writable store handle, closed
    at once: the UI never keeps the writer lock)."""
    check_run_id(run_id)
    store = open_store(location, create=False)
    try:
        runtime = Runtime(store, None)
        try:
            if approve:
                runtime.approve(run_id, step, by=by, reason=reason)
            else:
                runtime.reject(run_id, step, by=by, reason=reason)
        finally:
            runtime.close()
    finally:
        store.close()
