"""The emergency stop (issue 25, item 6): an operator prohibits a tool, or every
irreversible tool, across every run of a store, runs in flight included; a step that
reaches it is DENIED [TOOL_STOPPED] at AUTHORIZE; the stop and its lifting are durable
entries of the admin chain, and the decision is in the run's record, so replay
reproduces it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, effect_of, runtime_at
from tracelock.core.entry import ADMIN_RUN
from tracelock.runtime.errors import RunStateError, StepError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.stops.board import StopBoard
from tracelock.runtime.stops.journal import StopNotFoundError, refresh_stops
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()
CALLS: list[str] = []
OPERATOR: dict[str, Runtime] = {}


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    CALLS.append("lookup")
    runtime = OPERATOR.pop("stop_pay_now", None)
    if runtime is not None:  # an operator stops `pay` while this run is under way
        runtime.stop_tool("pay", by="ops", reason="refunds are being double-paid")
    return key


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    CALLS.append("pay")
    return f"paid {amount}"


@kit.tool(side_effect="idempotent", timeout=None)
def note(text: str) -> str:
    CALLS.append("note")
    return text


def agent(ctx: Any, task: Any) -> Any:
    found = ctx.call("lookup", key="k")
    try:
        paid = ctx.call("pay", amount=task["amount"])
    except StepError as exc:
        paid = {"refused": exc.step_code, "phase": exc.phase.value, "stop": (exc.details or {}).get("stop")}
    return {"found": found, "paid": paid, "noted": ctx.call("note", text="done")}


POLICY = allow("lookup", "pay", "note")
APPROVAL = allow("lookup", {"name": "pay", "approval": True}, "note")


@pytest.fixture(autouse=True)
def _clean() -> Any:
    CALLS.clear()
    OPERATOR.clear()
    yield
    OPERATOR.clear()


def admin_kinds(runtime: Runtime) -> list[str]:
    return [entry.kind for entry in runtime.store.entries(ADMIN_RUN)]


def test_a_stopped_tool_is_denied_in_every_run_until_lifted(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        stop = runtime.stop_tool("pay", by="ops", reason="incident 7")
        denied = runtime.run(agent, {"amount": 3})
        assert denied.ok and denied.output["paid"]["refused"] == "TOOL_STOPPED"
        assert denied.output["paid"]["phase"] == "AUTHORIZE"
        assert denied.output["paid"]["stop"] == {"tool": "pay", "class": None, "seq": stop.seq, "by": "ops", "reason": "incident 7"}
        assert "pay" not in CALLS
        effect = effect_of(runtime, denied.run_id, 1)
        assert (effect["outcome"], effect["code"], effect["attempts"]) == ("DENIED", "TOOL_STOPPED", 0)
        runtime.lift_stop("pay", by="ops", reason="fixed")
        allowed = runtime.run(agent, {"amount": 3})
        assert allowed.output["paid"] == "paid 3" and CALLS.count("pay") == 1
        assert [kind for kind in admin_kinds(runtime) if kind.startswith("stop.")] == ["stop.set", "stop.lift"]
        assert denied.fingerprint != allowed.fingerprint
        # Replay answers the recorded decision, with or without the stop in force.
        assert runtime.replay(denied.run_id, agent).matched


def test_every_irreversible_tool_can_be_stopped(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        runtime.stop_tool(side_effect="irreversible", by="ops", reason="freeze")
        result = runtime.run(agent, {"amount": 3})
        assert result.output["paid"]["refused"] == "TOOL_STOPPED"
        assert result.output["noted"] == "done"  # idempotent tools still run
        assert [stop.target for stop in runtime.stops.stops()] == ["every irreversible tool"]


def test_a_stop_reaches_a_run_in_flight(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        OPERATOR["stop_pay_now"] = runtime
        result = runtime.run(agent, {"amount": 3})
    assert CALLS == ["lookup", "note"]
    assert result.output["paid"]["refused"] == "TOOL_STOPPED"


def test_a_stop_arriving_while_a_run_waits_for_approval(tmp_path: Path) -> None:
    with runtime_at(tmp_path, APPROVAL, toolkits=(kit,)) as server:
        waiting = server.run(agent, {"amount": 5})
        assert waiting.status == "awaiting_approval" and waiting.waiting_step == 1
        # Another runtime over the same store (an operator's CLI) stops the tool...
        with runtime_at(tmp_path, APPROVAL, toolkits=(kit,)) as operator:
            operator.stop_tool("pay", by="ops", reason="suspected fraud")
        # ...a human approves the step, not knowing: the run resumes and is denied anyway.
        server.approve(waiting.run_id, 1, by="alice")
        resumed = server.resume(waiting.run_id, agent)
        assert resumed.status == "completed"
        assert resumed.output["paid"]["refused"] == "TOOL_STOPPED"
        assert "pay" not in CALLS
        assert server.replay(waiting.run_id, agent).matched
    # A runtime opened afterwards folds the same stop from the admin chain.
    with runtime_at(tmp_path, APPROVAL, toolkits=(kit,)) as later:
        assert [(stop.tool, stop.reason) for stop in later.stops.stops()] == [("pay", "suspected fraud")]


def test_the_board_is_a_fold_of_the_admin_chain(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        runtime.stop_tool("pay", by="a", reason="one")
        runtime.stop_tool("note", by="b", reason="two")
        runtime.stop_tool(side_effect="irreversible", by="c", reason="three")
        runtime.lift_stop("note", by="b", reason="ok")
        board = StopBoard()
        refresh_stops(runtime.store, board)
        assert [stop.to_dict() for stop in board.stops()] == [stop.to_dict() for stop in runtime.stops.stops()]
        assert [stop.target for stop in board.stops()] == ["tool pay", "every irreversible tool"]
        refresh_stops(runtime.store, board)  # nothing new: nothing changes
        assert len(board.stops()) == 2


def test_stops_need_a_target_a_name_and_a_reason(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        with pytest.raises(RunStateError):
            runtime.stop_tool("pay", by="", reason="x")
        with pytest.raises(RunStateError):
            runtime.stop_tool("pay", by="ops", reason="")
        with pytest.raises(RunStateError):
            runtime.stop_tool("pay", side_effect="irreversible", by="ops", reason="x")
        with pytest.raises(RunStateError):
            runtime.stop_tool(side_effect="read_only", by="ops", reason="x")
        with pytest.raises(StopNotFoundError):
            runtime.lift_stop("pay", by="ops", reason="x")
        assert runtime.store.size() == 0  # nothing was journaled


def test_a_stop_from_another_writer_reaches_a_run_in_flight(tmp_path: Path) -> None:
    from tracelock.runtime.stops.journal import StopWatch

    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as server:
        server._stop_watch = StopWatch(0)  # look at every step that can change the world
        # Another handle on the store (as another process has): its appends are not
        # visible to the server's until the server appends again.
        with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as operator:
            OPERATOR["stop_pay_now"] = operator
            result = server.run(agent, {"amount": 3})
    assert result.output["paid"]["refused"] == "TOOL_STOPPED"
    assert CALLS == ["lookup", "note"]
