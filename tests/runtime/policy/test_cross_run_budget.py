"""Daily budgets that span runs (issue 25, item 7): per agent and per tenant, per UTC day
of the journaled clock; consumption is kept in the store (``budget.spend`` entries of the
admin chain); a step over the day's budget is DENIED [DAILY_BUDGET_EXCEEDED] at AUTHORIZE,
with what the decision saw recorded in the step, so replay needs no ledger. Also the
``wall_time_ms`` budget: a decision on time, recorded in the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import Ids, Sleeps, allow, effect_of, record_of
from tracelock.core.entry import ADMIN_RUN
from tracelock.runtime.daily.journal import refresh_ledger
from tracelock.runtime.daily.ledger import DailyLedger, utc_day
from tracelock.runtime.errors import StepError
from tracelock.runtime.policy.policy import Policy, PolicyUnknownKeyError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store

kit = Toolkit()
CALLS: list[str] = []


@kit.tool(side_effect="idempotent", timeout=None)
def send(to: str) -> str:
    CALLS.append(to)
    return f"sent to {to}"


def agent(ctx: Any, task: Any) -> Any:
    sent: list[Any] = []
    for to in task["to"]:
        try:
            sent.append(ctx.call("send", to=to))
        except StepError as exc:
            sent.append({"refused": exc.step_code, "details": exc.details})
    return sent


def other_agent(ctx: Any, task: Any) -> Any:
    return agent(ctx, task)


class Clock:
    """A clock moved by hand (ms), shared by the runtime and its store."""

    def __init__(self, now: int = 1_767_225_600_000 + 10 * 3_600_000) -> None:  # 2026-01-01 10:00 UTC
        self.now = now

    def __call__(self) -> int:
        return self.now


DAY = 24 * 3_600_000


@pytest.fixture(autouse=True)
def _clean() -> Any:
    CALLS.clear()
    yield


def runtime(tmp_path: Path, clock: Clock, policy: Any, ids: str = "run") -> Runtime:
    store = open_store(tmp_path / "store", clock=clock)
    rt = Runtime(store, policy, toolkits=(kit,), clock=clock, sleep=Sleeps(), ids=Ids(ids))
    rt._owns_store = True  # closed with the runtime
    return rt


def refused(output: list[Any]) -> list[str | None]:
    return [item["refused"] if isinstance(item, dict) else None for item in output]


def test_an_agents_daily_budget_is_reached_across_runs_then_the_next_day_allows(tmp_path: Path) -> None:
    clock = Clock()
    policy = allow("send", daily_budgets={"agent": {"effects": 3}})
    with runtime(tmp_path, clock, policy) as rt:
        first = rt.run(agent, {"to": ["a", "b"]})
        assert refused(first.output) == [None, None]
        second = rt.run(agent, {"to": ["c", "d"]})
        assert refused(second.output) == [None, "DAILY_BUDGET_EXCEEDED"]
        assert CALLS == ["a", "b", "c"]
        details = second.output[1]["details"]
        assert (details["scope"], details["key"], details["budget"]) == ("agent", "test_cross_run_budget:agent", "effects")
        assert (details["used"], details["requested"], details["limit"]) == (3, 1, 3)
        assert details["day"] == "2026-01-01"
        effect = effect_of(rt, second.run_id, 1)
        assert (effect["outcome"], effect["code"], effect["phase"], effect["attempts"]) == (
            "DENIED", "DAILY_BUDGET_EXCEEDED", "AUTHORIZE", 0,
        )
        # What the allowed step saw is recorded too.
        assert effect_of(rt, second.run_id, 0)["daily"]["agent"]["used"]["effects"] == 2
        # Another agent has its own budget.
        assert refused(rt.run(other_agent, {"to": ["x"]}).output) == [None]
        # The ledger is in the store: spend entries of the admin chain.
        kinds = [entry.kind for entry in rt.store.entries(ADMIN_RUN)]
        assert kinds.count("budget.spend") == 6  # a start and an end per run
        clock.now += DAY  # the next UTC day
        third = rt.run(agent, {"to": ["e"]})
        assert refused(third.output) == [None]
        assert record_of(rt, third.run_id).start["daily"] == {"day": "2026-01-02", "runs_before": {"agent": 0}}


def test_a_new_runtime_reads_the_days_spending_from_the_store(tmp_path: Path) -> None:
    clock = Clock()
    policy = allow("send", daily_budgets={"agent": {"effects": 2}})
    with runtime(tmp_path, clock, policy) as rt:
        rt.run(agent, {"to": ["a", "b"]})
    with runtime(tmp_path, clock, policy, "later") as later:  # another process, later the same day
        assert refused(later.run(agent, {"to": ["c"]}).output) == ["DAILY_BUDGET_EXCEEDED"]
    assert CALLS == ["a", "b"]


def test_a_tenant_budget_spans_agents_and_other_tenants_are_apart(tmp_path: Path) -> None:
    clock = Clock()
    policy = allow("send", daily_budgets={"tenant": {"runs": 2}})
    with runtime(tmp_path, clock, policy) as rt:
        assert refused(rt.run(agent, {"to": ["a"]}, tenant="acme").output) == [None]
        assert refused(rt.run(other_agent, {"to": ["b"]}, tenant="acme").output) == [None]
        third = rt.run(agent, {"to": ["c"]}, tenant="acme")
        assert refused(third.output) == ["DAILY_BUDGET_EXCEEDED"]
        assert third.output[0]["details"]["budget"] == "runs"
        assert record_of(rt, third.run_id).start["tenant"] == "acme"
        assert refused(rt.run(agent, {"to": ["d"]}, tenant="globex").output) == [None]
        assert refused(rt.run(agent, {"to": ["e"]}).output) == [None]  # no tenant: no tenant budget
    assert CALLS == ["a", "b", "d", "e"]


def test_replay_of_a_denied_run_reproduces_the_denial_without_the_ledger(tmp_path: Path) -> None:
    clock = Clock()
    policy = allow("send", daily_budgets={"agent": {"effects": 1}})
    with runtime(tmp_path, clock, policy) as rt:
        rt.run(agent, {"to": ["a"]})
        denied = rt.run(agent, {"to": ["b"]})
        assert refused(denied.output) == ["DAILY_BUDGET_EXCEEDED"]
    # A runtime with no daily budgets (so no ledger), on another day, replays it.
    clock.now += 10 * DAY
    with runtime(tmp_path, clock, allow("send", daily_budgets={"agent": {"effects": 1}})) as rt:
        rt.environment.ledger = None
        report = rt.replay(denied.run_id, agent)
        assert report.matched
    assert CALLS == ["a"]


def test_the_ledger_is_a_fold_of_the_admin_chain(tmp_path: Path) -> None:
    clock = Clock()
    policy = allow("send", daily_budgets={"agent": {"effects": 100}, "tenant": {"effects": 100}})
    with runtime(tmp_path, clock, policy) as rt:
        rt.run(agent, {"to": ["a", "b"]}, tenant="t1")
        rt.run(other_agent, {"to": ["c"]}, tenant="t1")
        day = utc_day(clock.now)
        ledger = DailyLedger()
        refresh_ledger(rt.store, ledger)
        assert ledger.totals(day, "tenant", "t1") == rt.ledger.totals(day, "tenant", "t1")
        assert ledger.totals(day, "tenant", "t1")["effects"] == 3
        assert ledger.totals(day, "tenant", "t1")["runs"] == 2
        refresh_ledger(rt.store, ledger)  # nothing new: nothing changes
        assert ledger.totals(day, "agent", "test_cross_run_budget:agent")["effects"] == 2


def test_daily_budget_schema_keeps_old_hashes() -> None:
    plain = Policy.from_mapping(allow("send"))
    assert "daily_budgets" not in plain.document and not plain.has_daily_budgets
    daily = Policy.from_mapping(allow("send", daily_budgets={"tenant": {"tokens": 10}}))
    assert daily.document["daily_budgets"]["agent"]["runs"] is None
    assert daily.daily_budgets("tenant") == {"tokens": 10} and daily.daily_budgets("agent") is None
    assert Policy.from_mapping(daily.document).hash == daily.hash
    with pytest.raises(PolicyUnknownKeyError):
        Policy.from_mapping(allow("send", daily_budgets={"team": {"runs": 1}}))


def test_wall_time_is_decided_on_a_recorded_reading(tmp_path: Path) -> None:
    clock = Clock()

    def slow(ctx: Any, task: Any) -> Any:
        first = ctx.call("send", to="a")
        clock.now += 2000  # the agent takes two seconds
        try:
            return [first, ctx.call("send", to="b")]
        except StepError as exc:
            return [first, exc.step_code]

    with runtime(tmp_path, clock, allow("send", budgets={"wall_time_ms": 1000})) as rt:
        result = rt.run(slow, {})
        assert result.output == ["sent to a", "POLICY_BUDGET_EXCEEDED"]
        assert effect_of(rt, result.run_id, 0)["elapsed_ms"] == 0
        assert effect_of(rt, result.run_id, 1)["elapsed_ms"] == 2000
        clock.now = 0  # a replay at any time answers both steps from the record
        assert rt.replay(result.run_id, slow).matched
    assert CALLS == ["a"]


def test_a_fork_child_meets_the_daily_budgets_with_its_live_steps_only(tmp_path: Path) -> None:
    from tracelock.runtime.replay.fork import fork_run

    clock = Clock()
    policy = allow("send", daily_budgets={"agent": {"effects": 3}, "tenant": {"runs": 3}})
    with runtime(tmp_path, clock, policy) as rt:
        parent = rt.run(agent, {"to": ["a", "b"]}, tenant="acme")  # 2 of the day's 3 effects
        # The child reuses step 0 (spent by the parent) and runs step 1 again: 1 effect.
        child = fork_run(rt, parent.run_id, 1, agent)
        assert refused(child.output) == [None, None]
        start = record_of(rt, child.run_id).start
        assert start["tenant"] == "acme"
        assert start["daily"] == {"day": "2026-01-01", "runs_before": {"agent": 1, "tenant": 1}}
        assert effect_of(rt, child.run_id, 1)["daily"]["agent"]["used"]["effects"] == 2
        # The day's 3 effects are spent: a second fork's live step is denied.
        again = fork_run(rt, parent.run_id, 1, agent)
        assert refused(again.output) == [None, "DAILY_BUDGET_EXCEEDED"]
        assert again.output[1]["details"]["used"] == 3
    assert CALLS == ["a", "b", "b"]


def test_a_run_key_given_again_with_another_tenant_is_refused(tmp_path: Path) -> None:
    from tracelock.runtime.errors import RunStateError

    with runtime(tmp_path, Clock(), allow("send")) as rt:
        first = rt.run(agent, {"to": ["a"]}, idempotency_key="order-1", tenant="acme")
        assert rt.run(agent, {"to": ["a"]}, idempotency_key="order-1", tenant="acme").run_id == first.run_id
        with pytest.raises(RunStateError, match="with tenant 'acme', this call gives tenant 'globex'"):
            rt.run(agent, {"to": ["a"]}, idempotency_key="order-1", tenant="globex")
        with pytest.raises(RunStateError, match="this call gives no tenant"):
            rt.run(agent, {"to": ["a"]}, idempotency_key="order-1")
    assert CALLS == ["a"]
