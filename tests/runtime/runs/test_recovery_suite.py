"""Recovery without killing processes: a simulated crash (an exception no handler catches)
leaves an unfinished run, exactly like a dead process would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracelock import Runtime, Toolkit
from tracelock.runtime.errors import LifecycleError, RunStateError
from tracelock.runtime.records import load_run
from tracelock.runtime.runs.lifecycle import check_transition
from tracelock.storage.verify import verify_store

POLICY = {"version": 1, "tools": [{"name": "read"}, {"name": "reserve"}, {"name": "pay"}]}


class Crash(BaseException):
    """Stands for the process dying in the middle of an effect."""


RAN: dict[str, list[Any]] = {"read": [], "reserve": [], "pay": []}
CRASH_IN: set[str] = set()
kit = Toolkit()


@kit.tool(timeout=None)
def read(key: str) -> str:
    RAN["read"].append(key)
    if "read" in CRASH_IN:
        CRASH_IN.discard("read")
        raise Crash
    return key * 2


@kit.tool(side_effect="idempotent", timeout=None)
def reserve(key: str, idempotency_key: str = "") -> str:
    RAN["reserve"].append(idempotency_key)
    if "reserve" in CRASH_IN:
        CRASH_IN.discard("reserve")
        raise Crash
    return "held"


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    RAN["pay"].append(amount)
    if "pay" in CRASH_IN:
        CRASH_IN.discard("pay")
        raise Crash
    return f"paid {amount}"


def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    got = ctx.call("read", key=task["key"])
    held = ctx.call("reserve", key=task["key"])
    paid = ctx.call("pay", amount=task["amount"])
    return {"got": got, "held": held, "paid": paid}


@pytest.fixture(autouse=True)
def _reset() -> None:
    for calls in RAN.values():
        calls.clear()
    CRASH_IN.clear()


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    handle = Runtime(tmp_path / "store", POLICY, toolkits=(kit,), ids=iter(f"run-{n}" for n in range(99)).__next__)
    yield handle
    handle.close()


def _crash_in(runtime: Runtime, tool: str) -> str:
    CRASH_IN.add(tool)
    with pytest.raises(Crash):
        runtime.run(agent, {"key": "k", "amount": 5})
    return "run-0"


def test_read_only_effect_is_rerun(runtime: Runtime) -> None:
    run = _crash_in(runtime, "read")
    report = runtime.recover()
    assert [row["to"] for row in report.runs] == ["completed"]
    assert RAN["read"] == ["k", "k"] and RAN["pay"] == [5]
    assert runtime.retrieve(run).output == {"got": "kk", "held": "held", "paid": "paid 5"}


def test_idempotent_effect_is_rerun_with_its_first_key(runtime: Runtime) -> None:
    run = _crash_in(runtime, "reserve")
    runtime.recover()
    assert len(RAN["reserve"]) == 2 and RAN["reserve"][0] == RAN["reserve"][1] != ""
    assert RAN["read"] == ["k"], "the read result was recorded: it must not run again"
    assert runtime.retrieve(run).status == "completed"


def test_irreversible_effect_blocks_the_run(runtime: Runtime) -> None:
    run = _crash_in(runtime, "pay")
    report = runtime.recover()
    assert report.runs[0]["to"] == "blocked" and report.runs[0]["waiting_step"] == 2
    assert RAN["pay"] == [5]
    # Recovering again changes nothing: a blocked run waits for a human.
    runtime.recover()
    assert RAN["pay"] == [5]
    record = load_run(runtime.store, run)
    assert record.status == "blocked" and record.waiting_step == 2


def test_resolve_with_the_real_result(runtime: Runtime, tmp_path: Path) -> None:
    run = _crash_in(runtime, "pay")
    runtime.recover()
    runtime.resolve(run, 2, by="alice", reason="bank confirms", result="paid 5 (confirmed)")
    report = runtime.recover()
    assert report.runs[0]["to"] == "completed"
    assert RAN["pay"] == [5]
    result = runtime.retrieve(run)
    assert result.output["paid"] == "paid 5 (confirmed)"
    effect = load_run(runtime.store, run).effects[2]
    assert effect["operator"] == {"by": "alice", "reason": "bank confirms"}
    assert verify_store(runtime.store).ok  # type: ignore[arg-type]


def test_resolve_as_failed(runtime: Runtime) -> None:
    run = _crash_in(runtime, "pay")
    runtime.recover()
    runtime.resolve(run, 2, by="alice", failed="bank has no record")
    runtime.recover()
    result = runtime.retrieve(run)
    assert result.status == "failed" and result.code == "OPERATOR_RESOLVED_FAILURE"


def test_resolve_retry_runs_it_exactly_once_more(runtime: Runtime) -> None:
    run = _crash_in(runtime, "pay")
    runtime.recover()
    runtime.resolve(run, 2, by="alice", reason="nothing happened", retry=True)
    runtime.recover()
    assert RAN["pay"] == [5, 5]
    assert runtime.retrieve(run).status == "completed"
    runtime.recover()
    assert RAN["pay"] == [5, 5]


def test_resolving_a_step_nobody_waits_on_is_refused(runtime: Runtime) -> None:
    run = runtime.run(agent, {"key": "k", "amount": 1}).run_id
    with pytest.raises(RunStateError):
        runtime.resolve(run, 2, by="alice", retry=True)


def test_abort_ends_the_run_and_nothing_runs_again(runtime: Runtime) -> None:
    run = _crash_in(runtime, "pay")
    runtime.recover()
    runtime.abort(run, by="bob", reason="customer cancelled")
    assert runtime.retrieve(run).status == "aborted"
    assert runtime.recover().runs == []
    with pytest.raises(LifecycleError):
        runtime.abort(run, by="bob", reason="again")


def test_idempotent_submission_never_starts_a_second_run(runtime: Runtime) -> None:
    first = runtime.run(agent, {"key": "k", "amount": 3}, idempotency_key="order-42")
    second = runtime.run(agent, {"key": "k", "amount": 3}, idempotency_key="order-42")
    assert first.run_id == second.run_id and second.output == first.output
    assert RAN["pay"] == [3]
    with pytest.raises(RunStateError):
        runtime.run(agent, {"key": "k", "amount": 4}, idempotency_key="order-42")


def test_idempotent_submission_attaches_to_an_unfinished_run(runtime: Runtime) -> None:
    CRASH_IN.add("read")
    with pytest.raises(Crash):
        runtime.run(agent, {"key": "k", "amount": 3}, idempotency_key="order-7")
    result = runtime.run(agent, {"key": "k", "amount": 3}, idempotency_key="order-7")
    assert result.status == "completed" and RAN["pay"] == [3]
    assert len(runtime.store.runs()) == 1


def test_only_legal_transitions() -> None:
    check_transition("running", "blocked")
    check_transition("blocked", "running")
    for current, new in [("completed", "running"), ("created", "completed"), ("aborted", "running"), ("blocked", "completed")]:
        with pytest.raises(LifecycleError):
            check_transition(current, new)


def test_log_shows_lifecycle_states(runtime: Runtime) -> None:
    _crash_in(runtime, "pay")
    runtime.recover()
    assert [info.status for info in runtime.store.runs()] == ["blocked"]
