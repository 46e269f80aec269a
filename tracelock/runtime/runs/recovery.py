"""Crash recovery: find every unfinished run and continue it from its journal.

Effects with a recorded result are answered from the journal (never re-run). An unfinished
read-only effect is re-run; an unfinished idempotent effect is re-run with the idempotency
key it was first given; an unfinished irreversible effect leaves its run ``blocked``,
naming the step, until an operator resolves it (``resolve``: record what really happened,
or allow one explicit retry) or aborts the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracelock.runtime.errors import (
    AgentDefinitionError,
    DivergenceError,
    RunBusyError,
    RunStateError,
)
from tracelock.runtime.pipeline.codes import OPERATOR_RESOLVED_FAILURE
from tracelock.runtime.records import RunJournal, RunRecord, load_run
from tracelock.runtime.runs.lifecycle import TERMINAL_STATES, check_transition

if TYPE_CHECKING:
    from tracelock.runtime.runs.engine import Engine

__all__ = ["RecoveryReport", "recover_runs", "resolve_step", "abort_run", "resumable"]


@dataclass
class RecoveryReport:
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: What the store cut when it opened (``Repair.to_dict()``): unfinished writes only.
    repairs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def blocked(self) -> list[dict[str, Any]]:
        return [run for run in self.runs if run["to"] == "blocked"]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [run for run in self.runs if run.get("error_kind")]

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run["to"]] = counts.get(run["to"], 0) + 1
        return {"runs": self.runs, "counts": counts, "repairs": self.repairs}


def resumable(record: RunRecord) -> bool:
    """Can recovery continue this run without a human?"""
    if record.status == "running":
        return True
    step = record.waiting_step
    if record.status == "awaiting_approval":
        return step is not None and step in record.approvals
    if record.status == "blocked":
        return step is not None and (step in record.effects or step in record.retries)
    return False


def recover_runs(
    runtime: Engine,
    *,
    progress: Callable[[int, int], None] | None = None,
    skip: Callable[[str], str | None] | None = None,
    force: bool = False,
) -> RecoveryReport:
    """``skip(run)`` names why a run is someone else's to continue (the run queue's
    workers), or None.

    A run still ``running`` may be a run another live process is executing, not one a crash
    left: continuing it here would run its next effects twice. While another runtime is
    present on the store (:func:`tracelock.storage.presence.others_present`), such runs are
    left alone and reported, unless ``force`` (the operator knows those processes run other
    agents, or are stuck). Runs waiting on a human, or approved, are not being executed by
    anyone and are continued as usual. Even with ``force``, a run is continued only once its
    lease is free (its owner let go, or its lease expired): a run a live owner holds is
    reported ``RUN_BUSY`` and left to it."""
    report = RecoveryReport(repairs=[repair.to_dict() for repair in runtime.store.repairs])
    # The statuses decided on are the journal's as it is now: what other processes (or other
    # handles of this one) appended may not be in the shared index yet, which they fill in
    # batches.
    runtime.store.catch_up()
    unfinished = [info for info in runtime.store.runs() if info.status not in TERMINAL_STATES]
    others = [] if force else runtime.store.ownership().others_present(runtime._presence)
    if others:
        kept = []
        for info in unfinished:
            if info.status == "running":
                report.runs.append({
                    "run": info.run, "agent": info.agent, "from": info.status, "to": info.status,
                    "reason": (
                        f"may be executing in a live process ({', '.join(others)}): recover it once that "
                        "process has stopped, or with --force if it runs other agents"
                    ),
                })
            else:
                kept.append(info)
        unfinished = kept
    if skip is not None:
        kept = []
        for info in unfinished:
            why = skip(info.run)
            if why is None:
                kept.append(info)
            else:
                report.runs.append({"run": info.run, "agent": info.agent, "from": info.status, "to": info.status, "reason": why})
        unfinished = kept
    runtime._batch = True
    try:
        _recover_each(runtime, unfinished, report, progress)
    finally:
        runtime._batch = False
        runtime.store.sync()  # every state change and end is durable before it is reported
    return report


def _recover_each(
    runtime: Engine,
    unfinished: list[Any],
    report: RecoveryReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    for position, info in enumerate(reversed(unfinished)):  # oldest first
        record = load_run(runtime.store, info.run)
        row: dict[str, Any] = {"run": info.run, "agent": info.agent, "from": record.status}
        if not resumable(record):
            row.update(to=record.status, waiting_step=record.waiting_step, reason="waits for a human")
        else:
            try:
                result = runtime.resume(info.run, record=record)
                row.update(
                    to=result.status,
                    outcome=result.outcome,
                    code=result.code,
                    waiting_step=result.waiting_step,
                    reason=result.error,
                )
            except (AgentDefinitionError, DivergenceError, RunBusyError) as exc:
                row.update(to=record.status, error_kind=exc.code, reason=exc.message)
        report.runs.append(row)
        if progress is not None:
            progress(position + 1, len(unfinished))


def resolve_step(
    runtime: Engine,
    run_id: str,
    step: int,
    *,
    by: str,
    reason: str,
    result: Any = None,
    failed: str | None = None,
    retry: bool = False,
) -> None:
    """Record what really happened at a blocked step (a result, a failure) or allow one
    explicit re-execution. The run is then resumable by recovery."""
    with runtime.owner.owning(run_id):
        runtime.store.catch_up()
        _resolve_owned(runtime, run_id, step, by=by, reason=reason, result=result, failed=failed, retry=retry)


def _resolve_owned(
    runtime: Engine, run_id: str, step: int, *, by: str, reason: str, result: Any, failed: str | None, retry: bool
) -> None:
    record = load_run(runtime.store, run_id)
    if record.status != "blocked" or record.waiting_step != step:
        raise RunStateError(
            f"run {run_id} is {record.status}; it is not blocked on step {step}"
            + (f" (it waits on step {record.waiting_step})" if record.waiting_step is not None else "")
        )
    if step not in record.pending:
        raise RunStateError(f"run {run_id} has no unfinished effect at step {step}")
    if not by:
        raise RunStateError("a resolution must name who resolved it (by=...)")
    journal = RunJournal(runtime.store, run_id)
    operator = {"by": by, "reason": reason}
    if retry:
        journal.resolution({"step": step, "action": "retry", "by": by, "reason": reason})
        return
    if failed is not None:
        doc = {
            "step": step,
            "outcome": OPERATOR_RESOLVED_FAILURE.outcome.value,
            "code": OPERATOR_RESOLVED_FAILURE.code,
            "phase": "EXECUTE",
            "result": None,
            "error": {"message": failed, "details": {}},
            "attempts": 1,
            "operator": operator,
        }
    else:
        doc = {
            "step": step,
            "outcome": "SUCCESS",
            "code": None,
            "phase": None,
            "result": result,
            "error": None,
            "attempts": 1,
            "operator": operator,
        }
    journal.operator_result(doc)


def abort_run(runtime: Engine, run_id: str, *, by: str, reason: str) -> None:
    """End an unfinished run as ``aborted``; nothing of it runs again (a run another owner
    executes right now is ``RUN_BUSY``: abort it once that owner has let go)."""
    with runtime.owner.owning(run_id):
        runtime.store.catch_up()
        record = load_run(runtime.store, run_id)
        check_transition(record.status, "aborted")
        RunJournal(runtime.store, run_id).end(
            "aborted",
            {
                "outcome": None,
                "code": "RUN_ABORTED",
                "output": None,
                "fingerprint": None,
                "error": reason,
                "by": by,
            },
        )
