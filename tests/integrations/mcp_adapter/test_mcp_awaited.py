"""MCP tools inside an awaited run (``await runtime.arun``), against a real server process:
a call is awaited on the caller's event loop, which keeps running other tasks while the
server works, and holds none of the runtime's tool threads; the run records as a sync run
does and replays (``areplay``) with the server stopped."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from mcp_helpers import POLICY, calls

from tests.integrations.loop_helpers import MIN_TICKS, SLOW_S, Heartbeat, StepThreads
from tracelock import Runtime
from tracelock.integrations.mcp import McpServer, mcp_toolkit

#: How long the sync tool below waits for the MCP call at most (a bound, not a measure).
HOLD_S = 10.0


def test_an_awaited_mcp_call_leaves_the_loop_running_and_the_tool_pool_free(
    tmp_path: Path, stdio_server: McpServer, effects: Path
) -> None:
    beat = Heartbeat()
    observer = StepThreads(beat, watch="t.slow")
    document = {**POLICY, "tools": [*POLICY["tools"], {"name": "hold"}]}
    # One tool thread: a call that held it while the server works would keep `hold` from
    # seeing the call end.
    runtime = Runtime(tmp_path / "store", document, toolkits=(mcp_toolkit(stdio_server, prefix="t."),), max_workers=1)
    runtime.environment.observer = observer

    @runtime.tool(side_effect="read_only")
    def hold() -> str:
        """A sync tool (run in the tool pool) waiting until the MCP call has ended."""
        return "released" if observer.ended.wait(HOLD_S) else "not released"

    async def agent(ctx: Any, input: Any) -> Any:
        held, answer = await ctx.gather(ctx.task("hold"), ctx.task("t.slow", seconds=SLOW_S))
        return {"hold": held, "slow": answer["structuredContent"]["result"]}

    async def main() -> Any:
        beat.start()
        try:
            result = await runtime.arun(agent, None)
            recorded_ticks = dict(observer.ticks)
            stdio_server.close()  # the server process ends
            report = await runtime.areplay(result.run_id, agent)
        finally:
            await beat.stop()
        return result, recorded_ticks, report

    result, ticks, report = asyncio.run(main())
    assert result.ok, result.error
    assert result.output == {"hold": "released", "slow": "late"}
    assert [(effect["name"], effect["class"]) for effect in result.effects] == [("hold", "read_only"), ("t.slow", "read_only")]
    assert ticks[1] >= MIN_TICKS, ticks  # the loop ran on while the server worked
    assert observer.threads[1] == threading.main_thread().name
    assert report.matched, report.divergence
    assert report.replayed_fingerprint == result.fingerprint
    assert [call["tool"] for call in calls(effects)] == ["slow"]  # the replay called nothing
    assert stdio_server.connections == 1
    runtime.close()
