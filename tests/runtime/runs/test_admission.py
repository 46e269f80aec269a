"""Admission of awaited runs (tracelock.runtime.runs.admission): a loop runs as many at once
as keep it responsive, nested runs never wait on their parent's place, and a caller
cancelled while waiting leaves nothing behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tracelock import Runtime
from tracelock.runtime.runs.admission import FIRST_LIMIT

POLICY = {"version": 1, "tools": [{"name": "nap"}, {"name": "hog"}]}


def runtime_at(path: Path, **kwargs: Any) -> Runtime:
    runtime = Runtime(path / "store", POLICY, **kwargs)

    @runtime.tool(side_effect="read_only")
    async def nap(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "rested"

    @runtime.tool(side_effect="read_only")
    async def hog(seconds: float) -> str:
        time.sleep(seconds)  # holds the loop, as CPU-heavy agent code would
        return "held"

    return runtime


async def napper(ctx: Any, seconds: float) -> Any:
    return await ctx.call("nap", seconds=seconds)


async def hogger(ctx: Any, seconds: float) -> Any:
    return await ctx.call("hog", seconds=seconds)


def test_the_limit_grows_while_the_loop_keeps_up_and_shrinks_when_it_lags(tmp_path: Path) -> None:
    async def main() -> tuple[int | None, int | None]:
        with runtime_at(tmp_path, loop_lag_ms=20) as runtime:
            results = await asyncio.gather(*(runtime.arun(napper, 0.2) for _ in range(600)))
            assert all(result.ok for result in results)
            grown = runtime.admission.limit()
            results = await asyncio.gather(*(runtime.arun(hogger, 0.03) for _ in range(60)))
            assert all(result.ok for result in results)
            return grown, runtime.admission.limit()

    grown, shrunk = asyncio.run(main())
    assert grown is not None and grown > FIRST_LIMIT
    assert shrunk is not None and shrunk < grown


def test_without_a_lag_target_every_run_starts_at_once(tmp_path: Path) -> None:
    inside: list[int] = []

    async def counted(ctx: Any, _: Any) -> Any:
        inside.append(1)
        await ctx.call("nap", seconds=0.2)
        return len(inside)

    async def main() -> list[Any]:
        with runtime_at(tmp_path, loop_lag_ms=None) as runtime:
            results = await asyncio.gather(*(runtime.arun(counted, None) for _ in range(100)))
            assert runtime.admission.limit() is None
            return results

    results = asyncio.run(main())
    # Every run was inside its nap before the first came out of it.
    assert min(result.output for result in results) == 100


def test_a_run_started_inside_an_admitted_run_is_admitted_at_once(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        # Not strict: a run started by agent code is no recorded step of its parent (strict
        # mode refuses the id it draws), which is beside the point here.
        with runtime_at(tmp_path, loop_lag_ms=1000, strict=False) as runtime:

            async def parent(ctx: Any, _: Any) -> Any:
                child = await runtime.arun(napper, 0.05)
                return child.output

            # More parents than places: were the children gated, the first parents would
            # hold every place while waiting for a child that waits for a place.
            return await asyncio.wait_for(
                asyncio.gather(*(runtime.arun(parent, None) for _ in range(FIRST_LIMIT * 2))), 60
            )

    assert [result.output for result in asyncio.run(main())] == ["rested"] * (FIRST_LIMIT * 2)


def test_a_caller_cancelled_while_waiting_for_a_place_leaves_no_trace(tmp_path: Path) -> None:
    async def main() -> None:
        # A target no probe can meet: the limit never grows while the caller waits.
        with runtime_at(tmp_path, loop_lag_ms=0.001) as runtime:
            holders = [asyncio.ensure_future(runtime.arun(napper, 0.3)) for _ in range(FIRST_LIMIT)]
            await asyncio.sleep(0.05)
            waiting = asyncio.ensure_future(runtime.arun(napper, 0.0))
            await asyncio.sleep(0.05)
            waiting.cancel()
            await asyncio.gather(*holders)
            assert waiting.cancelled()
            # Only the holders' runs exist, and a new caller gets a place at once.
            assert len(runtime.store.runs()) == FIRST_LIMIT
            assert (await runtime.arun(napper, 0.0)).ok

    asyncio.run(main())
