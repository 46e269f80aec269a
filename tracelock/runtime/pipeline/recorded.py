"""Answering steps from a recording (replay, resume, a fork's prefix) and judging requests
against it.

A request matches its recorded step when kind, name and canonical arguments are equal;
the first request that does not is the divergence, kept by the run's state as its verdict
and raised as :class:`Diverged` (which ``except Exception`` does not catch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import orjson

from tracelock.core.canonical import CanonicalError, dumps, loads
from tracelock.core.jsondiff import diff
from tracelock.runtime.errors import Diverged, Suspend
from tracelock.runtime.pipeline.phases import count_recorded, respond
from tracelock.runtime.pipeline.request import StepRequest
from tracelock.runtime.pipeline.state import RunState

__all__ = ["answer", "check_pending", "judge", "judge_gather", "added", "diverge", "describe", "matches"]

_SORT_KEYS = orjson.OPT_SORT_KEYS


def diverge(state: RunState, report: dict[str, Any]) -> NoReturn:
    """Keep the first divergence (the verdict) and unwind the agent with it."""
    with state.lock:
        if state.divergence is None:
            state.divergence = report
        first = state.divergence
    raise Diverged(first)


def describe(request: StepRequest) -> dict[str, Any]:
    """What a request is compared on: kind, name and arguments (a proposal's action and
    arguments)."""
    if request.kind == "proposal":
        raw = request.args
        if isinstance(raw, (str, bytes)):
            try:
                raw = loads(raw)
            except CanonicalError:
                return {"kind": "proposal", "name": "", "args": None}
        if isinstance(raw, dict):
            return {"kind": "proposal", "name": raw.get("action"), "args": raw.get("args")}
        return {"kind": "proposal", "name": "", "args": None}
    return {"kind": request.kind, "name": request.name, "args": request.args}


def matches(request: StepRequest, recorded: Mapping[str, Any]) -> bool:
    """Whether ``request`` is the recorded step's request: same kind, name and canonical
    arguments. The request's canonical bytes are compared with the recorded arguments'
    sorted orjson text first (equal texts are equal JSON values, hence equal canonical
    forms), and only when those differ with their canonical form."""
    if request.kind == "proposal":
        return _same_json(describe(request), {key: recorded.get(key) for key in ("kind", "name", "args")})
    canonical = request.canonical
    if canonical is None or recorded.get("kind") != request.kind or recorded.get("name") != request.name:
        return False
    was = recorded.get("args")
    try:
        if orjson.dumps(was, option=_SORT_KEYS) == canonical:
            return True
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        return dumps(was) == canonical
    except CanonicalError:
        return False


def mismatch(state: RunState, step: int, request: StepRequest, recorded: Mapping[str, Any]) -> None:
    """Diverge unless ``request`` matches the recorded step."""
    if matches(request, recorded):
        return
    requested = describe(request)
    was = {key: recorded.get(key) for key in ("kind", "name", "args")}
    changes = diff(was, requested)
    fields = sorted({change["path"].split("/")[1] for change in changes})
    kind = "changed_effect"
    elsewhere = _recorded_step_like(state, requested, step)
    if elsewhere is not None:
        kind = "reordered_effect"
    diverge(
        state,
        {
            "message": f"step {step}: requested {requested['kind']} {requested['name']!r} "
            f"does not match the recorded {was['kind']} {was['name']!r} "
            f"(differs in {', '.join(fields)})"
            + (f"; it was recorded at step {elsewhere}" if elsewhere is not None else ""),
            "step": step,
            "kind": kind,
            "fields": fields,
            "diff": changes,
            "requested": requested,
            "recorded": was,
            "recorded_at": elsewhere,
        },
    )


def _recorded_step_like(state: RunState, requested: Mapping[str, Any], step: int) -> int | None:
    recording = state.recording
    if recording is None:
        return None
    try:
        wanted = dumps(requested)
        for other, doc in sorted(recording.effects.items()):
            if other != step and dumps({key: doc.get(key) for key in ("kind", "name", "args")}) == wanted:
                return other
    except CanonicalError:
        return None
    return None


def answer(state: RunState, step: int, request: StepRequest, recorded: dict[str, Any]) -> Any:
    """RESPOND with the recorded outcome of ``step`` (the request must match it). A fork
    child copies the parent's step into its own journal, marked with its origin."""
    mismatch(state, step, request, recorded)
    prefix = state.prefix
    # A fork child's step from its parent counts in the run's budgets, not in its daily spend.
    count_recorded(state, recorded, inherited=prefix is not None and step < prefix.before)
    state.effects[step] = recorded
    args_hash = request.args_hash
    if args_hash is not None:
        # Equal canonical arguments: the recorded ones hash the same, no need to hash them.
        state.hashes[step] = (args_hash, None)
    journal = state.journal
    if prefix is not None and step < prefix.before and journal is not None and not state.replay_only:
        if step not in prefix.copied:
            reused = dict(recorded)
            reused["reused_from"] = {"run": prefix.run, "step": step}
            journal.effect(reused)
        state.reused.append(step)
    return respond(step, recorded)


def check_pending(state: RunState, step: int, request: StepRequest, intent: dict[str, Any]) -> str | None:
    """An intent without a result: the process died while the effect ran. Returns the
    idempotency key to run it again with; an irreversible effect suspends the run
    ``blocked`` unless an operator allowed one retry."""
    mismatch(state, step, request, intent)
    recording = state.recording
    retries = recording.retries if recording is not None else set()
    if intent.get("class") == "irreversible" and step not in retries:
        raise Suspend(
            "blocked",
            step,
            f"irreversible effect {intent.get('name')!r} at step {step} may or may not "
            "have happened; an operator must resolve it",
        )
    key = intent.get("idempotency_key")
    return key if isinstance(key, str) else None


def added(state: RunState, step: int, request: StepRequest) -> NoReturn:
    diverge(
        state,
        {
            "message": f"step {step}: the code requests an effect the recording does not have",
            "step": step,
            "kind": "added_effect",
            "requested": describe(request),
            "recorded": None,
        },
    )


def judge(state: RunState, step: int, request: StepRequest) -> None:
    """Raise the divergence that answering ``step`` from the recording would raise,
    without answering it."""
    recording = state.recording
    if recording is not None and state.is_usable(step):
        if step in recording.effects:
            mismatch(state, step, request, recording.effects[step])
            return
        if step in recording.pending and not state.replay_only:
            mismatch(state, step, request, recording.pending[step])
            return
    if state.replay_only:
        added(state, step, request)


def judge_gather(state: RunState, first: int, requests: list[StepRequest]) -> None:
    """Compare a gather's members with the recording in argument order (never in the
    recorded completion order, which depends on timing), then its member count."""
    recording = state.recording
    assert recording is not None
    order = recording.gather_orders.get(first) if state.is_usable(first) else None
    judged = len(requests) if order is None else min(len(requests), len(order))
    for offset in range(judged):
        step = first + offset
        if not state.is_usable(step):
            return  # a fork's live part: nothing to match
        judge(state, step, requests[offset])
    if order is None or sorted(order) == list(range(first, first + len(requests))):
        return
    if not state.is_usable(first + judged):
        return  # the counts differ only in a fork's live part
    members = sorted(order)
    was = [
        {key: recording.effects.get(step, {}).get(key) for key in ("kind", "name", "args")}
        for step in members
    ]
    now = [describe(request) for request in requests]
    diverge(
        state,
        {
            "message": f"step {first + judged}: the gather at step {first} has "
            f"{len(requests)} members; the recorded one has {len(order)} members",
            "step": first + judged,
            "kind": "changed_gather",
            "gather": first,
            "fields": ["members"],
            "diff": diff({"members": was}, {"members": now}),
            "requested": {"members": now},
            "recorded": {"members": was},
        },
    )


def _same_json(a: Any, b: Any) -> bool:
    """Whether two values have the same canonical JSON form (equal sorted orjson texts
    first, then the canonical forms)."""
    try:
        if orjson.dumps(a, option=_SORT_KEYS) == orjson.dumps(b, option=_SORT_KEYS):
            return True
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        return dumps(a) == dumps(b)
    except CanonicalError:
        return False
