"""One owner per run, whoever calls (tracelock.runtime.runs.ownership): callers racing on one
run in real processes, on both backends, with an irreversible effect that records every real
execution in a ledger outside the store. Each charge appears in the ledger once, every
caller gets the same result, and the store verifies."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.runtime import _one_owner_child as child
from tracelock.cli.main import cli
from tracelock.runtime.errors import RunBusyError, RunStateError
from tracelock.runtime.queue.worker import Worker
from tracelock.runtime.runs.engine import keyed_run_id
from tracelock.runtime.tools.toolkit import agent_name

SPAWN = multiprocessing.get_context("spawn")


def _verifies(location: str) -> None:
    shown = CliRunner().invoke(cli, ["verify", "--store", location, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["ok"] is True


def _ledger(path: Path) -> Counter[str]:
    return Counter(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else Counter()


def _wait_for(path: Path, what: str) -> None:
    for _ in range(1200):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def race_callers(location: str, tmp_path: Path, *, callers: int, trials: int, seed: int) -> dict[str, int]:
    """``callers`` processes call ``run`` with one idempotency key per trial, at random
    offsets; returns the counts the closing note reports."""
    ledger, results = tmp_path / "ledger", tmp_path / "results.jsonl"
    barrier = SPAWN.Barrier(callers)
    processes = [
        SPAWN.Process(
            target=child.racer,
            args=(location, str(ledger), str(results), trials, seed, barrier, f"caller-{number}"),
        )
        for number in range(callers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(600)
        assert process.exitcode == 0, f"a caller ended with exit code {process.exitcode}"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == callers * trials
    errors = [row for row in rows if "error" in row and row.get("status") is None]
    assert errors == []
    charged = _ledger(ledger)
    # Each irreversible effect ran exactly once, whoever called.
    assert charged == Counter({f"order-{trial}": 1 for trial in range(trials)})
    for trial in range(trials):
        seen = [row for row in rows if row["trial"] == trial]
        assert {row["status"] for row in seen} == {"completed"}
        assert len({(row["run_id"], row["fingerprint"], json.dumps(row["output"])) for row in seen}) == 1
    _verifies(location)
    return {"trials": trials, "calls": len(rows), "executions": sum(charged.values()), "duplicates": 0}


@pytest.mark.parametrize("callers", [2, 3])
def test_callers_with_one_idempotency_key_charge_once(location: str, tmp_path: Path, callers: int) -> None:
    race_callers(location, tmp_path, callers=callers, trials=10, seed=callers)


@pytest.mark.slow
@pytest.mark.parametrize("callers", [2, 3])
def test_callers_with_one_idempotency_key_charge_once_many_times(location: str, tmp_path: Path, callers: int) -> None:
    counts = race_callers(location, tmp_path, callers=callers, trials=100, seed=100 + callers)
    print(f"one-owner race ({callers} callers): {counts}")


def _held_owner(location: str, tmp_path: Path, order: str, lease_ms: int = 30_000) -> Any:
    """A process that runs ``order`` and stays inside its charge (after the ledger line)
    until the hold file is removed."""
    ledger = tmp_path / "ledger"
    hold = tmp_path / f"hold-{order}"
    hold.write_text("hold")
    owner = SPAWN.Process(target=child.owner, args=(location, str(ledger), order, lease_ms))
    owner.start()
    _wait_for(tmp_path / f"inside-{order}", "the owner to enter its charge")
    return owner


def test_resume_recover_force_a_keyed_run_and_a_worker_leave_a_live_owner_s_run_alone(
    location: str, tmp_path: Path
) -> None:
    order = "order-live"
    run_id = keyed_run_id(agent_name(child.checkout), order)
    owner = _held_owner(location, tmp_path, order)
    try:
        with child.runtime_for(location, tmp_path / "ledger") as runtime:
            with pytest.raises(RunBusyError) as busy:
                runtime.resume(run_id)
            assert isinstance(busy.value, RunStateError) and busy.value.details["run"] == run_id
            report = runtime.recover(force=True)
            row = next(row for row in report.runs if row["run"] == run_id)
            assert (row["to"], row.get("error_kind")) == ("running", "RUN_BUSY")
            runtime.busy_timeout = 0.3
            with pytest.raises(RunBusyError):
                runtime.run(child.checkout, {"order": order}, idempotency_key=order)
            # The queue: the same key submitted; a worker does not take the run while its
            # owner holds it.
            handle = runtime.submit(child.checkout, {"order": order}, idempotency_key=order)
            assert handle.run_id == run_id
            worker = Worker(runtime, worker_id="w1", wake=0.05)
            assert worker.run(until_idle=True).runs == []
            # The owner finishes; every caller then gets its result, nothing runs again.
            (tmp_path / f"hold-{order}").unlink()
            owner.join(60)
            assert owner.exitcode == 0
            runtime.busy_timeout = 60.0
            result = runtime.run(child.checkout, {"order": order}, idempotency_key=order)
            assert result.status == "completed" and result.output == {"receipt": f"charged {order} {105 + 5}"}
            assert runtime.resume(run_id).fingerprint == result.fingerprint
            done = Worker(runtime, worker_id="w2", wake=0.05).run(until_idle=True)
            assert [row["outcome"] for row in done.runs] == ["completed"]
            assert handle.result(10).fingerprint == result.fingerprint
    finally:
        (tmp_path / f"hold-{order}").unlink(missing_ok=True)
        owner.join(60)
    assert _ledger(tmp_path / "ledger") == Counter({order: 1})
    _verifies(location)


def test_an_owner_paused_past_its_lease_is_fenced_and_never_charges(location: str, tmp_path: Path) -> None:
    """The owner is stopped (SIGSTOP) inside the read-only lookup, past its lease: another
    caller takes the run over and finishes it (one charge). Continued, the old owner's next
    append is refused (``RUN_LEASE_LOST``): it writes nothing more and never charges."""
    order = "order-paused"
    hold = tmp_path / f"hold-lookup-{order}"
    hold.write_text("hold")
    owner = SPAWN.Process(target=child.owner, args=(location, str(tmp_path / "ledger"), order, 300))
    owner.start()
    try:
        _wait_for(tmp_path / f"inside-lookup-{order}", "the owner to enter its lookup")
        assert owner.pid is not None
        os.kill(owner.pid, signal.SIGSTOP)
        hold.unlink()
        with child.runtime_for(location, tmp_path / "ledger") as runtime:
            result = runtime.run(child.checkout, {"order": order}, idempotency_key=order)  # waits for the expiry
            assert result.status == "completed"
            os.kill(owner.pid, signal.SIGCONT)
            owner.join(60)
            assert owner.exitcode == 3
            ended = json.loads((tmp_path / f"outcome-{order}").read_text())
            assert ended == {"raised": "LeaseLostError", "code": "RUN_LEASE_LOST"}
            assert runtime.retrieve(result.run_id).fingerprint == result.fingerprint
    finally:
        if owner.pid is not None and owner.is_alive():
            os.kill(owner.pid, signal.SIGCONT)
            owner.kill()
        owner.join(60)
    assert _ledger(tmp_path / "ledger") == Counter({order: 1})
    _verifies(location)


def test_a_killed_owner_s_charge_blocks_its_run_and_never_runs_twice(location: str, tmp_path: Path) -> None:
    """``kill -9`` of the owner inside the irreversible effect: the next caller with the key
    takes the run over at once (its owner is dead) and finds the charge's intent without a
    result: the run is blocked for an operator, never charged again; recover --force agrees."""
    order = "order-killed"
    owner = _held_owner(location, tmp_path, order, lease_ms=3_600_000)
    owner.kill()
    owner.join(60)
    (tmp_path / f"hold-{order}").unlink()
    with child.runtime_for(location, tmp_path / "ledger") as runtime:
        result = runtime.run(child.checkout, {"order": order}, idempotency_key=order)
        assert result.status == "blocked" and result.waiting_step == 1
        report = runtime.recover(force=True)
        assert all(row["to"] == "blocked" for row in report.runs if row["run"] == result.run_id)
        again = runtime.run(child.checkout, {"order": order}, idempotency_key=order)
        assert (again.status, again.waiting_step) == ("blocked", 1)
    assert _ledger(tmp_path / "ledger") == Counter({order: 1})
    _verifies(location)


def test_two_runtimes_continuing_one_approved_run_charge_once(location: str, tmp_path: Path) -> None:
    """An approved run continued by a thread of one runtime while a second runtime tries to
    continue it too (``resume``, ``recover``, ``recover --force``)."""
    policy = {"version": 1, "tools": [{"name": "lookup"}, {"name": "charge", "approval": True}]}
    ledger = tmp_path / "ledger"
    order = "order-approved"
    hold = tmp_path / f"hold-{order}"
    kit = child.build(ledger)
    from tracelock import Runtime

    with Runtime(location, policy, toolkits=(kit,)) as first, Runtime(location, policy, toolkits=(kit,)) as second:
        waiting = first.run(child.checkout, {"order": order})
        assert waiting.status == "awaiting_approval"
        first.approve(waiting.run_id, 1, by="alice")
        hold.write_text("hold")
        results: list[Any] = []
        holder = threading.Thread(target=lambda: results.append(first.resume(waiting.run_id, child.checkout)))
        holder.start()
        _wait_for(tmp_path / f"inside-{order}", "the first runtime to enter the charge")
        with pytest.raises(RunBusyError):
            second.resume(waiting.run_id, child.checkout)
        with pytest.raises(RunBusyError):
            second.approve(waiting.run_id, 1, by="bob")
        row = next(row for row in second.recover().runs if row["run"] == waiting.run_id)
        assert "live process" in row["reason"] or row.get("error_kind") == "RUN_BUSY"
        row = next(row for row in second.recover(force=True).runs if row["run"] == waiting.run_id)
        assert (row["to"], row.get("error_kind")) == ("running", "RUN_BUSY")
        hold.unlink()
        holder.join(30)
        assert [result.status for result in results] == ["completed"]
        assert second.resume(waiting.run_id, child.checkout).fingerprint == results[0].fingerprint
    assert _ledger(ledger) == Counter({order: 1})
    _verifies(location)
