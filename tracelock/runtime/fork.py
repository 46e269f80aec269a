"""Fork: replay a run up to a step from its record, then continue live as a new run.

For "what if this model, this prompt": the new run reuses every recorded result before the
fork point (never re-executing it; each reused effect is copied into the new run, marked
with its origin) and runs live from there with the current code, LLM and tools. The new
run's start records its parent and the fork point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracelock.errors import UsageError
from tracelock.runtime.context import RunContext
from tracelock.runtime.policy import Policy
from tracelock.runtime.records import RunJournal, load_run

if TYPE_CHECKING:
    from tracelock.runtime.runtime import RunResult, Runtime

__all__ = ["fork_run"]


def fork_run(
    runtime: Runtime,
    run_id: str,
    at: int,
    agent: Callable[..., Any] | str | None = None,
    *,
    new_run_id: str | None = None,
    policy: Policy | None = None,
) -> RunResult:
    """``policy`` governs the live part; by default it is the policy the parent was
    recorded under."""
    parent = load_run(runtime.store, run_id)
    if at < 0:
        raise UsageError("the fork point is a step number, 0 or more")
    func, name = runtime.agent_for(parent, agent)
    child = new_run_id or runtime._ids()
    journal = RunJournal(runtime.store, child, strict=runtime.strict_durability)
    policy = policy if policy is not None else runtime.policy_of(parent)
    seed = str(parent.start.get("seed"))
    start = journal.start(
        {
            "agent": name,
            "entry": f"{func.__module__}:{func.__qualname__}",
            "input": parent.input,
            "policy": policy.hash,
            "seed": seed,
            "parent": {"run": run_id, "step": at},
        },
        agent=name,
        parent=run_id,
    )
    runtime._record_policy(policy)
    ctx = RunContext(
        runtime,
        run_id=child,
        input=parent.input,
        seed=seed,
        journal=journal,
        recording=parent,
        fork_before=at,
        start_ms=start.ts,
        policy=policy,
    )
    result = runtime._drive(ctx, func, name, parent.input, journal, status="running")
    result.parent = {"run": run_id, "step": at, "reused_steps": list(ctx.reused)}
    return result
