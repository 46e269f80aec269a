"""Agent code cannot swallow or move a divergence: the first divergence the context detects is
the verdict, whatever the agent does after it (``except Exception``, ``except BaseException``,
retry loops, async agents), in replay, fork, recovery and the replay gate."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, assert_store_ok, record_of, runtime_at
from tracelock import DivergenceError
from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.replay.gate import replay_all
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.tools import RetryPolicy

POLICY = allow("search", "summarize", "notify", "outer", "inner", {"name": "send", "approval": True})


class Calls(Counter[str]):
    pass


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def runtime(tmp_path: Path, calls: Calls) -> Any:
    handle = runtime_at(tmp_path, POLICY)

    @handle.tool(timeout=None)
    def search(query: str) -> list[str]:
        calls["search"] += 1
        return [query.upper(), query.lower()]

    @handle.tool(timeout=None)
    def summarize(items: list[str]) -> str:
        calls["summarize"] += 1
        return " / ".join(items)

    @handle.tool(timeout=None)
    def notify(text: str) -> bool:
        calls["notify"] += 1
        return True

    @handle.tool(side_effect="irreversible", timeout=None)
    def send(to: str) -> str:
        calls["send"] += 1
        return f"sent to {to}"

    yield handle
    handle.close()


def base(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    found = ctx.call("search", query=task["q"])
    summary = ctx.call("summarize", items=found)
    return {"summary": summary}


def _record(runtime: Runtime) -> str:
    result = runtime.run(base, {"q": "Order"})
    assert result.ok
    return result.run_id


def new_call_swallowed(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    result = base(ctx, task)
    try:
        ctx.call("notify", text="done")
    except Exception:
        result["notified"] = False  # a best-effort notification
    return result


def changed_argument_behind_fallback(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    try:
        found = ctx.call("search", query=task["q"] + "!")
    except Exception:
        found = ctx.call("search", query=task["q"])
    return {"summary": ctx.call("summarize", items=found)}


def swallowed_with_base_exception(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    try:
        found = ctx.call("search", query="something else")
    except BaseException:
        found = ["ORDER", "order"]
    return {"summary": ctx.call("summarize", items=found)}


def retry_loop(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    seen: list[str] = []
    for query in ("first try", "second try", task["q"]):
        try:
            found = ctx.call("search", query=query)
            break
        except BaseException as exc:
            seen.append(type(exc).__name__)
    else:
        found = []
    return {"summary": ctx.call("summarize", items=found), "seen": seen}


def reraised_as_another_error(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    try:
        ctx.call("search", query="other")
    except BaseException as exc:
        raise RuntimeError("wrapped") from exc
    return {}


def test_a_new_call_wrapped_in_except_exception_is_reported_not_matched(runtime: Runtime) -> None:
    run_id = _record(runtime)
    report = runtime.replay(run_id, new_call_swallowed)
    assert not report.matched
    divergence = report.divergence or {}
    assert (divergence["kind"], divergence["step"]) == ("added_effect", 2)
    assert divergence["requested"] == {"kind": "tool", "name": "notify", "args": {"text": "done"}}


def test_a_changed_argument_behind_a_fallback_is_reported_at_its_step_and_field(runtime: Runtime) -> None:
    run_id = _record(runtime)
    report = runtime.replay(run_id, changed_argument_behind_fallback)
    divergence = report.divergence or {}
    assert (divergence["kind"], divergence["step"], divergence["fields"]) == ("changed_effect", 0, ["args"])
    assert [change["path"] for change in divergence["diff"]] == ["/args/query"]


def test_except_base_exception_and_carrying_on_does_not_move_the_verdict(runtime: Runtime) -> None:
    run_id = _record(runtime)
    divergence = runtime.replay(run_id, swallowed_with_base_exception).divergence or {}
    assert (divergence["kind"], divergence["step"]) == ("changed_effect", 0)
    assert divergence["requested"]["args"] == {"query": "something else"}


def test_every_door_after_a_divergence_raises_that_same_divergence(runtime: Runtime) -> None:
    run_id = _record(runtime)
    caught: list[Any] = []

    def probe(ctx: Any, task: dict[str, Any]) -> Any:
        for _ in range(3):
            try:
                ctx.call("search", query="nope")
            except BaseException as exc:
                caught.append(exc)
        for door in (ctx.now, ctx.random, ctx.uuid, lambda: ctx.gather(ctx.task("search", query="Order"))):
            try:
                door()
            except BaseException as exc:
                caught.append(exc)
        return "carried on"

    report = runtime.replay(run_id, probe)
    assert not isinstance(caught[0], Exception)  # `except Exception` cannot catch it
    assert len(caught) == 7
    assert all(getattr(exc, "report", None) == report.divergence for exc in caught)
    assert (report.divergence or {})["step"] == 0


def test_a_retry_loop_around_a_diverging_call_reports_the_first_attempt(runtime: Runtime) -> None:
    run_id = _record(runtime)
    divergence = runtime.replay(run_id, retry_loop).divergence or {}
    assert (divergence["kind"], divergence["step"]) == ("changed_effect", 0)
    assert divergence["requested"]["args"] == {"query": "first try"}


def test_an_agent_raising_another_error_after_a_divergence_still_reports_the_divergence(runtime: Runtime) -> None:
    run_id = _record(runtime)
    report = runtime.replay(run_id, reraised_as_another_error)
    divergence = report.divergence or {}
    assert (divergence["kind"], divergence["step"]) == ("changed_effect", 0)


def test_an_async_agent_cannot_swallow_a_divergence(runtime: Runtime) -> None:
    run_id = _record(runtime)

    async def swallowing(ctx: Any, task: dict[str, Any]) -> Any:
        try:
            found = await ctx.call("search", query="changed")
        except Exception:
            found = await ctx.call("search", query=task["q"])
        return {"summary": await ctx.call("summarize", items=found)}

    divergence = runtime.replay(run_id, swallowing).divergence or {}
    assert (divergence["kind"], divergence["step"], divergence["fields"]) == ("changed_effect", 0, ["args"])


def test_concurrent_coroutines_cannot_swallow_a_divergence(tmp_path: Path) -> None:
    # Strict mode refuses asyncio.gather; this is about the verdict when it gets through.
    with runtime_at(tmp_path, POLICY, strict=False) as runtime:

        @runtime.tool(timeout=None)
        def search(query: str) -> list[str]:
            return [query]

        async def probe(ctx: Any, query: str) -> Any:
            try:
                return await ctx.call("search", query=query)
            except Exception:
                return []

        async def recorded(ctx: Any, _: Any) -> Any:
            return await asyncio.gather(probe(ctx, "a"), probe(ctx, "b"), probe(ctx, "c"))

        async def changed(ctx: Any, _: Any) -> Any:
            return await asyncio.gather(probe(ctx, "a"), probe(ctx, "B"), probe(ctx, "c"))

        run_id = runtime.run(recorded).run_id
        divergence = runtime.replay(run_id, changed).divergence or {}
        assert (divergence["kind"], divergence["step"], divergence["fields"]) == ("changed_effect", 1, ["args"])


def test_fork_refuses_a_diverging_prefix_even_when_the_agent_swallows_it(runtime: Runtime, calls: Calls) -> None:
    run_id = _record(runtime)
    calls.clear()
    with pytest.raises(DivergenceError) as raised:
        fork_run(runtime, run_id, 2, changed_argument_behind_fallback)
    assert (raised.value.report["step"], raised.value.report["fields"]) == (0, ["args"])
    assert not calls  # nothing ran live after the divergence


def test_the_replay_gate_reports_swallowed_divergences(runtime: Runtime) -> None:
    for query in ("a", "b"):
        runtime.run(base, {"q": query})
    report = replay_all(runtime, agent=new_call_swallowed)
    assert not report.ok and report.checked == 2
    assert [row["divergence"]["kind"] for row in report.diverged] == ["added_effect", "added_effect"]


def approved_agent(ctx: Any, task: dict[str, Any]) -> Any:
    found = ctx.call("search", query=task["q"])
    sent = ctx.call("send", to="ops")
    return {"found": found, "sent": sent}


def test_recovery_does_not_run_past_a_swallowed_divergence(runtime: Runtime, calls: Calls) -> None:
    waiting = runtime.run(approved_agent, {"q": "Order"})
    assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 1)
    runtime.approve(waiting.run_id, 1, by="erin")
    calls.clear()

    def changed(ctx: Any, task: dict[str, Any]) -> Any:
        try:
            found = ctx.call("search", query="changed")
        except Exception:
            found = []
        return {"found": found, "sent": ctx.call("send", to="ops")}

    with pytest.raises(DivergenceError) as raised:
        runtime.resume(waiting.run_id, changed)
    assert (raised.value.report["kind"], raised.value.report["step"]) == ("changed_effect", 0)
    assert calls["send"] == 0  # the irreversible effect after the divergence never ran
    kinds = [entry.kind for entry in runtime.store.entries(waiting.run_id)]
    assert kinds.count("effect") == 1 and "effect.intent" not in kinds and "run.end" not in kinds


def test_a_divergence_inside_a_tool_is_neither_an_execution_error_nor_retried(tmp_path: Path) -> None:
    inner_calls: list[int] = []
    with runtime_at(tmp_path, POLICY) as runtime:
        holder: dict[str, Any] = {}

        @runtime.tool(side_effect="idempotent", timeout=None, retry=RetryPolicy(max_attempts=3))
        def outer(x: int) -> int:
            # A tool that is itself a small agent: it uses the run's context.
            ctx = holder["ctx"]
            value: int = ctx.call("inner", x=holder["inner_x"])
            ctx.call("send", to="ops")
            return value

        @runtime.tool(timeout=None)
        def inner(x: int) -> int:
            inner_calls.append(x)
            return x * 10

        @runtime.tool(side_effect="irreversible", timeout=None)
        def send(to: str) -> str:
            return "sent"

        def agent(ctx: Any, _: Any) -> Any:
            holder["ctx"] = ctx
            return ctx.call("outer", x=1)

        holder["inner_x"] = 1
        waiting = runtime.run(agent)
        assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 2)
        runtime.approve(waiting.run_id, 2, by="erin")
        holder["inner_x"] = 2  # the code inside the tool changed
        inner_calls.clear()
        with pytest.raises(DivergenceError) as raised:
            runtime.resume(waiting.run_id, agent)
        assert (raised.value.report["step"], raised.value.report["fields"]) == (1, ["args"])
        assert inner_calls == []  # not retried, nothing run live
        record = record_of(runtime, waiting.run_id)
        assert 0 in record.pending and 0 not in record.effects  # no EXECUTION_ERROR recorded
        assert_store_ok(runtime.store)
