"""Tool timeouts without a hand-off: an async tool runs on the caller's thread, its deadline
enforced by the caller's own event loop; a sync tool with ``timeout_mode="thread"`` still
returns TOOL_TIMEOUT at the deadline while it keeps running elsewhere."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, effect_of, runtime_at
from tracelock.runtime.errors import StepError
from tracelock.runtime.runtime import Runtime

POLICY = allow("where_async", "stalls", "spawns", "where_sync")


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def seen() -> dict[str, Any]:
    return {}


@pytest.fixture
def runtime(tmp_path: Path, seen: dict[str, Any], release: threading.Event) -> Iterator[Runtime]:
    with runtime_at(tmp_path, POLICY) as runtime:

        @runtime.tool()
        async def where_async() -> str:
            seen.setdefault("async_threads", []).append(threading.get_ident())
            await asyncio.sleep(0)
            return "here"

        @runtime.tool(timeout=0.05)
        async def stalls() -> str:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen["stalls_cancelled"] = True
                raise
            return "never"

        @runtime.tool()
        async def spawns() -> str:
            async def forever() -> None:
                await asyncio.Event().wait()

            seen["background"] = asyncio.get_running_loop().create_task(forever())
            await asyncio.sleep(0)
            return "spawned"

        # The escape hatch: a pool thread that is abandoned, not interrupted, at the deadline
        # (the default runs a sync tool on the caller's thread: test_tool_timeout_watchdog.py).
        @runtime.tool(timeout=0.05, timeout_mode="thread")
        def where_sync() -> str:
            seen["sync_thread"] = threading.get_ident()
            release.wait(5)
            return "late"

        yield runtime


def test_an_async_tool_with_the_default_timeout_runs_on_the_callers_thread(
    runtime: Runtime, seen: dict[str, Any]
) -> None:
    def agent(ctx: Any, _: Any) -> Any:
        return [ctx.call("where_async"), ctx.call("where_async"), threading.get_ident()]

    result = runtime.run(agent)
    assert result.ok, result.error
    first, second, caller = result.output
    assert (first, second) == ("here", "here")
    assert seen["async_threads"] == [caller, caller]


def test_an_async_tool_past_its_deadline_is_cancelled_and_times_out(runtime: Runtime, seen: dict[str, Any]) -> None:
    codes: list[str] = []

    def agent(ctx: Any, _: Any) -> Any:
        try:
            ctx.call("stalls")
        except StepError as failure:
            codes.append(failure.step_code)
        return threading.get_ident()

    result = runtime.run(agent)
    assert result.ok
    assert codes == ["TOOL_TIMEOUT"]
    effect = effect_of(runtime, result.run_id, 0)
    assert (effect["outcome"], effect["code"], effect["timeout_ms"]) == ("EXECUTION_ERROR", "TOOL_TIMEOUT", 50)
    assert seen["stalls_cancelled"] is True


def test_tasks_an_async_tool_leaves_behind_are_cancelled_when_it_returns(
    runtime: Runtime, seen: dict[str, Any]
) -> None:
    result = runtime.run(lambda ctx, _: ctx.call("spawns"))
    assert result.output == "spawned"
    assert seen["background"].cancelled()


def test_a_sync_tool_past_its_deadline_times_out_while_it_keeps_running_elsewhere(
    runtime: Runtime, seen: dict[str, Any], release: threading.Event
) -> None:
    def agent(ctx: Any, _: Any) -> Any:
        try:
            ctx.call("where_sync")
        except StepError as failure:
            return [failure.step_code, threading.get_ident(), release.is_set()]
        return None

    result = runtime.run(agent)
    code, caller, released = result.output
    assert code == "TOOL_TIMEOUT"
    assert released is False  # the caller got its answer before the tool could return
    assert seen["sync_thread"] != caller



def test_an_async_tool_leaves_the_callers_current_event_loop_alone(runtime: Runtime) -> None:
    found: list[str] = []

    def agent(ctx: Any, _: Any) -> Any:
        ctx.call("where_async")
        try:
            asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            found.append("no current loop")
        else:
            found.append("a loop was left set")

    # A thread that is not the main one has no current event loop unless someone sets one.
    caller = threading.Thread(target=runtime.run, args=(agent,))
    caller.start()
    caller.join()
    assert found == ["no current loop"]
