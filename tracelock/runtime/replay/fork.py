"""Fork: replay a run up to a step from its record, then continue live as a new run.

For "what if this model, this prompt": the new run reuses every recorded result before the
fork point (never re-executing it; each reused effect is copied into the new run, marked
with its origin) and runs live from there with the current code, LLM and tools. The new
run's start records its parent and the fork point.

A fork whose code does not reproduce the recorded prefix is refused, and leaves no run that
recovery would continue: the code is first replayed against the parent with nothing
written, and the child is created only if every effect before the fork point matched. If
the code still diverges in the prefix while the child runs (it depends on something outside
the doors), the child is ended ``aborted`` before the refusal is raised.

A child cut short (a crash while it copied its prefix, or a suspension) is resumed the same
way: every step before the fork point is answered from the parent's record, never live, and
copied into the child's journal if it is not there yet; a copy already there must equal the
parent's step (:func:`child_recording`).

Before anything is written, the fork point must lie within the parent (0 to the number of
steps it recorded) and every irreversible effect the parent recorded at or after it (which
the fork's live part will run again) needs consent: ``allow_irreversible``, or a policy that
sends that effect to a human's approval. :func:`live_effects` lists those effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tracelock.errors import ReplayError, UsageError
from tracelock.runtime.daily.journal import write_spend
from tracelock.runtime.daily.ledger import utc_day
from tracelock.runtime.doors.context import RunContext
from tracelock.runtime.errors import DivergenceError
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.records import RunJournal, RunRecord, load_run
from tracelock.runtime.replay.replay import replay_record
from tracelock.runtime.runs.engine import RunExistsError
from tracelock.runtime.runs.lifecycle import check_transition
from tracelock.runtime.runs.prefix import ForkPrefixError, child_recording

if TYPE_CHECKING:
    from tracelock.runtime.runs.engine import Engine, RunResult

__all__ = [
    "ForkConsentError",
    "ForkPointError",
    "ForkRefusedError",
    "ForkPrefixError",
    "child_recording",
    "fork_plan",
    "fork_run",
    "live_effects",
]

#: Divergences that do not contradict the prefix: the code asks for more than the parent
#: recorded (the fork runs it live) or for less (nothing live runs at all).
_NOT_A_PREFIX_DIVERGENCE = frozenset({"added_effect", "missing_effect", "added_routing"})


class ForkRefusedError(DivergenceError):
    """The fork's code does not reproduce the parent's steps before the fork point.

    ``report`` is the divergence report (step, kind, fields, diff) with ``fork_at`` and,
    when the child had already been created, ``child`` (then ended ``aborted``)."""

    code = "FORK_REFUSED"


class ForkPointError(UsageError):
    """The fork point is not a step of the parent: below 0, or past the step after its last."""

    code = "FORK_POINT_OUT_OF_RANGE"


class ForkConsentError(ReplayError):
    """The fork's live part would run an irreversible effect again, and nobody consented:
    no ``allow_irreversible`` and no approval for it in the policy. ``details["live"]``
    lists the effects the live part would run. Nothing is written."""

    code = "FORK_IRREVERSIBLE_NOT_ALLOWED"


def live_effects(parent: RunRecord, at: int, policy: Policy | None = None) -> list[dict[str, Any]]:
    """The steps the parent recorded at or after ``at``: what a fork at ``at`` runs live
    (when the code requests them again), each ``{"step", "kind", "name", "class",
    "approval"}``; ``approval`` says whether ``policy`` sends it to a human first."""
    recorded = {**parent.pending, **parent.effects}
    return [
        {
            "step": step,
            "kind": recorded[step].get("kind"),
            "name": recorded[step].get("name"),
            "class": recorded[step].get("class"),
            "approval": policy is not None and _needs_approval(policy, recorded[step]),
        }
        for step in sorted(recorded)
        if step >= at
    ]


def fork_bounds(parent: RunRecord) -> int:
    """The last valid fork point: the number of steps the parent recorded (a fork there
    reuses every step)."""
    steps = set(parent.effects) | set(parent.pending)
    return max(steps) + 1 if steps else 0


def _needs_approval(policy: Policy, effect: Mapping[str, Any]) -> bool:
    document = policy.document
    if effect.get("class") == "irreversible" and document.get("approval_for_irreversible"):
        return True
    if effect.get("kind") != "tool":
        return False
    return any(rule.get("name") == effect.get("name") and rule.get("approval") for rule in document.get("tools", []))


def check_fork_point(parent: RunRecord, at: int) -> None:
    last = fork_bounds(parent)
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= last:
        raise ForkPointError(
            f"--at {at} is outside run {parent.run_id}: it recorded {last} step(s), so the fork point is 0 to {last}",
            details={"run": parent.run_id, "at": at, "last": last},
        )


def fork_plan(runtime: Engine, run_id: str, at: int, policy: Policy | None = None) -> list[dict[str, Any]]:
    """What a fork of ``run_id`` at ``at`` would run live (:func:`live_effects`), under
    ``policy`` (by default the parent's); raises :class:`ForkPointError` for a point
    outside the parent. Writes nothing."""
    parent = load_run(runtime.store, run_id)
    check_fork_point(parent, at)
    return live_effects(parent, at, policy if policy is not None else runtime.policy_of(parent))


def fork_run(
    runtime: Engine,
    run_id: str,
    at: int,
    agent: Callable[..., Any] | str | None = None,
    *,
    new_run_id: str | None = None,
    policy: Policy | None = None,
    allow_irreversible: bool = False,
) -> RunResult:
    """``policy`` governs the live part; by default it is the policy the parent was
    recorded under. Raises :class:`ForkPointError` when ``at`` is not within the parent,
    :class:`ForkConsentError` when the live part would run a recorded irreversible effect
    again without ``allow_irreversible`` or the policy's approval, and
    :class:`ForkRefusedError` when the code diverges before ``at``; in all three cases
    before the child exists."""
    parent = load_run(runtime.store, run_id)
    check_fork_point(parent, at)
    policy = policy if policy is not None else runtime.policy_of(parent)
    live = live_effects(parent, at, policy)
    unconsented = [effect for effect in live if effect["class"] == "irreversible" and not effect["approval"]]
    if unconsented and not allow_irreversible:
        names = ", ".join(f"step {effect['step']} {effect['name']}" for effect in unconsented)
        raise ForkConsentError(
            f"fork of run {run_id} at step {at} would run irreversible effects again ({names}); "
            "pass --allow-irreversible (allow_irreversible=True) to consent, or fork under a policy "
            "that requires approval for them",
            details={"run": run_id, "at": at, "live": live},
        )
    func, name = runtime.agent_for(parent, agent)
    divergence = prefix_divergence(runtime, parent, func, at)
    if divergence is not None:
        raise ForkRefusedError(_refusal(divergence, run_id, at, None))
    child = new_run_id or runtime._ids()
    with runtime.owner.owning(child, busy=_child_busy):
        runtime.store.catch_up()
        return _fork_owned(runtime, parent, run_id, at, child, func, name, policy)


def _child_busy(run: str, holder: object) -> RunExistsError:
    return RunExistsError(f"run {run!r} is being started elsewhere: a fork needs a new run id", details={"run": run})


def _fork_owned(
    runtime: Engine,
    parent: RunRecord,
    run_id: str,
    at: int,
    child: str,
    func: Callable[..., Any],
    name: str,
    policy: Policy,
) -> RunResult:
    """Start and drive the fork's child ``child``, under its lease."""
    if runtime._existing(child) is not None:
        # An injected id source (or the caller) repeated an id: appending the child's start
        # to another run's chain would corrupt it.
        raise RunExistsError(f"run {child!r} already exists: a fork needs a new run id", details={"run": child})
    journal = RunJournal(runtime.store, child, strict=runtime.strict_durability)
    seed = str(parent.start.get("seed"))
    provenance = runtime._record_provenance(runtime.provenance.reference(func, runtime.toolkit))
    # A fork child is a run of its day, for its parent's tenant: its live steps meet the
    # daily budgets (the steps it reuses were spent by the parent; RunState.inherited).
    tenant = parent.start.get("tenant") if isinstance(parent.start.get("tenant"), str) else None
    daily = None
    if runtime.environment.ledger is not None:
        runtime._poll_ledger()
        daily = runtime.ledger.open_run(child, utc_day(runtime._clock_ms()), name, tenant)
    start_ms = journal.start(
        {
            "agent": name,
            "entry": f"{func.__module__}:{func.__qualname__}",
            "input": parent.input,
            "policy": policy.hash,
            "seed": seed,
            "parent": {"run": run_id, "step": at},
        }
        | ({"provenance": provenance} if provenance is not None else {})
        | ({"tenant": tenant} if tenant is not None else {})
        | ({"daily": daily.start_document()} if daily is not None else {}),
        agent=name,
        parent=run_id,
    )
    if daily is not None:
        write_spend(runtime.store, runtime.ledger, daily, {})
    runtime._record_policy(policy)
    pipeline = Pipeline(
        runtime.environment,
        run_id=child,
        seed=seed,
        journal=journal,
        recording=parent,
        fork_before=at,
        start_ms=start_ms,
        policy=policy,
        daily=daily,
    )
    ctx = RunContext(pipeline, input=parent.input)
    try:
        result = runtime._drive(ctx, func, name, parent.input, journal, status="running")
    except DivergenceError as exc:
        report = _refusal(exc.report, run_id, at, child)
        check_transition("running", "aborted")
        journal.end(
            "aborted",
            {
                "outcome": None,
                "code": ForkRefusedError.code,
                "output": None,
                "fingerprint": None,
                "error": str(report.get("message")),
            },
        )
        raise ForkRefusedError(report) from None
    result.parent = {"run": run_id, "step": at, "reused_steps": list(ctx.reused)}
    result.seed = seed
    return result


def prefix_divergence(
    runtime: Engine, parent: RunRecord, func: Callable[..., Any], at: int
) -> dict[str, Any] | None:
    """The divergence report of ``func`` replayed against ``parent`` when it contradicts a
    recorded step before ``at``; None when the prefix is reproduced. Writes nothing."""
    report = replay_record(runtime, parent, func)
    divergence = report.divergence
    if divergence is None or divergence.get("kind") in _NOT_A_PREFIX_DIVERGENCE:
        return None
    step = divergence.get("step")
    if step is None:
        # A different output is no prefix step; a different routing decision is, when
        # anything is reused: the reused effects were requested by the agent it chose.
        return divergence if divergence.get("kind") == "changed_routing" and at > 0 else None
    return divergence if isinstance(step, int) and step < at else None


def _refusal(divergence: Mapping[str, Any], parent: str, at: int, child: str | None) -> dict[str, Any]:
    report = dict(divergence)
    report["message"] = (
        f"fork of run {parent} at step {at} refused: the code does not reproduce the recorded "
        f"prefix ({divergence.get('message')})"
    )
    report["fork_at"] = at
    report["parent"] = parent
    if child is not None:
        report["child"] = child
    return report
