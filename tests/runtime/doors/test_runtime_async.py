"""Async agents (``async def agent(ctx, input)`` awaiting the doors) and async tools."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import Sleeps, allow, assert_store_ok, record_of, runtime_at
from tracelock.core.fingerprint import effect_projection
from tracelock.runtime.errors import StepError
from tracelock.runtime.runtime import Runtime

POLICY = allow("add", "double", "double_unbounded", "explode", llm={"allow": True, "models": ["m"]})


def register(runtime: Runtime) -> None:
    @runtime.tool()
    def add(a: int, b: int) -> int:
        return a + b

    @runtime.tool()
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    @runtime.tool(timeout=None)
    async def double_unbounded(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    @runtime.tool()
    async def explode() -> None:
        await asyncio.sleep(0)
        raise ValueError("async failure")


async def async_agent(ctx: Any, numbers: list[int]) -> Any:
    assert ctx.input == numbers and ctx.run_id.startswith("run-")
    total = await ctx.call("add", a=numbers[0], b=numbers[1])
    doubled = await ctx.call("double", n=total)
    unbounded = await ctx.call("double_unbounded", n=total)
    await ctx.sleep(1.5)
    both = await ctx.gather(ctx.task("double", n=1), ctx.task("add", a=1, b=1))
    plan = await ctx.llm(model="m", prompt="p", max_tokens=4)
    try:
        await ctx.call("explode")
    except StepError as failure:
        code = failure.step_code
    return {
        "total": total,
        "doubled": doubled,
        "unbounded": unbounded,
        "both": both,
        "plan": plan["content"],
        "code": code,
        "draw": ctx.random(),
        "id": str(ctx.uuid()),
        "year": ctx.now().year,
    }


def test_an_async_agent_uses_every_door(tmp_path: Path) -> None:
    sleeps = Sleeps()
    with runtime_at(tmp_path, POLICY, sleep=sleeps, llm=lambda r: {"content": "ok"}) as runtime:
        register(runtime)
        result = runtime.run(async_agent, [2, 3])
        assert result.ok, result.error
        output = result.output
        assert (output["total"], output["doubled"], output["unbounded"], output["both"]) == (5, 10, 10, [2, 2])
        assert (output["plan"], output["code"]) == ("ok", "TOOL_RAISED")
        assert sleeps.calls == [1.5]
        kinds = [effect["kind"] for effect in result.effects]
        assert kinds == ["tool", "tool", "tool", "sleep", "tool", "tool", "llm", "tool", "random", "uuid", "clock.now"]
        assert record_of(runtime, result.run_id).effects[3]["args"] == {"ms": 1500}
        report = runtime.replay(result.run_id, async_agent)
        assert report.matched, report.divergence
        assert sleeps.calls == [1.5]  # replay does not sleep
        assert_store_ok(runtime.store)


def test_an_async_agent_records_the_same_effects_as_the_sync_one(tmp_path: Path) -> None:
    async def async_version(ctx: Any, n: int) -> Any:
        return [await ctx.call("double", n=n), await ctx.call("add", a=n, b=1)]

    def sync_version(ctx: Any, n: int) -> Any:
        return [ctx.call("double", n=n), ctx.call("add", a=n, b=1)]

    outputs, projections = [], []
    for index, agent in enumerate((async_version, sync_version)):
        with runtime_at(tmp_path, POLICY, store=f"s{index}") as runtime:
            register(runtime)
            result = runtime.run(agent, 4)
            outputs.append(result.output)
            projections.append([effect_projection(effect) for effect in result.effects])
    assert outputs == [[8, 5], [8, 5]]
    assert projections[0] == projections[1]


@pytest.mark.parametrize("tool", ["double", "double_unbounded"])
def test_async_tools_run_for_sync_agents(tmp_path: Path, tool: str) -> None:
    with runtime_at(tmp_path, POLICY) as runtime:
        register(runtime)
        assert runtime.tools[tool].is_async
        result = runtime.run(lambda ctx, n: ctx.call(tool, n=n), 21)
        assert result.output == 42


@pytest.mark.parametrize("tool", ["double", "double_unbounded"])
def test_async_tools_run_for_async_agents(tmp_path: Path, tool: str) -> None:
    async def agent(ctx: Any, n: int) -> int:
        value: int = await ctx.call(tool, n=n)
        return value

    with runtime_at(tmp_path, POLICY) as runtime:
        register(runtime)
        result = runtime.run(agent, 21)
        assert result.ok, result.error
        assert result.output == 42


def test_an_uncaught_step_error_ends_an_async_run(tmp_path: Path) -> None:
    async def agent(ctx: Any, _: Any) -> Any:
        await ctx.call("add", a=1, b=1)
        return await ctx.call("explode")

    with runtime_at(tmp_path, POLICY) as runtime:
        register(runtime)
        result = runtime.run(agent)
        assert (result.status, result.outcome, result.code) == ("failed", "EXECUTION_ERROR", "TOOL_RAISED")
        effect = record_of(runtime, result.run_id).effects[1]
        assert (effect["phase"], effect["error"]["details"]["exception"]) == ("EXECUTE", "ValueError")


def test_an_async_agent_bug_ends_with_agent_raised(tmp_path: Path) -> None:
    async def agent(ctx: Any, _: Any) -> Any:
        await ctx.call("add", a=1, b=1)
        raise ZeroDivisionError("oops")

    with runtime_at(tmp_path, POLICY) as runtime:
        register(runtime)
        result = runtime.run(agent)
        assert (result.outcome, result.code) == ("EXECUTION_ERROR", "AGENT_RAISED")
        assert result.error == "ZeroDivisionError: oops"
        assert_store_ok(runtime.store)


def test_an_async_agent_can_wait_for_approval_and_resume(tmp_path: Path) -> None:
    ran: list[int] = []
    policy = allow({"name": "ship", "approval": True})
    with runtime_at(tmp_path, policy) as runtime:

        @runtime.tool(side_effect="irreversible")
        async def ship(box: int) -> str:
            ran.append(box)
            return f"shipped {box}"

        async def agent(ctx: Any, box: int) -> Any:
            return await ctx.call("ship", box=box)

        waiting = runtime.run(agent, 7)
        assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 0)
        runtime.approve(waiting.run_id, 0, by="dana")
        done = runtime.resume(waiting.run_id, agent)
        assert (done.status, done.output) == ("completed", "shipped 7")
        assert ran == [7]
