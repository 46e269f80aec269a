"""Queued runs of ``async def`` agents: a worker drives them as tasks of its one event loop
(real worker processes, real stores, on both backends): many in flight on few threads, the
concurrency limit counting sync and async runs together, ``kill -9`` mid-effect and the
take-over by another worker, a worker paused past its lease, SIGTERM handing a run back,
approvals, and ``await handle`` from a running loop.

The tools keep a ledger outside the store (:mod:`tests.runtime._queue_async_agents`): it says
how many runs were inside a tool at once, how many threads the worker had meanwhile, and
that no irreversible effect happened twice.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.queue_workers import Workers, ends, wait_for
from tests.queue_workers import ledger_lines as lines
from tests.runtime import _queue_async_agents as agents
from tracelock.runtime.queue import RunHandle, Worker
from tracelock.runtime.queue.backends import queue_for
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("TRACELOCK_TEST_LEDGER", str(path))  # the tools of in-process workers too
    return path


@pytest.fixture
def hold(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "hold"
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def runtime(location: str) -> Iterator[Runtime]:
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as handle:
        yield handle


@pytest.fixture
def workers(location: str, ledger: Path, hold: Path) -> Iterator[Workers]:
    pool = Workers(location, ledger, hold, "tests.runtime._queue_async_agents")
    yield pool
    pool.kill_all()


def most_inside(ledger: Path) -> int:
    """The most runs inside ``nap`` at once, from its enter and exit lines in order."""
    inside = most = 0
    for line in lines(ledger):
        if line["event"] == "enter":
            inside += 1
            most = max(most, inside)
        elif line["event"] == "exit":
            inside -= 1
    return most


def test_64_async_runs_in_flight_share_one_loop_not_64_threads(workers: Workers, runtime: Runtime, ledger: Path) -> None:
    concurrency = 64
    handles = [runtime.submit(agents.napper, {"key": f"n{number}", "seconds": 0.2}) for number in range(72)]
    worker = workers.start("--concurrency", str(concurrency), "--until-idle", lease_ms=30_000)
    report = workers.report(worker)
    assert report["exit"] == 0, report
    assert report["counts"] == {"completed": 72}
    for number, handle in enumerate(handles):
        assert handle.result(timeout=30).output == {"napped": f"N{number}"}
        assert ends(runtime, handle.run_id) == ["completed"]
    enters = [line for line in lines(ledger) if line["event"] == "enter"]
    assert len(enters) == 72 and {line["pid"] for line in enters} == {worker.pid}
    # The runs were in the tool together, and the worker never had a thread per run.
    assert most_inside(ledger) > 1
    assert max(line["threads"] for line in enters) < concurrency


def test_the_concurrency_limit_counts_sync_and_async_runs_together(runtime: Runtime, ledger: Path) -> None:
    handles = [runtime.submit(agents.napper, {"key": f"a{number}", "seconds": 0.2}) for number in range(4)]
    handles += [runtime.submit(agents.sync_napper, {"key": f"s{number}", "seconds": 0.2}) for number in range(4)]
    report = Worker(runtime, worker_id="mixed", concurrency=3).run(until_idle=True)
    assert report.counts() == {"completed": 8}
    for handle in handles:
        assert handle.result(timeout=10).ok
    assert 1 < most_inside(ledger) <= 3


def test_kill_9_in_an_async_irreversible_effect_never_repeats_it(
    workers: Workers, runtime: Runtime, ledger: Path, hold: Path
) -> None:
    handle = runtime.submit(agents.async_payer, {"key": "pay", "amount": 5})
    others = [runtime.submit(agents.napper, {"key": f"o{number}", "seconds": 0}) for number in range(3)]
    hold.write_text("hold")
    first = workers.start("--concurrency", "8")
    wait_for(Path(f"{ledger}.held.pay"), first)
    for other in others:  # served by the same worker's loop while the payment is held
        assert other.result(timeout=60).ok
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = workers.start("--max-runs", "1", "--concurrency", "8")
    report = workers.report(second)
    assert [(row["outcome"], row["recovered"]) for row in report["runs"]] == [("blocked", True)]
    assert handle.status() == "blocked"
    record = load_run(runtime.store, handle.run_id)
    step = record.waiting_step
    assert step is not None and step in record.pending
    # The operator checked with the payment provider: the payment went through.
    runtime.resolve(handle.run_id, step, by="ops", reason="provider says paid", result="paid")
    third = workers.start("--max-runs", "1")
    assert [row["outcome"] for row in workers.report(third)["runs"]] == ["completed"]
    result = handle.result(timeout=60)
    assert result.ok and result.output == {"napped": "PAY", "paid": "paid"}
    assert ends(runtime, handle.run_id) == ["completed"]
    payments = [line for line in lines(ledger) if line["event"] == "pay"]
    assert len(payments) == 1 and payments[0]["pid"] == first.pid
    # The nap's result was journaled before the kill: the take-over reused it.
    assert [line["pid"] for line in lines(ledger) if line["event"] == "enter" and line["key"] == "pay"] == [first.pid]


def test_an_async_run_of_a_worker_paused_past_its_lease_has_its_appends_refused(
    workers: Workers, runtime: Runtime, ledger: Path, hold: Path
) -> None:
    handle = runtime.submit(agents.lingerer, {"key": "stop"})
    hold.write_text("hold")
    first = workers.start("--max-runs", "1", "--concurrency", "4")
    wait_for(Path(f"{ledger}.held.stop"), first)
    first.send_signal(signal.SIGSTOP)
    try:
        second = workers.start("--max-runs", "1")
        report = workers.report(second)
        assert [(row["outcome"], row["recovered"]) for row in report["runs"]] == [("completed", True)]
        before = len(runtime.store.entries(handle.run_id))
    finally:
        hold.unlink()
        first.send_signal(signal.SIGCONT)
    paused = workers.report(first)
    assert [row["outcome"] for row in paused["runs"]] == ["lease_lost"], paused
    # Nothing of the paused worker reached the run after the take-over.
    assert len(runtime.store.entries(handle.run_id)) == before
    assert ends(runtime, handle.run_id) == ["completed"]
    assert handle.result(timeout=10).output == {"napped": "STOP", "lingered": "stop"}


def test_sigterm_hands_back_an_async_run_that_outlives_the_grace_period(
    workers: Workers, runtime: Runtime, ledger: Path, hold: Path
) -> None:
    handle = runtime.submit(agents.lingerer, {"key": "term"})
    done = runtime.submit(agents.napper, {"key": "quick", "seconds": 0})
    hold.write_text("hold")
    first = workers.start("--grace", "0.5", "--concurrency", "2", lease_ms=60_000)
    wait_for(Path(f"{ledger}.held.term"), first)
    assert done.result(timeout=60).ok  # served by the same worker meanwhile
    first.send_signal(signal.SIGTERM)
    report = workers.report(first)
    assert report["exit"] == 0
    assert {row["run"]: row["outcome"] for row in report["runs"]} == {handle.run_id: "handed_back", done.run_id: "completed"}
    # Handed back: queued again at once (no lease to wait for), and its token is void.
    assert queue_for(runtime.store).item(handle.run_id).state == "queued"  # type: ignore[union-attr]
    second = workers.start("--max-runs", "1")
    assert [row["outcome"] for row in workers.report(second)["runs"]] == ["completed"]
    assert handle.result(timeout=30).output == {"napped": "TERM", "lingered": "term"}
    assert ends(runtime, handle.run_id) == ["completed"]


def test_an_async_run_parks_on_approval_and_any_worker_resumes_it(location: str, runtime: Runtime, ledger: Path) -> None:
    handle = runtime.submit(agents.async_shipper, {"key": "parcel"})
    report = Worker(runtime, worker_id="w1", concurrency=4).run(until_idle=True)
    assert report.counts() == {"awaiting_approval": 1}
    assert queue_for(runtime.store).item(handle.run_id).state == "waiting"  # type: ignore[union-attr]
    step = runtime.retrieve(handle.run_id).waiting_step
    assert step is not None
    runtime.approve(handle.run_id, step, by="alice")
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as another_machine:
        again = Worker(another_machine, worker_id="w2", concurrency=4).run(until_idle=True)
    assert again.counts() == {"completed": 1}
    assert handle.result(timeout=10).output == {"shipped": "shipped"}
    assert [line["key"] for line in lines(ledger) if line["event"] == "ship"] == ["parcel"]


def test_await_a_handle_inside_a_running_loop(workers: Workers, runtime: Runtime) -> None:
    handle = runtime.submit(agents.napper, {"key": "awaited", "seconds": 0.2})
    worker = workers.start("--max-runs", "1")
    result, ticks = asyncio.run(asyncio.wait_for(_await_with_ticker(handle), 120))
    assert result.output == {"napped": "AWAITED"}
    assert ticks > 0  # the loop ran other tasks while the handle waited
    assert workers.report(worker)["exit"] == 0


async def _await_with_ticker(handle: RunHandle) -> tuple[Any, int]:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    try:
        result = await handle
    finally:
        stop.set()
        await task
    return result, ticks
