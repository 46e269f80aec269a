"""Intent routing (``runtime.send_intent``): deterministic candidate order, recorded fallback,
no handler, every handler failing, and replay of routed runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, assert_store_ok, record_of, runtime_at
from tracelock.runtime.doors.routing import candidates_for
from tracelock.runtime.errors import AgentDefinitionError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Intent

POLICY = allow("answer")


def handler(name: str, *, fails: bool = False) -> Any:
    def handle(ctx: Any, payload: Any) -> Any:
        if fails:
            ctx.call("missing_tool")  # a step failure, so the router falls back
        return ctx.call("answer", who=name, question=payload["q"])

    handle.__qualname__ = f"handle_{name}"
    return handle


def routing_runtime(tmp_path: Path, failing: set[str], store: str = "store") -> Runtime:
    runtime = runtime_at(tmp_path, POLICY, store=store)

    @runtime.tool()
    def answer(who: str, question: str) -> str:
        return f"{who} answers {question}"

    declared = {
        "low": Intent("support", priority=0),
        "beta": Intent("support", priority=5),
        "alpha": Intent("support", priority=5),
        "gamma": Intent("support", priority=5, version=2),
        "zeta": Intent("support", priority=9),
    }
    for name, intent in declared.items():
        runtime.agent(name, intents=[intent, Intent("other")])(handler(name, fails=name in failing))
    return runtime


ORDER = ["zeta", "gamma", "alpha", "beta", "low"]


def test_candidates_are_ordered_by_priority_then_version_then_name(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, set()) as runtime:
        ordered = candidates_for(runtime.toolkit.agents, "support")
        assert [spec.name for spec, _ in ordered] == ORDER
        assert [spec.name for spec, _ in candidates_for(runtime.toolkit.agents, "other")] == sorted(ORDER)


def test_the_first_candidate_handles_the_intent(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, set()) as runtime:
        result = runtime.send_intent("support", {"q": "refund?"})
        assert result.output == "zeta answers refund?"
        record = record_of(runtime, result.run_id)
        assert record.agent == "intent:support"
        assert record.routing == [
            {
                "intent": "support",
                "candidates": ORDER,
                "attempt": 0,
                "chosen": "zeta",
                "version": 1,
                "priority": 9,
                "reason": "first in order",
            }
        ]


def test_a_failing_handler_falls_back_to_the_next_and_the_fallback_is_recorded(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, {"zeta", "gamma"}) as runtime:
        result = runtime.send_intent("support", {"q": "refund?"})
        assert (result.outcome, result.output) == ("SUCCESS", "alpha answers refund?")
        record = record_of(runtime, result.run_id)
        assert [(r["attempt"], r["chosen"], r["reason"]) for r in record.routing] == [
            (0, "zeta", "first in order"),
            (1, "gamma", "fallback after zeta failed [TOOL_UNKNOWN]"),
            (2, "alpha", "fallback after gamma failed [TOOL_UNKNOWN]"),
        ]
        # the failed handlers' steps stay in the record
        assert [record.effects[s]["outcome"] for s in sorted(record.effects)] == ["VALIDATION_ERROR", "VALIDATION_ERROR", "SUCCESS"]
        kinds = [entry.kind for entry in runtime.store.entries(result.run_id)]
        assert kinds.count("route") == 3
        assert_store_ok(runtime.store)


def test_routing_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, {"zeta"}, store="one") as one:
        first = one.send_intent("support", {"q": "x"})
    with routing_runtime(tmp_path, {"zeta"}, store="two") as two:
        second = two.send_intent("support", {"q": "x"})
    with routing_runtime(tmp_path, set(), store="three") as three:
        third = three.send_intent("support", {"q": "x"})
    assert first.fingerprint == second.fingerprint != third.fingerprint


def test_no_handler_is_a_validation_error(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, set()) as runtime:
        result = runtime.send_intent("unheard-of", {"q": "?"})
        assert (result.status, result.outcome, result.code) == ("failed", "VALIDATION_ERROR", "ROUTING_NO_HANDLER")
        assert record_of(runtime, result.run_id).routing == []
        assert_store_ok(runtime.store)


def test_every_handler_failing_exhausts_the_route(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, set(ORDER)) as runtime:
        result = runtime.send_intent("support", {"q": "?"})
        assert (result.status, result.outcome, result.code) == ("failed", "EXECUTION_ERROR", "ROUTING_EXHAUSTED")
        routing = record_of(runtime, result.run_id).routing
        assert [r["chosen"] for r in routing] == [*ORDER, None]
        assert routing[-1]["reason"] == "every candidate failed"
        for name in ORDER:
            assert name in str(result.error)
        assert_store_ok(runtime.store)


@pytest.mark.parametrize("failing", [set(), {"zeta", "gamma"}, set(ORDER)], ids=["first", "fallback", "exhausted"])
def test_replay_of_a_routed_run_matches(tmp_path: Path, failing: set[str]) -> None:
    with routing_runtime(tmp_path, failing) as runtime:
        result = runtime.send_intent("support", {"q": "again"})
        size = runtime.store.size()
        report = runtime.replay(result.run_id)  # the router is rebuilt from the registry
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == result.fingerprint
        assert runtime.store.size() == size


def test_replay_notices_a_changed_routing_table(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, {"zeta"}) as runtime:
        result = runtime.send_intent("support", {"q": "again"})
        runtime.agent("aaa", intents=[Intent("support", priority=100)])(handler("aaa"))
        report = runtime.replay(result.run_id)
        assert not report.matched
        assert report.divergence is not None and report.divergence["kind"] == "changed_routing"


def test_an_intent_needs_a_name(tmp_path: Path) -> None:
    with routing_runtime(tmp_path, set()) as runtime, pytest.raises(AgentDefinitionError):
        runtime.send_intent("", {})
