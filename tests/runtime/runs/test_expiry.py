"""Approvals that expire (issue 25, item 7): a TTL in the policy, judged against the
journaled clock (the window is written with the wait, the approval's own entry time is
compared with it) and recorded in the step, so that replay reproduces the decision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import Ids, Sleeps, allow, effect_of, record_of
from tracelock.runtime.errors import StepError
from tracelock.runtime.policy.policy import Policy, PolicyTypeError, PolicyValueError
from tracelock.runtime.runs.engine import ApprovalExpiredError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store

kit = Toolkit()
CALLS: list[int] = []


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    CALLS.append(amount)
    return f"paid {amount}"


def agent(ctx: Any, task: Any) -> Any:
    try:
        return {"paid": ctx.call("pay", amount=task["amount"])}
    except StepError as exc:
        return {"refused": exc.step_code, "phase": exc.phase.value, "details": exc.details}


class Clock:
    """A clock the test moves by hand (ms); shared by the runtime and its store, so that
    entry times and the runtime's readings are one clock."""

    def __init__(self, now: int = 1_767_225_600_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


HOUR = 3_600_000
POLICY = allow({"name": "pay", "approval": True}, approvals={"ttl_ms": HOUR})


@pytest.fixture(autouse=True)
def _clean() -> Any:
    CALLS.clear()
    yield


def runtime(tmp_path: Path, clock: Clock, policy: Any = POLICY) -> Runtime:
    store = open_store(tmp_path / "store", clock=clock)
    rt = Runtime(store, policy, toolkits=(kit,), clock=clock, sleep=Sleeps(), ids=Ids())
    rt._owns_store = True  # closed with the runtime
    return rt


def test_an_approval_in_time_lets_the_step_run(tmp_path: Path) -> None:
    clock = Clock()
    with runtime(tmp_path, clock) as rt:
        waiting = rt.run(agent, {"amount": 5})
        assert waiting.status == "awaiting_approval"
        state = record_of(rt, waiting.run_id).states[-1]
        assert (state["ttl_ms"], state["expires_ms"]) == (HOUR, clock.now + HOUR)
        clock.now += HOUR  # exactly at the end of the window: still in time
        rt.approve(waiting.run_id, 0, by="alice")
        done = rt.resume(waiting.run_id, agent)
        assert done.output == {"paid": "paid 5"} and CALLS == [5]
        approval = effect_of(rt, waiting.run_id, 0)["approval"]
        assert approval["at_ms"] == approval["expires_ms"] == state["expires_ms"]
        assert rt.replay(waiting.run_id, agent).matched


def test_approve_after_expiry_is_refused_and_the_resumed_step_is_denied(tmp_path: Path) -> None:
    clock = Clock()
    with runtime(tmp_path, clock) as rt:
        waiting = rt.run(agent, {"amount": 7})
        clock.now += HOUR + 1
        with pytest.raises(ApprovalExpiredError) as refused:
            rt.approve(waiting.run_id, 0, by="alice")
        assert refused.value.code == "RUN_APPROVAL_EXPIRED"
        assert "closed at" in refused.value.message
        assert 0 not in record_of(rt, waiting.run_id).approvals  # nothing was written
        ended = rt.resume(waiting.run_id, agent)
        assert ended.status == "completed"
        assert ended.output["refused"] == "APPROVAL_EXPIRED" and ended.output["phase"] == "AUTHORIZE"
        assert CALLS == []
        effect = effect_of(rt, waiting.run_id, 0)
        assert (effect["outcome"], effect["code"], effect["attempts"]) == ("DENIED", "APPROVAL_EXPIRED", 0)
        assert effect["approval"]["checked_ms"] == clock.now  # the reading that decided, recorded
        # Replay answers from the record, at any time.
        clock.now = 0
        assert rt.replay(waiting.run_id, agent).matched


def test_an_approval_journaled_late_is_refused_on_resume(tmp_path: Path) -> None:
    # Another process (its clock behind) wrote the approval after the window closed: the
    # approval entry's own time decides, not the approver's clock.
    clock = Clock()
    with runtime(tmp_path, clock) as rt:
        waiting = rt.run(agent, {"amount": 9})
        late = Clock(clock.now + 2 * HOUR)
        # The approver's runtime reads a clock still in the window; its store stamps late.
        approver_store = open_store(tmp_path / "store", clock=late)
        try:
            with Runtime(approver_store, POLICY, toolkits=(kit,), clock=Clock(clock.now), ids=Ids()) as approver:
                approver.approve(waiting.run_id, 0, by="bob")
        finally:
            approver_store.close()
        ended = rt.resume(waiting.run_id, agent)
        assert ended.output["refused"] == "APPROVAL_EXPIRED"
        assert ended.output["details"]["approved_ms"] == late.now
        assert CALLS == []
        assert rt.replay(waiting.run_id, agent).matched


def test_a_resume_inside_the_window_waits_again_with_the_same_window(tmp_path: Path) -> None:
    clock = Clock()
    with runtime(tmp_path, clock) as rt:
        waiting = rt.run(agent, {"amount": 1})
        first = record_of(rt, waiting.run_id).states[-1]["expires_ms"]
        clock.now += HOUR // 2
        again = rt.resume(waiting.run_id, agent)
        assert again.status == "awaiting_approval"
        assert record_of(rt, waiting.run_id).states[-1]["expires_ms"] == first
        clock.now += HOUR  # past the first window, though within an hour of the second wait
        with pytest.raises(ApprovalExpiredError):
            rt.approve(waiting.run_id, 0, by="alice")


def test_a_rejection_after_expiry_is_still_a_rejection(tmp_path: Path) -> None:
    clock = Clock()
    with runtime(tmp_path, clock) as rt:
        waiting = rt.run(agent, {"amount": 2})
        clock.now += 2 * HOUR
        rt.reject(waiting.run_id, 0, by="alice", reason="no")
        assert rt.resume(waiting.run_id, agent).output["refused"] == "APPROVAL_REJECTED"


def test_the_tool_ttl_overrides_the_default_and_no_ttl_never_expires(tmp_path: Path) -> None:
    clock = Clock()
    policy = allow({"name": "pay", "approval": True, "approval_ttl_ms": 1000}, approvals={"ttl_ms": HOUR})
    with runtime(tmp_path, clock, policy) as rt:
        waiting = rt.run(agent, {"amount": 3})
        clock.now += 1001
        with pytest.raises(ApprovalExpiredError):
            rt.approve(waiting.run_id, 0, by="alice")
    clock = Clock()
    with runtime(tmp_path / "b", clock, allow({"name": "pay", "approval": True})) as rt:
        waiting = rt.run(agent, {"amount": 4})
        assert "expires_ms" not in record_of(rt, waiting.run_id).states[-1]
        clock.now += 365 * 24 * HOUR
        rt.approve(waiting.run_id, 0, by="alice")
        assert rt.resume(waiting.run_id, agent).output == {"paid": "paid 4"}


def test_ttl_schema_keeps_old_hashes_and_checks_values() -> None:
    plain = Policy.from_mapping(allow({"name": "pay", "approval": True}))
    assert "approvals" not in plain.document
    assert "approval_ttl_ms" not in plain.document["tools"][0]
    assert plain.approval_ttl_ms("pay") is None
    timed = Policy.from_mapping(POLICY)
    assert timed.approval_ttl_ms("pay") == HOUR and timed.hash != plain.hash
    assert Policy.from_mapping(timed.document).hash == timed.hash
    with pytest.raises(PolicyValueError):
        Policy.from_mapping(allow({"name": "pay", "approval_ttl_ms": -1}))
    with pytest.raises(PolicyTypeError):
        Policy.from_mapping(allow("pay", approvals={"ttl_ms": "1h"}))
    with pytest.raises(PolicyValueError):  # a denied tool takes no approval settings
        Policy.from_mapping(allow({"name": "pay", "allow": False, "approval_ttl_ms": 5}))


def test_the_approve_command_after_expiry_exits_2_with_the_code(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tracelock.cli.main import cli

    clock = Clock(1_000_000_000_000)  # long ago: the command's real clock is past the window
    with runtime(tmp_path, clock) as rt:
        waiting = rt.run(agent, {"amount": 6})
    result = CliRunner().invoke(
        cli, ["approve", waiting.run_id, "0", "--by", "alice", "--store", str(tmp_path / "store"), "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 2, result.output
    assert "RUN_APPROVAL_EXPIRED" in result.output
    with runtime(tmp_path, clock) as rt:
        assert 0 not in record_of(rt, waiting.run_id).approvals
