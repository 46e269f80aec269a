"""Awaited runs (``arun``, ``aresume``, ``areplay``, ``arecover``): the one step pipeline
driven from the caller's event loop, which never blocks on a run's waits, on both backends.
Effects record each real execution outside the store."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.runtime import _async_run_child as child
from tracelock import Runtime
from tracelock.cli.main import cli
from tracelock.runtime.errors import AwaitRequiredError, StepError

SPAWN = multiprocessing.get_context("spawn")
POLICY = {
    "version": 1,
    "tools": [{"name": "lookup"}, {"name": "charge"}, {"name": "slow"}, {"name": "blocking"}, {"name": "stamp"}],
    "llm": {"allow": True, "models": ["m"]},
}


class Effects:
    """What the effects did, as they did it: every real execution, with the loop's time
    at its start and end, and the heartbeat's ticks."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []
        self.ticks: list[float] = []
        self.cancelled: list[str] = []
        self.threads: list[str] = []

    def ticks_within(self, start: float, end: float) -> int:
        return sum(1 for tick in self.ticks if start < tick < end)


def runtime_for(location: str, effects: Effects, **kwargs: Any) -> Runtime:
    async def llm(request: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.sleep(0.15)
        effects.calls.append(("llm", started, time.monotonic()))
        return {"content": f"plan for {request['prompt']}", "usage": {"input_tokens": 3, "output_tokens": 4}}

    runtime = Runtime(location, kwargs.pop("policy", POLICY), llm=kwargs.pop("llm", llm), **kwargs)

    @runtime.tool(side_effect="read_only")
    async def lookup(order: str) -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.sleep(0.15)
        effects.calls.append(("lookup", started, time.monotonic()))
        return {"order": order, "cents": 100 + len(order)}

    @runtime.tool(side_effect="irreversible")
    async def charge(order: str, cents: int) -> str:
        started = time.monotonic()
        await asyncio.sleep(0.15)
        effects.calls.append(("charge", started, time.monotonic()))
        return f"charged {order} {cents}"

    @runtime.tool(side_effect="read_only", timeout=0.2)
    async def slow(seconds: float) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            effects.cancelled.append("slow")
            raise
        return "done"

    @runtime.tool(side_effect="read_only")
    def blocking(seconds: float) -> str:
        effects.threads.append(threading.current_thread().name)
        time.sleep(seconds)  # a sync tool: it must not hold the loop
        return "slept"

    @runtime.tool(side_effect="read_only")
    async def stamp(label: str, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return label

    return runtime


async def checkout(ctx: Any, order: str) -> dict[str, Any]:
    plan = await ctx.llm(model="m", prompt=order, max_tokens=16)
    found = await ctx.call("lookup", order=order)
    receipt = await ctx.call("charge", order=order, cents=found["cents"])
    return {"plan": plan["content"], "receipt": receipt}


def checkout_sync(ctx: Any, order: str) -> dict[str, Any]:
    """The same agent written sync: its recordings and the async one's replay each other."""
    plan = ctx.llm(model="m", prompt=order, max_tokens=16)
    found = ctx.call("lookup", order=order)
    receipt = ctx.call("charge", order=order, cents=found["cents"])
    return {"plan": plan["content"], "receipt": receipt}


async def _with_heartbeat(effects: Effects, work: Any) -> Any:
    """Await ``work`` while a heartbeat on the same loop records a tick every 10 ms."""
    stop = asyncio.Event()

    async def beat() -> None:
        while not stop.is_set():
            effects.ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    beating = asyncio.create_task(beat())
    try:
        return await work
    finally:
        stop.set()
        await beating


def _verifies(location: str) -> None:
    shown = CliRunner().invoke(cli, ["verify", "--store", location, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["ok"] is True


def test_concurrent_aruns_never_block_the_loop_and_replay(location: str) -> None:
    effects = Effects()
    orders = [f"o-{number}" for number in range(12)]

    async def main() -> list[Any]:
        with runtime_for(location, effects) as runtime:
            results = await _with_heartbeat(
                effects, asyncio.gather(*(runtime.arun(checkout, order) for order in orders))
            )
            reports = [await runtime.areplay(result.run_id) for result in results]
            assert all(report.matched for report in reports), [r.divergence for r in reports]
            return results

    results = asyncio.run(main())
    assert [result.ok for result in results] == [True] * len(orders), [r.error for r in results]
    assert sorted(result.output["receipt"] for result in results) == sorted(
        f"charged {order} {100 + len(order)}" for order in orders
    )
    # Every effect lasted 150 ms; the heartbeat went on ticking inside each one.
    assert len(effects.calls) == 3 * len(orders)
    for name, start, end in effects.calls:
        assert effects.ticks_within(start, end) >= 3, (name, effects.ticks_within(start, end))
    # The runs were in flight together: their effects overlapped.
    starts = sorted(start for name, start, _ in effects.calls if name == "charge")
    ends = sorted(end for name, _, end in effects.calls if name == "charge")
    assert starts[-1] < ends[0]
    _verifies(location)


def test_runs_waiting_on_one_loop_share_commits(location: str) -> None:
    """24 runs reach their irreversible charge together: its intent must be durable before
    the charge runs, and one commit makes all of theirs durable (the runs' ends too)."""
    effects = Effects()
    runs = 24

    async def main() -> tuple[int, int]:
        everyone = asyncio.Event()
        arrived: list[str] = []

        async def together(ctx: Any, order: str) -> Any:
            found = await ctx.call("lookup", order=order)
            arrived.append(order)
            if len(arrived) == runs:
                everyone.set()
            await everyone.wait()
            return await ctx.call("charge", order=order, cents=found["cents"])

        with runtime_for(location, effects) as runtime:
            store: Any = runtime.store
            before = _commits(store)
            results = await asyncio.gather(*(runtime.arun(together, f"s-{number}") for number in range(runs)))
            assert all(result.ok for result in results)
            return before, _commits(store)

    before, after = asyncio.run(main())
    # Alone, each run would make two durable points (the charge's intent, the end): 48.
    # Shared: 2 syncs on the directory store, about 6 transactions on PostgreSQL here.
    assert after - before < runs // 2, (before, after)


def _commits(store: Any) -> int:
    """Syncs (directory store) or append transactions (PostgreSQL) made so far."""
    if hasattr(store, "sync_count"):
        return int(store.sync_count)
    return int(store.transactions)


def test_sync_and_async_recordings_replay_each_other(location: str) -> None:
    effects = Effects()

    async def main() -> None:
        with runtime_for(location, effects) as runtime:
            awaited = await runtime.arun(checkout, "x-1")
            as_sync = await runtime.areplay(awaited.run_id, checkout_sync)
            assert as_sync.matched, as_sync.divergence
        with runtime_for(location, effects) as runtime:
            blocking = await asyncio.to_thread(runtime.run, checkout_sync, "x-1")
            as_async = await runtime.areplay(blocking.run_id, checkout)
            assert as_async.matched, as_async.divergence

    asyncio.run(main())
    with runtime_for(location, effects) as runtime:
        run = runtime.run(checkout, "x-2")  # a sync caller, no loop: the agent's own loop
        assert run.ok, run.error
        assert runtime.replay(run.run_id, checkout_sync).matched


def test_a_timed_out_async_tool_is_cancelled_and_a_sync_one_runs_off_the_loop(location: str) -> None:
    effects = Effects()

    async def agent(ctx: Any, _: Any) -> dict[str, Any]:
        try:
            await ctx.call("slow", seconds=30)
        except StepError as failure:
            code = failure.step_code
        blocked = await ctx.call("blocking", seconds=0.2)
        return {"code": code, "blocked": blocked}

    async def main() -> Any:
        with runtime_for(location, effects) as runtime:
            started = time.monotonic()
            result = await _with_heartbeat(effects, runtime.arun(agent, None))
            return result, started, time.monotonic()

    result, started, ended = asyncio.run(main())
    assert result.ok, result.error
    assert result.output == {"code": "TOOL_TIMEOUT", "blocked": "slept"}
    assert effects.cancelled == ["slow"]
    assert effects.threads and effects.threads[0].startswith("tracelock-tool")
    # The sync tool slept 0.2 s in the tool pool: the loop kept ticking meanwhile.
    assert effects.ticks_within(started, ended) >= 10


def test_gather_runs_its_members_on_the_loop_and_replays_their_order(location: str) -> None:
    effects = Effects()

    async def agent(ctx: Any, _: Any) -> list[str]:
        results: list[str] = await ctx.gather(
            ctx.task("stamp", label="slow", seconds=0.6),
            ctx.task("stamp", label="fast", seconds=0.0),
            ctx.task("stamp", label="middle", seconds=0.3),
        )
        return results

    async def main() -> None:
        with runtime_for(location, effects) as runtime:
            result = await runtime.arun(agent, None)
            assert result.output == ["slow", "fast", "middle"]
            store: Any = runtime.store
            orders = [store.get_payload(entry.payload) for entry in store.entries(result.run_id) if entry.kind == "gather.order"]
            assert orders == [{"first": 0, "steps": [1, 2, 0]}]
            assert (await runtime.areplay(result.run_id, agent)).matched
            # A sync replay answers the gather in the order recorded by the async run.
            sync_agent_replay = await asyncio.to_thread(runtime.replay, result.run_id, _gather_sync)
            assert sync_agent_replay.matched, sync_agent_replay.divergence

    asyncio.run(main())


def _gather_sync(ctx: Any, _: Any) -> list[Any]:
    return ctx.gather(
        ctx.task("stamp", label="slow", seconds=0.6),
        ctx.task("stamp", label="fast", seconds=0.0),
        ctx.task("stamp", label="middle", seconds=0.3),
    )


def test_afork_continues_an_awaited_run_from_a_step(location: str) -> None:
    effects = Effects()

    async def main() -> None:
        with runtime_for(location, effects) as runtime:
            parent = await runtime.arun(checkout, "f-1")
            child = await runtime.afork(parent.run_id, 1, checkout, allow_irreversible=True)
            assert child.ok, child.error
            assert child.parent == {"run": parent.run_id, "step": 1, "reused_steps": [0]}
            assert child.output == parent.output

    asyncio.run(main())
    # The LLM step was answered from the parent; the lookup and the charge ran again.
    assert [name for name, _, _ in effects.calls] == ["llm", "lookup", "charge", "lookup", "charge"]


def test_run_of_an_async_agent_inside_a_loop_names_arun_and_writes_nothing(tmp_path: Path) -> None:
    effects = Effects()

    async def main() -> None:
        with runtime_for(str(tmp_path / "store"), effects) as runtime:
            with pytest.raises(AwaitRequiredError) as raised:
                runtime.run(checkout, "n-1")
            assert raised.value.code == "RUN_AWAIT_REQUIRED"
            assert "arun" in raised.value.message
            assert runtime.store.runs() == []

    asyncio.run(main())


def test_one_key_on_one_loop_executes_once(location: str) -> None:
    effects = Effects()

    async def main() -> list[Any]:
        with runtime_for(location, effects) as runtime:
            return await asyncio.gather(
                *(runtime.arun(checkout, "k-1", idempotency_key="order k-1") for _ in range(5))
            )

    results = asyncio.run(main())
    assert len({result.run_id for result in results}) == 1
    assert {json.dumps(result.output, sort_keys=True) for result in results} == {
        json.dumps(results[0].output, sort_keys=True)
    }
    assert [name for name, _, _ in effects.calls].count("charge") == 1


def test_an_awaited_run_waits_for_approval_and_aresume_continues_it(location: str) -> None:
    effects = Effects()
    policy = {**POLICY, "tools": [{"name": "lookup"}, {"name": "charge", "approval": True}]}

    async def main() -> None:
        with runtime_for(location, effects, policy=policy) as runtime:
            waiting = await runtime.arun(checkout, "a-1")
            assert waiting.status == "awaiting_approval"
            runtime.approve(waiting.run_id, waiting.waiting_step or 0, by="ops")
            done = await runtime.aresume(waiting.run_id)
            assert done.ok, done.error
            assert done.output["receipt"] == "charged a-1 103"

    asyncio.run(main())
    assert [name for name, _, _ in effects.calls].count("charge") == 1


def test_budgets_and_strict_mode_hold_in_awaited_runs(tmp_path: Path) -> None:
    effects = Effects()
    policy = {**POLICY, "budgets": {"llm_calls": 1}}

    async def twice(ctx: Any, _: Any) -> Any:
        await ctx.llm(model="m", prompt="one", max_tokens=4)
        return await ctx.llm(model="m", prompt="two", max_tokens=4)

    async def peeks(ctx: Any, _: Any) -> Any:
        await ctx.call("lookup", order="p")
        return time.time()

    async def main() -> None:
        with runtime_for(str(tmp_path / "a"), effects, policy=policy) as runtime:
            over = await runtime.arun(twice, None)
            assert (over.outcome, over.code) == ("DENIED", "POLICY_BUDGET_EXCEEDED")
        with runtime_for(str(tmp_path / "b"), effects, strict=True) as runtime:
            caught = await runtime.arun(peeks, None)
            assert caught.code == "NONDETERMINISM_DETECTED", caught.error

    asyncio.run(main())


def test_a_cancelled_arun_stays_unfinished_and_aresume_finishes_it(tmp_path: Path) -> None:
    effects = Effects()
    location = str(tmp_path / "store")

    async def main() -> None:
        with runtime_for(location, effects, ids=lambda: "run-cancelled") as runtime:
            task = asyncio.ensure_future(runtime.arun(checkout, "c-1"))
            while not any(name == "llm" for name, _, _ in effects.calls):
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert runtime.store.run_info("run-cancelled").status == "running"
            done = await runtime.aresume("run-cancelled", checkout)
            assert done.ok, done.error

    asyncio.run(main())
    assert [name for name, _, _ in effects.calls].count("charge") == 1
    _verifies(location)


def test_a_killed_awaited_run_never_charges_twice(location: str, tmp_path: Path) -> None:
    """A process running awaited runs is killed inside the irreversible effect; recovery
    (awaited too) holds that run instead of charging again, and finishes the others."""
    ledger = tmp_path / "ledger"
    inside = tmp_path / "inside"
    process = SPAWN.Process(target=child.serve, args=(location, str(ledger), str(inside)))
    process.start()
    for _ in range(1200):
        if inside.exists():
            break
        time.sleep(0.05)
    else:
        process.kill()
        raise AssertionError("the child never reached the charge")
    os.kill(process.pid or 0, signal.SIGKILL)
    process.join()
    charged = ledger.read_text().split()
    assert charged.count("k-held") == 1

    async def recover() -> Any:
        with child.runtime(location, str(ledger), str(inside)) as runtime:
            report = await runtime.arecover(force=True)
            return report, {info.run: info.status for info in runtime.store.runs()}

    report, statuses = asyncio.run(recover())
    assert "blocked" in statuses.values(), (report, statuses)
    assert ledger.read_text().split().count("k-held") == 1
    _verifies(location)
