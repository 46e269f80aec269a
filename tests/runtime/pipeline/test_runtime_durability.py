"""Durability ordering, observed for real: what is in ``journal.log`` (read through a fresh
descriptor, as a successor process would) at the moment a tool runs, and before the agent
sees an irreversible result."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import (
    Ids,
    allow,
    assert_store_ok,
    journal_on_disk,
    runtime_at,
    steps_on_disk,
)

POLICY = allow("lookup", "pay", "check", "upsert")


def test_an_irreversible_intent_is_on_disk_before_the_tool_runs(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    run_id = "run-1"
    seen_by_pay: list[list[tuple[str, Any]]] = []
    seen_by_check: list[dict[int, dict[str, Any]]] = []
    with runtime_at(tmp_path, POLICY, ids=Ids()) as runtime:

        @runtime.tool()
        def lookup(key: str) -> str:
            return key.upper()

        @runtime.tool(side_effect="irreversible")
        def pay(amount: int) -> dict[str, int]:
            seen_by_pay.append(journal_on_disk(store_dir, run_id))
            return {"paid": amount}

        @runtime.tool()
        def check() -> str:
            seen_by_check.append(steps_on_disk(store_dir, run_id, "effect.result"))
            return "checked"

        def agent(ctx: Any, _: Any) -> Any:
            found = ctx.call("lookup", key="abc")  # step 0, read-only
            paid = ctx.call("pay", amount=12)  # step 1, irreversible
            return [found, paid, ctx.call("check")]  # step 2 looks at the disk

        result = runtime.run(agent)
        assert result.run_id == run_id
        assert result.output == ["ABC", {"paid": 12}, "checked"]

        (on_disk,) = seen_by_pay
        kinds = [kind for kind, _ in on_disk]
        # The run's start, the read-only step before and the intent itself were durable
        # before the irreversible tool was allowed to act.
        assert kinds == ["run.start", "effect", "effect.intent"]
        intent = on_disk[2][1]
        assert (intent["step"], intent["name"], intent["class"], intent["args"]) == (
            1,
            "pay",
            "irreversible",
            {"amount": 12},
        )
        assert on_disk[1][1]["step"] == 0 and on_disk[1][1]["result"] == "ABC"

        # The irreversible result was durable before the agent went on to its next step.
        (results,) = seen_by_check
        assert results[1]["outcome"] == "SUCCESS"
        assert results[1]["result"] == {"paid": 12}
        assert_store_ok(runtime.store)


def test_an_idempotent_intent_with_its_key_is_on_disk_before_the_tool_runs(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    observed: list[tuple[str | None, dict[int, dict[str, Any]]]] = []
    with runtime_at(tmp_path, POLICY) as runtime:

        @runtime.tool(side_effect="idempotent")
        def upsert(row: str, idempotency_key: str | None = None) -> str:
            observed.append((idempotency_key, steps_on_disk(store_dir, "run-1", "effect.intent")))
            return row

        result = runtime.run(lambda ctx, _: ctx.call("upsert", row="r"))
        assert result.ok
        ((key, intents),) = observed
        assert intents[0]["name"] == "upsert"
        assert intents[0]["idempotency_key"] == key
        assert key is not None


def test_a_failed_irreversible_effect_is_also_durable_before_the_agent_continues(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    seen: list[dict[int, dict[str, Any]]] = []
    with runtime_at(tmp_path, POLICY) as runtime:

        @runtime.tool(side_effect="irreversible")
        def pay(amount: int) -> None:
            raise RuntimeError("bank said no")

        @runtime.tool()
        def check() -> str:
            seen.append(steps_on_disk(store_dir, "run-1", "effect.result"))
            return "checked"

        def agent(ctx: Any, _: Any) -> Any:
            with contextlib.suppress(Exception):
                ctx.call("pay", amount=1)
            return ctx.call("check")

        assert runtime.run(agent).output == "checked"
        (results,) = seen
        assert (results[0]["outcome"], results[0]["code"], results[0]["attempts"]) == (
            "EXECUTION_ERROR",
            "TOOL_RAISED",
            1,
        )


def test_strict_durability_makes_every_entry_durable_before_the_next_step(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    seen: list[list[tuple[str, Any]]] = []
    with runtime_at(tmp_path, POLICY, durability="strict") as runtime:
        assert runtime.strict_durability

        @runtime.tool()
        def lookup(key: str) -> str:
            seen.append(journal_on_disk(store_dir, "run-1"))
            return key

        def agent(ctx: Any, _: Any) -> Any:
            draw = ctx.random()  # step 0: a read-only effect, cheap to lose in "auto" mode
            ctx.call("lookup", key="a")  # step 1 (read-only) looks at the disk
            ctx.call("lookup", key="b")  # step 2 looks again
            return draw

        result = runtime.run(agent)
        assert result.ok
        first, second = seen
        assert [kind for kind, _ in first] == ["run.start", "effect"]
        assert first[1][1]["kind"] == "random" and first[1][1]["result"] == result.output
        assert [kind for kind, _ in second] == ["run.start", "effect", "effect"]
        assert second[2][1]["name"] == "lookup" and second[2][1]["args"] == {"key": "a"}
        assert_store_ok(runtime.store)


def test_durability_mode_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        runtime_at(tmp_path, POLICY, durability="sometimes")


def test_a_finished_run_is_entirely_on_disk(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with runtime_at(tmp_path, POLICY) as runtime:

        @runtime.tool()
        def lookup(key: str) -> str:
            return key

        result = runtime.run(lambda ctx, _: [ctx.call("lookup", key="k"), ctx.random()])
        kinds = [kind for kind, _ in journal_on_disk(store_dir, result.run_id)]
        assert kinds == ["run.start", "effect", "effect", "run.end"]
        end = journal_on_disk(store_dir, result.run_id)[-1][1]
        assert end["fingerprint"] == result.fingerprint
