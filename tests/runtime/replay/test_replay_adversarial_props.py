"""Properties: whatever a changed agent does (inserted, removed, changed, reordered calls and
gather members; calls wrapped in ``except Exception``, fallbacks, ``except BaseException``
with or without re-raise; sync or async), replay and fork report the first true difference,
computed here independently from the two programs, at its step and with its fields."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.runtime.runtime_helpers import allow, runtime_at
from tracelock import DivergenceError
from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.runtime import Runtime

# A program is a list of items: ("call", name, x), ("random",) or ("gather", ((name, x), ...)).
Item = tuple[Any, ...]
NAMES = ("a", "b", "c")
WRAPS = ("none", "exception", "fallback", "reraise", "swallow")


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with tempfile.TemporaryDirectory() as tmp:
        handle = runtime_at(Path(tmp), allow(*NAMES), strict=True)
        for name in NAMES:

            def tool(x: int, _name: str = name) -> str:
                # Smaller x finishes later: a gather's recorded completion order then often
                # differs from its argument order, which judging must not depend on.
                time.sleep(0.0005 * (2 - x))
                return f"{_name}{x}"

            handle.tool(name=name, timeout=None, schema={"type": "object"})(tool)
        yield handle
        handle.close()


# -- the programs ---------------------------------------------------------------------------
calls = st.tuples(st.sampled_from(NAMES), st.integers(0, 2))
items = st.one_of(
    st.tuples(st.just("call"), st.sampled_from(NAMES), st.integers(0, 2)),
    st.just(("random",)),
    st.tuples(st.just("gather"), st.lists(calls, min_size=1, max_size=3).map(tuple)),
)
programs = st.lists(items, min_size=1, max_size=4)


@st.composite
def variants(draw: st.DrawFn, program: list[Item], least: int = 0) -> list[Item]:
    changed = list(program)
    for _ in range(draw(st.integers(least, 2))):
        how = draw(st.sampled_from(("insert", "remove", "replace", "swap", "member")))
        if how == "insert" or not changed:
            changed.insert(draw(st.integers(0, len(changed))), draw(items))
            continue
        at = draw(st.integers(0, len(changed) - 1))
        if how == "remove":
            del changed[at]
        elif how == "replace":
            changed[at] = draw(items)
        elif how == "swap" and len(changed) > 1:
            other = draw(st.integers(0, len(changed) - 1))
            changed[at], changed[other] = changed[other], changed[at]
        elif how == "member" and changed[at][0] == "gather":
            members = list(changed[at][1])
            edit = draw(st.sampled_from(("insert", "remove", "replace", "swap")))
            where = draw(st.integers(0, len(members) - 1))
            if edit == "insert":
                members.insert(draw(st.integers(0, len(members))), draw(calls))
            elif edit == "remove" and len(members) > 1:
                del members[where]
            elif edit == "replace":
                members[where] = draw(calls)
            elif edit == "swap":
                other = draw(st.integers(0, len(members) - 1))
                members[where], members[other] = members[other], members[where]
            changed[at] = ("gather", tuple(members))
    return changed


# -- the agents -----------------------------------------------------------------------------
def sync_agent(program: list[Item], wraps: list[str]) -> Callable[[Any, Any], Any]:
    def perform(ctx: Any, item: Item) -> Any:
        if item[0] == "call":
            return ctx.call(item[1], x=item[2])
        if item[0] == "random":
            return ctx.random()
        return ctx.gather(*(ctx.task(name, x=x) for name, x in item[1]))

    def agent(ctx: Any, _: Any) -> Any:
        out = []
        for item, wrap in zip(program, wraps, strict=True):
            if wrap == "none":
                out.append(perform(ctx, item))
            elif wrap == "exception":
                try:
                    out.append(perform(ctx, item))
                except Exception:
                    out.append("caught")
            elif wrap == "fallback":
                try:
                    out.append(perform(ctx, item))
                except Exception:
                    out.append(ctx.call("c", x=9))
            elif wrap == "reraise":
                try:
                    out.append(perform(ctx, item))
                except BaseException:
                    out.append("cleaned up")
                    raise
            else:
                try:
                    out.append(perform(ctx, item))
                except BaseException:
                    out.append("swallowed")
        return out

    return agent


def async_agent(program: list[Item], wraps: list[str]) -> Callable[[Any, Any], Any]:
    async def perform(ctx: Any, item: Item) -> Any:
        if item[0] == "call":
            return await ctx.call(item[1], x=item[2])
        if item[0] == "random":
            return ctx.random()
        return await ctx.gather(*(ctx.task(name, x=x) for name, x in item[1]))

    async def agent(ctx: Any, _: Any) -> Any:
        out = []
        for item, wrap in zip(program, wraps, strict=True):
            if wrap == "none":
                out.append(await perform(ctx, item))
            elif wrap in ("exception", "fallback"):
                try:
                    out.append(await perform(ctx, item))
                except Exception:
                    out.append(await ctx.call("c", x=9) if wrap == "fallback" else "caught")
            elif wrap == "reraise":
                try:
                    out.append(await perform(ctx, item))
                except BaseException:
                    raise
            else:
                try:
                    out.append(await perform(ctx, item))
                except BaseException:
                    out.append("swallowed")
        return out

    return agent


# -- the oracle -----------------------------------------------------------------------------
def describe(member: Item) -> dict[str, Any]:
    if member[0] == "random":
        return {"kind": "random", "name": "random", "args": {}}
    name, x = member[-2], member[-1]
    return {"kind": "tool", "name": name, "args": {"x": x}}


def flatten(program: list[Item]) -> tuple[list[dict[str, Any]], dict[int, int], list[Any]]:
    """The effects step by step, the gathers (first step: member count), the output's shape."""
    effects: list[dict[str, Any]] = []
    gathers: dict[int, int] = {}
    output: list[Any] = []
    for item in program:
        if item[0] == "gather":
            gathers[len(effects)] = len(item[1])
            output.append([f"{name}{x}" for name, x in item[1]])
            effects.extend(describe(("call", name, x)) for name, x in item[1])
        else:
            output.append(("random", len(effects)) if item[0] == "random" else f"{item[1]}{item[2]}")
            effects.append(describe(item))
    return effects, gathers, output


def first_difference(recorded: list[Item], changed: list[Item]) -> dict[str, Any] | None:
    was, gathers, was_output = flatten(recorded)
    _, _, now_output = flatten(changed)

    def compare(step: int, wanted: dict[str, Any]) -> dict[str, Any] | None:
        if step >= len(was):
            return {"kind": "added_effect", "step": step}
        if was[step] == wanted:
            return None
        fields = sorted(key for key in ("args", "kind", "name") if was[step][key] != wanted[key])
        elsewhere = any(other == wanted for index, other in enumerate(was) if index != step)
        return {"kind": "reordered_effect" if elsewhere else "changed_effect", "step": step, "fields": fields}

    step = 0
    for item in changed:
        if item[0] != "gather":
            found = compare(step, describe(item))
            if found:
                return found
            step += 1
            continue
        members = item[1]
        count = gathers.get(step)
        judged = len(members) if count is None else min(count, len(members))
        for offset in range(judged):
            found = compare(step + offset, describe(("call", *members[offset])))
            if found:
                return found
        if count is not None and count != len(members):
            return {"kind": "changed_gather", "step": step + judged}
        step += len(members)
    if step < len(was):
        return {"kind": "missing_effect", "step": step}
    if was_output != now_output:
        return {"kind": "changed_output", "step": None}
    return None


def check(report: dict[str, Any] | None, expected: dict[str, Any] | None) -> None:
    if expected is None:
        assert report is None
        return
    assert report is not None
    assert (report["kind"], report["step"]) == (expected["kind"], expected["step"]), report
    if "fields" in expected:
        assert report["fields"] == expected["fields"], report


# -- the properties -------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_replay_reports_the_first_true_difference(runtime: Runtime, data: st.DataObject) -> None:
    program = data.draw(programs)
    changed = data.draw(variants(program))
    wraps = data.draw(st.lists(st.sampled_from(WRAPS), min_size=len(changed), max_size=len(changed)))
    make = data.draw(st.sampled_from((sync_agent, async_agent)))
    recorded = runtime.run(make(program, ["none"] * len(program)))
    assert recorded.ok
    report = runtime.replay(recorded.run_id, make(changed, wraps))
    check(report.divergence, first_difference(program, changed))
    assert report.matched == (report.divergence is None)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fork_refuses_exactly_the_prefixes_that_differ(runtime: Runtime, data: st.DataObject) -> None:
    program = data.draw(programs)
    changed = data.draw(variants(program, least=1))
    wraps = data.draw(st.lists(st.sampled_from(WRAPS), min_size=len(changed), max_size=len(changed)))
    recorded = runtime.run(sync_agent(program, ["none"] * len(program)))
    steps = len(flatten(program)[0])
    at = data.draw(st.one_of(st.just(steps), st.integers(0, steps)))
    expected = first_difference(program, changed)
    in_prefix = (
        expected is not None
        and expected["kind"] in ("changed_effect", "reordered_effect", "changed_gather")
        and expected["step"] < at
    )
    if not in_prefix:
        forked = fork_run(runtime, recorded.run_id, at, sync_agent(changed, wraps))
        assert forked.ok, forked.error
        return
    with pytest.raises(DivergenceError) as raised:
        fork_run(runtime, recorded.run_id, at, sync_agent(changed, wraps))
    check(raised.value.report, expected)
