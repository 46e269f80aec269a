"""The run queue's API on both backends: submit and handles, idempotency keys across
processes, workers, approvals across the fleet, per-queue limits, runs no worker can run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import _queue_agents as agents
from tracelock.runtime.errors import AgentDefinitionError, RunStateError
from tracelock.runtime.queue import QueueRunError, QueueTimeoutError, Worker
from tracelock.runtime.queue.backends import queue_for
from tracelock.runtime.runtime import Runtime

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def runtime(location: str) -> Iterator[Runtime]:
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as handle:
        yield handle


def serve(runtime: Runtime, worker_id: str = "w", **options: Any) -> dict[str, str]:
    report = Worker(runtime, worker_id=worker_id, **options).run(until_idle=True)
    return {row["run"]: row["outcome"] for row in report.runs}


def local_agent(ctx: Any, task: Any) -> Any:
    return task


def test_a_submitted_run_is_durable_and_runs_once_a_worker_serves_it(location: str, runtime: Runtime) -> None:
    handle = runtime.submit(agents.payer, {"key": "a", "amount": 2})
    assert handle.status() == "queued"
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as other:  # another process's view
        assert other.handle(handle.run_id).status() == "queued"
        with pytest.raises(QueueTimeoutError) as timed_out:
            other.handle(handle.run_id).result(timeout=0.05)
        assert timed_out.value.code == "QUEUE_RESULT_TIMEOUT"
        assert serve(other) == {handle.run_id: "completed"}
    result = handle.result(timeout=30)
    assert result.status == "completed" and result.output == {"found": "A", "refunded": "refunded", "charged": "charged"}
    assert handle.status() == "completed"
    # The same agent and input run directly: the same fingerprint (the queue adds nothing to it).
    direct = runtime.run(agents.payer, {"key": "a", "amount": 2})
    assert direct.fingerprint == result.fingerprint


def test_the_same_idempotency_key_from_two_processes_is_one_run(location: str, runtime: Runtime, tmp_path: Path) -> None:
    first = runtime.submit("payer", {"key": "idem"}, idempotency_key="order-7")
    again = runtime.submit("payer", {"key": "idem"}, idempotency_key="order-7")
    assert again.run_id == first.run_id
    (tmp_path / "input.json").write_text(json.dumps({"key": "idem"}))
    elsewhere = subprocess.run(
        [sys.executable, "-m", "tests.runtime._queue_worker_child", "submit", "tests.runtime._queue_agents:payer",
         "--input", str(tmp_path / "input.json"), "--key", "order-7", "--store", location, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert json.loads(elsewhere.stdout)["run_id"] == first.run_id
    assert queue_for(runtime.store).counts() == {"default": {"queued": 1}}
    with pytest.raises(RunStateError):
        runtime.submit("payer", {"key": "other"}, idempotency_key="order-7")
    assert serve(runtime) == {first.run_id: "completed"}
    # A keyed run() of the same agent and key is that run too.
    assert runtime.run("payer", {"key": "idem"}, idempotency_key="order-7").run_id == first.run_id


def test_a_run_awaiting_approval_is_resumed_by_whichever_worker_is_free(location: str, runtime: Runtime) -> None:
    handle = runtime.submit(agents.shipper, {"key": "parcel"})
    assert serve(runtime, "w1") == {handle.run_id: "awaiting_approval"}
    assert handle.status() == "awaiting_approval"
    assert queue_for(runtime.store).item(handle.run_id).state == "waiting"  # type: ignore[union-attr]
    assert serve(runtime, "w1") == {}  # parked: nothing to take before the approval
    step = runtime.retrieve(handle.run_id).waiting_step
    assert step is not None
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as operator:
        operator.approve(handle.run_id, step, by="alice")
    assert queue_for(runtime.store).item(handle.run_id).state == "queued"  # type: ignore[union-attr]
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as another_machine:
        assert serve(another_machine, "w2") == {handle.run_id: "completed"}
    assert handle.result(timeout=10).output == {"shipped": "shipped"}


def test_a_rejected_run_goes_back_to_the_queue_and_ends(runtime: Runtime) -> None:
    handle = runtime.submit(agents.shipper, {"key": "no"})
    serve(runtime)
    step = runtime.retrieve(handle.run_id).waiting_step
    assert step is not None
    runtime.reject(handle.run_id, step, by="bob")
    assert serve(runtime) == {handle.run_id: "failed"}
    assert handle.result(timeout=10).outcome == "DENIED"


def test_a_queue_limit_caps_leases_across_workers(runtime: Runtime) -> None:
    for number in range(3):
        runtime.submit(agents.plain, {"key": f"x{number}"}, queue="narrow")
    backend = queue_for(runtime.store)
    taken = backend.claim(["narrow"], "w1", 4, 60_000, 1)
    assert len(taken) == 1
    assert backend.claim(["narrow"], "w2", 4, 60_000, 1) == []
    assert len(backend.claim(["narrow"], "w2", 4, 60_000, None)) == 2
    assert backend.finish(taken[0].item.run, taken[0].token, "done", "completed")
    assert not backend.finish(taken[0].item.run, taken[0].token, "done", "completed")  # released already


def test_workers_serve_only_their_queues_in_order(runtime: Runtime) -> None:
    fast = [runtime.submit(agents.plain, {"key": f"f{number}"}, queue="fast") for number in range(3)]
    slow = runtime.submit(agents.plain, {"key": "s"}, queue="slow")
    report = Worker(runtime, worker_id="w", queues=["fast"]).run(until_idle=True)
    assert [row["run"] for row in report.runs] == [handle.run_id for handle in fast]
    assert slow.status() == "queued"


def test_a_run_no_worker_can_run_is_parked_with_the_reason(runtime: Runtime) -> None:
    handle = runtime.submit("tests.runtime._queue_agents:plain", {"key": "gone"})
    backend = queue_for(runtime.store)
    # Simulate a queued reference to code that is gone: queue a row by hand.
    backend.enqueue("run-missing-code", "default", "tests.runtime.no_such_module:agent", b"{}", None)
    outcomes = serve(runtime)
    assert outcomes == {handle.run_id: "completed", "run-missing-code": "error"}
    with pytest.raises(QueueRunError) as parked:
        runtime.handle("run-missing-code").result(timeout=5)
    assert "AGENT_INVALID" in parked.value.message
    assert runtime.handle("run-missing-code").status() == "error"


def test_only_importable_module_level_agents_can_be_queued(runtime: Runtime) -> None:
    def inner(ctx: Any, task: Any) -> Any:
        return task

    with pytest.raises(AgentDefinitionError):
        runtime.submit(inner, {})
    with pytest.raises(AgentDefinitionError):
        runtime.submit(agents.plain, {"not": {1, 2}})


def test_await_a_handle_while_a_worker_serves(runtime: Runtime) -> None:
    handle = runtime.submit(agents.plain, {"key": "async"})
    worker = Worker(runtime, worker_id="bg", wake=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        result = asyncio.run(asyncio.wait_for(_wait(handle), 60))
    finally:
        worker.stop()
        thread.join(30)
    assert result.output == {"echo": {"key": "async"}, "looked": "ASYNC"}
    assert not thread.is_alive()


async def _wait(handle: Any) -> Any:
    return await handle


def test_the_queue_command_lists_counts_and_runs(location: str, runtime: Runtime) -> None:
    handle = runtime.submit(agents.plain, {"key": "cli"})
    done = subprocess.run(
        [sys.executable, "-m", "tests.runtime._queue_worker_child", "queue", "--state", "queued", "--store", location, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["queues"] == {"default": {"queued": 1}}
    assert [row["run"] for row in document["runs"]] == [handle.run_id]


def test_recover_leaves_the_runs_the_queue_holds_to_its_workers(runtime: Runtime) -> None:
    handle = runtime.submit(agents.shipper, {"key": "held"})
    serve(runtime)
    step = runtime.retrieve(handle.run_id).waiting_step
    assert step is not None
    runtime.approve(handle.run_id, step, by="alice")  # resumable now, and queued again
    report = runtime.recover()
    [row] = report.runs
    assert row["run"] == handle.run_id and "held by the run queue (queued)" in row["reason"]
    assert runtime.retrieve(handle.run_id).status == "awaiting_approval"
    assert serve(runtime) == {handle.run_id: "completed"}


def test_tracelock_approve_in_another_process_puts_the_run_back_in_the_queue(location: str, runtime: Runtime) -> None:
    handle = runtime.submit(agents.shipper, {"key": "cli-approve"})
    serve(runtime)
    step = runtime.retrieve(handle.run_id).waiting_step
    done = subprocess.run(
        [sys.executable, "-m", "tests.runtime._queue_worker_child", "approve", handle.run_id, str(step),
         "--by", "carol", "--store", location, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert queue_for(runtime.store).item(handle.run_id).state == "queued"  # type: ignore[union-attr]
    assert serve(runtime, "w9") == {handle.run_id: "completed"}
