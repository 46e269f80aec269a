"""A refused fork leaves no run that recovery would continue (issue 17, item 3).

The fork's code is replayed against the parent before the child exists; if it contradicts a
recorded step before the fork point, nothing is written. If it contradicts the prefix only
while the child runs (it depends on something outside the doors), the child ends
``aborted`` before the refusal is raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracelock import DivergenceError, Runtime, Toolkit
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.fork import ForkRefusedError, fork_run
from tracelock.runtime.runs.lifecycle import TERMINAL_STATES

POLICY = {"version": 1, "tools": [{"name": "reserve"}, {"name": "charge"}, {"name": "notify"}]}
EXECUTED: list[str] = []
kit = Toolkit()


@kit.tool(side_effect="idempotent", timeout=None)
def reserve(item: str) -> str:
    EXECUTED.append(f"reserve {item}")
    return f"held {item}"


@kit.tool(side_effect="irreversible", timeout=None)
def charge(amount: int) -> str:
    EXECUTED.append(f"charge {amount}")
    return "charged"


@kit.tool(timeout=None)
def notify(text: str) -> bool:
    EXECUTED.append(f"notify {text}")
    return True


def recorded(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    held = ctx.call("reserve", item=task["item"])
    paid = ctx.call("charge", amount=task["amount"])
    ctx.call("notify", text=f"{held}, {paid}")
    return {"held": held, "paid": paid}


def changed_first_step(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    held = ctx.call("reserve", item=task["item"] + "-v2")
    paid = ctx.call("charge", amount=task["amount"])
    ctx.call("notify", text=f"{held}, {paid}")
    return {"held": held, "paid": paid}


def changed_last_step(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    held = ctx.call("reserve", item=task["item"])
    paid = ctx.call("charge", amount=task["amount"])
    ctx.call("notify", text=f"{held}, {paid} (v2)")
    return {"held": held, "paid": paid}


_passes = {"n": 0}


def reproduces_the_prefix_only_once(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """Reads state outside the doors: its second pass asks for another item at step 0."""
    _passes["n"] += 1
    held = ctx.call("reserve", item=task["item"] if _passes["n"] == 1 else "other")
    paid = ctx.call("charge", amount=task["amount"])
    return {"held": held, "paid": paid}


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    handle = Runtime(tmp_path / "store", POLICY, toolkits=(kit,))
    yield handle
    handle.close()


def _parent(runtime: Runtime) -> str:
    result = runtime.run(recorded, {"item": "lamp", "amount": 40})
    assert result.ok
    EXECUTED.clear()
    return result.run_id


def _unfinished(runtime: Runtime) -> list[str]:
    return [info.run for info in runtime.store.runs() if info.status not in TERMINAL_STATES]


def test_a_fork_diverging_before_its_point_writes_no_run_and_recovery_runs_nothing(runtime: Runtime) -> None:
    parent = _parent(runtime)
    before = [info.run for info in runtime.store.runs()]
    with pytest.raises(ForkRefusedError) as refused:
        fork_run(runtime, parent, 2, changed_first_step)
    assert isinstance(refused.value, DivergenceError) and refused.value.code == "FORK_REFUSED"
    report = refused.value.report
    assert report["step"] == 0 and report["kind"] == "changed_effect" and report["fork_at"] == 2
    assert "child" not in report
    assert [info.run for info in runtime.store.runs()] == before
    assert _unfinished(runtime) == []
    assert runtime.recover().runs == []
    assert EXECUTED == []
    # A change at or after the fork point is what a fork is for: it runs live.
    child = fork_run(runtime, parent, 2, changed_last_step)
    assert child.ok and child.parent is not None and child.parent["reused_steps"] == [0, 1]
    assert EXECUTED == ["notify held lamp, charged (v2)"]


def test_a_fork_diverging_only_while_the_child_runs_ends_the_child_aborted(runtime: Runtime) -> None:
    parent = _parent(runtime)
    _passes["n"] = 0
    with pytest.raises(ForkRefusedError) as refused:
        fork_run(runtime, parent, 2, reproduces_the_prefix_only_once, new_run_id="fork-1")
    assert refused.value.report["child"] == "fork-1" and refused.value.report["step"] == 0
    child = load_run(runtime.store, "fork-1")
    assert child.status == "aborted"
    assert child.end is not None and child.end["code"] == "FORK_REFUSED"
    assert _unfinished(runtime) == []
    assert runtime.recover().runs == []
    assert EXECUTED == []
