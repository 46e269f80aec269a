"""``ctx.gather``: results in argument order, completion order recorded and replayed, step
numbers assigned in argument order, fingerprints independent of completion order."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, assert_store_ok, record_of, runtime_at
from tracelock.runtime.errors import DivergenceError, StepError
from tracelock.runtime.runtime import RunResult, Runtime

POLICY = allow("fetch")


class Race:
    """Makes the member named ``slow`` finish after every other member has finished: it waits
    until the fast ones have started, then sleeps a little (real time) before returning."""

    def __init__(self, slow: str) -> None:
        self.slow = slow
        self.fast_started = threading.Event()
        self.calls = Counter[str]()
        self.finished: list[str] = []
        self.lock = threading.Lock()

    def fetch(self, name: str) -> str:
        with self.lock:
            self.calls[name] += 1
        if name == self.slow:
            self.fast_started.wait(5)
            time.sleep(0.3)
        else:
            self.fast_started.set()
        with self.lock:
            self.finished.append(name)
        return f"page {name}"


def gather_runtime(tmp_path: Path, race: Race, store: str = "store") -> Runtime:
    runtime = runtime_at(tmp_path, POLICY, store=store)
    runtime.tool(name="fetch")(race.fetch)
    return runtime


def agent(ctx: Any, names: list[str]) -> Any:
    pages = ctx.gather(*(ctx.task("fetch", name=name) for name in names))
    after = ctx.random()  # the next step is numbered after every gathered member
    return {"pages": pages, "after": after}


def test_results_come_in_argument_order_and_completion_order_is_recorded(tmp_path: Path) -> None:
    race = Race(slow="first")
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second"])
        assert race.finished == ["second", "first"]  # the second really finished first
        assert result.output["pages"] == ["page first", "page second"]
        record = record_of(runtime, result.run_id)
        assert record.gather_orders == {0: [1, 0]}
        assert [record.effects[s]["args"] for s in (0, 1)] == [{"name": "first"}, {"name": "second"}]
        assert record.effects[2]["kind"] == "random"
        entries = [entry.kind for entry in runtime.store.entries(result.run_id)]
        assert entries.index("gather.order") > entries.index("effect")
        assert_store_ok(runtime.store)


def test_replay_of_a_gather_matches_and_calls_no_tool(tmp_path: Path) -> None:
    race = Race(slow="first")
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second", "third"])
        assert record_of(runtime, result.run_id).gather_orders[0][-1] == 0
        calls = Counter(race.calls)
        size = runtime.store.size()
        report = runtime.replay(result.run_id, agent)
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == result.fingerprint
        assert race.calls == calls
        assert runtime.store.size() == size


def test_the_fingerprint_does_not_depend_on_completion_order(tmp_path: Path) -> None:
    results: list[RunResult] = []
    orders = []
    for index, slow in enumerate(("first", "second")):
        race = Race(slow=slow)
        with gather_runtime(tmp_path, race, store=f"store-{index}") as runtime:
            results.append(runtime.run(agent, ["first", "second"]))
            orders.append(record_of(runtime, results[-1].run_id).gather_orders[0])
    assert orders == [[1, 0], [0, 1]]
    assert results[0].output == results[1].output
    assert results[0].fingerprint == results[1].fingerprint


def test_a_failing_member_raises_after_every_member_is_recorded(tmp_path: Path) -> None:
    race = Race(slow="none")
    with gather_runtime(tmp_path, race) as runtime:

        def failing(ctx: Any, _: Any) -> Any:
            try:
                ctx.gather(ctx.task("fetch", name="ok"), ctx.task("missing"), ctx.task("fetch", name=7))
            except StepError as failure:
                return [failure.step, failure.step_code]
            return None

        result = runtime.run(failing)
        assert result.output == [1, "TOOL_UNKNOWN"]  # the first failure in argument order
        record = record_of(runtime, result.run_id)
        assert [record.effects[s]["outcome"] for s in range(3)] == ["SUCCESS", "VALIDATION_ERROR", "VALIDATION_ERROR"]
        assert record.effects[2]["code"] == "ARGS_SCHEMA_MISMATCH"
        assert sorted(record.gather_orders[0]) == [0, 1, 2]
        assert race.calls == Counter(ok=1)
        assert runtime.replay(result.run_id, failing).matched


def test_a_member_waiting_for_approval_lets_its_siblings_finish_first(tmp_path: Path) -> None:
    calls: list[str] = []
    policy = allow("slow", {"name": "send", "approval": True})
    with runtime_at(tmp_path, policy) as runtime:

        @runtime.tool()
        def slow(tag: str) -> str:
            time.sleep(0.2)  # still running when the approval member suspends the run
            calls.append(tag)
            return tag.upper()

        @runtime.tool(side_effect="irreversible")
        def send() -> str:
            calls.append("send")
            return "sent"

        def waiting_agent(ctx: Any, _: Any) -> Any:
            return ctx.gather(ctx.task("slow", tag="a"), ctx.task("send"), ctx.task("slow", tag="b"))

        waiting = runtime.run(waiting_agent)
        assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 1)
        # The siblings finished and were journaled before the run reported that it waits.
        assert sorted(calls) == ["a", "b"]
        assert sorted(record_of(runtime, waiting.run_id).effects) == [0, 2]

        runtime.approve(waiting.run_id, 1, by="erin")
        done = runtime.resume(waiting.run_id, waiting_agent)
        assert (done.status, done.output) == ("completed", ["A", "sent", "B"])
        assert sorted(calls) == ["a", "b", "send"]  # nothing ran twice
        effect_steps = [
            runtime.store.get_payload(entry.payload)["step"]
            for entry in runtime.store.entries(done.run_id)
            if entry.kind in ("effect", "effect.intent") and entry.payload
        ]
        assert sorted(effect_steps) == [0, 1, 2]  # one record per step
        assert runtime.replay(done.run_id, waiting_agent).matched
        assert_store_ok(runtime.store)


def gather_of(names: list[str]) -> Any:
    def gathering(ctx: Any, _: Any) -> Any:
        pages = ctx.gather(*(ctx.task("fetch", name=name) for name in names))
        return {"pages": pages, "after": ctx.random()}

    return gathering


def test_a_reordered_gather_is_reported_at_its_first_member_in_code_order(tmp_path: Path) -> None:
    race = Race(slow="first")
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second", "third"])
        assert record_of(runtime, result.run_id).gather_orders[0][-1] == 0  # "first" completed last
        report = runtime.replay(result.run_id, gather_of(["second", "first", "third"]))
        divergence = report.divergence or {}
        assert (divergence["kind"], divergence["step"], divergence["fields"]) == ("reordered_effect", 0, ["args"])
        assert divergence["recorded_at"] == 1
        assert [change["path"] for change in divergence["diff"]] == ["/args/name"]


def test_a_changed_member_is_reported_in_code_order_not_completion_order(tmp_path: Path) -> None:
    race = Race(slow="second")
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second", "third"])
        assert record_of(runtime, result.run_id).gather_orders[0].index(2) < record_of(
            runtime, result.run_id
        ).gather_orders[0].index(1)
        report = runtime.replay(result.run_id, gather_of(["first", "SECOND", "THIRD"]))
        divergence = report.divergence or {}
        assert (divergence["kind"], divergence["step"], divergence["fields"]) == ("changed_effect", 1, ["args"])
        assert divergence["requested"]["args"] == {"name": "SECOND"}


def test_a_gather_with_one_member_more_is_a_clear_divergence(tmp_path: Path) -> None:
    race = Race(slow="none")
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second"])
        calls = Counter(race.calls)
        report = runtime.replay(result.run_id, gather_of(["first", "second", "third"]))
        divergence = report.divergence or {}
        assert (divergence["kind"], divergence["step"], divergence["gather"]) == ("changed_gather", 2, 0)
        assert divergence["fields"] == ["members"]
        assert len(divergence["recorded"]["members"]) == 2 and len(divergence["requested"]["members"]) == 3
        assert [(change["path"], change["op"]) for change in divergence["diff"]] == [("/members/2", "added")]
        assert race.calls == calls


def test_a_gather_with_one_member_fewer_is_a_clear_divergence(tmp_path: Path) -> None:
    race = Race(slow="none")
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second", "third"])
        report = runtime.replay(result.run_id, gather_of(["first", "second"]))
        divergence = report.divergence or {}
        assert (divergence["kind"], divergence["step"], divergence["gather"]) == ("changed_gather", 2, 0)
        assert [(change["path"], change["op"]) for change in divergence["diff"]] == [("/members/2", "removed")]
        assert "3 members" in divergence["message"] and "2" in divergence["message"]


def test_a_member_differing_before_a_changed_count_is_reported_first(tmp_path: Path) -> None:
    race = Race(slow="second")  # recorded completion order: 0, 2, 1
    with gather_runtime(tmp_path, race) as runtime:
        result = runtime.run(agent, ["first", "second", "third"])
        report = runtime.replay(result.run_id, gather_of(["first", "other"]))
        divergence = report.divergence or {}
        assert (divergence["kind"], divergence["step"]) == ("changed_effect", 1)


def test_a_resumed_run_does_not_run_a_gather_that_diverges(tmp_path: Path) -> None:
    calls: list[str] = []
    policy = allow("fetch", {"name": "send", "approval": True})
    with runtime_at(tmp_path, policy) as runtime:

        @runtime.tool(timeout=None)
        def fetch(name: str) -> str:
            calls.append(name)
            return name

        @runtime.tool(side_effect="irreversible", timeout=None)
        def send() -> str:
            calls.append("send")
            return "sent"

        def recorded(ctx: Any, _: Any) -> Any:
            return [ctx.gather(ctx.task("fetch", name="a"), ctx.task("fetch", name="b")), ctx.call("send")]

        def changed(ctx: Any, _: Any) -> Any:
            try:
                pages = ctx.gather(ctx.task("fetch", name="b"), ctx.task("fetch", name="a"), ctx.task("send"))
            except Exception:
                pages = []
            return [pages, ctx.call("send")]

        waiting = runtime.run(recorded)
        assert waiting.status == "awaiting_approval"
        runtime.approve(waiting.run_id, 2, by="erin")
        calls.clear()
        with pytest.raises(DivergenceError) as raised:
            runtime.resume(waiting.run_id, changed)
        assert (raised.value.report["kind"], raised.value.report["step"]) == ("reordered_effect", 0)
        assert calls == []
