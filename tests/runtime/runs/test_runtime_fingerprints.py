"""Execution fingerprints: byte-identical for the same agent and input (in fresh stores, with
other clocks and run ids, in other processes with other hash seeds), different when the
input, the policy or a recorded result differs; retrieval and replay of recorded runs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import Ids, Ticks, allow, assert_store_ok, record_of, runtime_at
from tracelock.core.fingerprint import fingerprint, run_projection, value_hash
from tracelock.errors import StoreError
from tracelock.runtime.runtime import RunResult, Runtime

REPO = Path(__file__).resolve().parents[3]
POLICY = allow("lookup", "tally", llm={"allow": True, "models": ["m"]})


class Switch:
    """Lets a test make the tools, the provider and the agent refuse to run."""

    def __init__(self) -> None:
        self.broken = False
        self.calls = 0
        self.result_suffix = ""

    def check(self) -> None:
        self.calls += 1
        if self.broken:
            raise AssertionError("code ran although the run was only retrieved or replayed")


def build(runtime: Runtime, switch: Switch) -> Any:
    def provider(request: dict[str, Any]) -> dict[str, Any]:
        switch.check()
        return {"content": "plan for " + str(request.get("prompt")), "usage": {"input_tokens": 4, "output_tokens": 2}}

    runtime.toolkit.llm = provider

    @runtime.tool()
    def lookup(key: str) -> dict[str, Any]:
        switch.check()
        return {"key": key, "value": len(key), "suffix": switch.result_suffix}

    @runtime.tool()
    def tally(words: list[str]) -> dict[str, int]:
        switch.check()
        counts: dict[str, int] = {}
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        return counts

    def agent(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
        switch.check()
        plan = ctx.llm(model="m", prompt=request["question"], max_tokens=16)
        found = ctx.call("lookup", key=request["key"])
        counts = ctx.call("tally", words=request["words"])
        moment = ctx.now()  # recorded, but not part of the fingerprint
        draw = ctx.random()
        ident = ctx.uuid()
        assert isinstance(ident, uuid.UUID) and ident.version == 4
        assert 0.0 <= draw < 1.0
        assert moment.tzinfo is not None
        return {"plan": plan["content"], "found": found, "counts": counts, "draw": draw, "id": str(ident)}

    return agent


REQUEST = {"question": "why?", "key": "k-1", "words": ["b", "a", "b"]}


#: The seed is part of a run's configuration: runs compared here share it.
SEED = "configured-seed"


def record(
    tmp_path: Path, name: str, *, request: Any = REQUEST, policy: Any = POLICY, seed: str | None = SEED, **kwargs: Any
) -> tuple[RunResult, Runtime]:
    switch = Switch()
    runtime = runtime_at(tmp_path, policy, store=name, **kwargs)
    agent = build(runtime, switch)
    with runtime:
        return runtime.run(agent, request, seed=seed), runtime


def test_the_same_agent_and_input_give_the_same_fingerprint_in_fresh_stores(tmp_path: Path) -> None:
    one, rt1 = record(tmp_path, "one", clock=Ticks(start=1_000), ids=Ids("a"))
    two, _rt2 = record(tmp_path, "two", clock=Ticks(start=9_999_999, step=1234), ids=Ids("b"))
    assert one.ok and two.ok
    assert one.run_id != two.run_id
    assert one.fingerprint == two.fingerprint
    assert one.fingerprint is not None and len(one.fingerprint) == 64
    assert one.output == two.output  # random and uuid come from the seed, not the world
    now_one = next(e for e in one.effects if e["kind"] == "clock.now")
    now_two = next(e for e in two.effects if e["kind"] == "clock.now")
    assert now_one["result"] != now_two["result"]  # now() is recorded as it was...
    # ...and the stored fingerprint is the hash of the run's projection without it
    projection = run_projection(
        agent=f"{__name__}:build.<locals>.agent",
        input=REQUEST,
        policy_hash=rt1.policy.hash,
        effects=one.effects,
        routing=[],
        output=one.output,
        outcome="SUCCESS",
        code=None,
    )
    assert fingerprint(projection) == one.fingerprint


def test_random_and_uuid_come_from_the_seed(tmp_path: Path) -> None:
    one, _ = record(tmp_path, "one")
    other, _ = record(tmp_path, "other", seed="another-seed")
    assert one.output["draw"] != other.output["draw"]
    assert one.output["id"] != other.output["id"]
    assert one.fingerprint != other.fingerprint


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"request": {**REQUEST, "key": "k-2"}}, id="input"),
        pytest.param({"request": {**REQUEST, "words": ["a", "b", "b"]}}, id="input-order"),
        pytest.param({"policy": allow("lookup", "tally", "unused", llm={"allow": True, "models": ["m"]})}, id="policy"),
        pytest.param({"policy": {**POLICY, "budgets": {"effects": 100}}}, id="policy-budget"),
    ],
)
def test_a_different_input_or_policy_gives_a_different_fingerprint(tmp_path: Path, change: dict[str, Any]) -> None:
    base, _ = record(tmp_path, "base")
    changed, _ = record(tmp_path, "changed", **change)
    assert changed.ok
    assert base.fingerprint != changed.fingerprint


def test_a_changed_tool_result_gives_a_different_fingerprint(tmp_path: Path) -> None:
    results = []
    for index, suffix in enumerate(("", "", "!")):
        switch = Switch()
        switch.result_suffix = suffix
        with runtime_at(tmp_path, POLICY, store=f"s{index}") as runtime:
            agent = build(runtime, switch)
            results.append(runtime.run(agent, REQUEST))
    assert results[0].fingerprint == results[1].fingerprint != results[2].fingerprint


HASH_SEED_SCRIPT = r"""
import sys
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit(llm=lambda request: {"content": " ".join(sorted(set(request["prompt"].split())))})

@kit.tool()
def tally(words: list[str]) -> dict[str, int]:
    counts = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return counts

@kit.tool(side_effect="idempotent")
def remember(fact: str, idempotency_key: str = "") -> str:
    return fact.upper()

POLICY = {
    "version": 1,
    "tools": [{"name": "tally", "args": {"words": {"type": "array"}}}, {"name": "remember"}, {"name": "spare"}],
    "llm": {"allow": True, "models": ["b-model", "a-model"]},
    "budgets": {"effects": 50, "llm_calls": 5},
    "fs": {"operations": ["write", "list", "mkdir", "read"], "extensions": [".md", ".txt"]},
}

def agent(ctx, request):
    plan = ctx.llm(model="a-model", prompt=request["text"], max_tokens=32)
    counts, fact = ctx.gather(ctx.task("tally", words=request["text"].split()), ctx.task("remember", fact=plan["content"]))
    ctx.call("fs.mkdir", path="notes")
    ctx.call("fs.write", path="notes/plan.md", content=plan["content"])
    listing = ctx.call("fs.list", path="notes")
    return {"counts": counts, "fact": fact, "listing": listing, "draw": ctx.random(), "id": str(ctx.uuid()), "now": 0 * ctx.now().year}

with Runtime(sys.argv[1], POLICY, toolkits=(kit,), sandbox=sys.argv[2]) as runtime:
    result = runtime.run(agent, {"text": "the quick brown fox jumps over the lazy dog the end"}, seed="fixed")
    assert result.ok, result.error
    print(result.fingerprint)
"""


def test_fingerprints_do_not_depend_on_the_process_or_its_hash_seed(tmp_path: Path) -> None:
    fingerprints = []
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        completed = subprocess.run(
            [sys.executable, "-c", HASH_SEED_SCRIPT, str(tmp_path / f"store-{seed}"), str(tmp_path / f"sb-{seed}")],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        fingerprints.append(completed.stdout.strip())
    assert len(fingerprints[0]) == 64
    assert fingerprints[0] == fingerprints[1] == fingerprints[2]


def test_retrieve_answers_from_the_journal_without_running_any_code(tmp_path: Path) -> None:
    switch = Switch()
    with runtime_at(tmp_path, POLICY) as runtime:
        agent = build(runtime, switch)
        result = runtime.run(agent, REQUEST)
        failed = runtime.run(lambda ctx, _: ctx.call("nope"))
        switch.broken = True  # from here on, any tool, model or agent call fails the test
        calls = switch.calls
        retrieved = runtime.retrieve(result.run_id)
        assert (retrieved.status, retrieved.outcome, retrieved.output, retrieved.fingerprint) == (
            "completed",
            "SUCCESS",
            result.output,
            result.fingerprint,
        )
        assert [e["step"] for e in retrieved.effects] == [e["step"] for e in result.effects]
        again = runtime.retrieve(failed.run_id)
        assert (again.status, again.outcome, again.code, again.fingerprint) == (
            "failed",
            "VALIDATION_ERROR",
            "TOOL_UNKNOWN",
            failed.fingerprint,
        )
        assert switch.calls == calls
    # A runtime that knows none of the tools or the agent answers the same.
    with Runtime(tmp_path / "store") as bare:
        assert bare.tools == {}
        assert bare.retrieve(result.run_id).to_dict() == retrieved.to_dict()
        with pytest.raises(StoreError):
            bare.retrieve("no-such-run")


def test_replay_matches_without_calling_tools_and_writes_nothing(tmp_path: Path) -> None:
    switch = Switch()
    with runtime_at(tmp_path, POLICY, clock=Ticks()) as runtime:
        agent = build(runtime, switch)
        result = runtime.run(agent, REQUEST)
        size = runtime.store.size()
        runtime.toolkit.llm = None  # no model either
        calls = switch.calls
        report = runtime.replay(result.run_id, agent)
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == report.recorded_fingerprint == result.fingerprint
        assert switch.calls == calls + 1  # the agent ran again; no tool did
        assert runtime.store.size() == size
        assert_store_ok(runtime.store)


def test_replay_with_changed_code_reports_the_divergence(tmp_path: Path) -> None:
    switch = Switch()
    with runtime_at(tmp_path, POLICY) as runtime:
        agent = build(runtime, switch)
        result = runtime.run(agent, REQUEST)

        def changed(ctx: Any, request: dict[str, Any]) -> Any:
            ctx.llm(model="m", prompt=request["question"], max_tokens=16)
            return ctx.call("lookup", key="another key")

        report = runtime.replay(result.run_id, changed)
        assert not report.matched
        assert report.divergence is not None
        assert (report.divergence["step"], report.divergence["kind"]) == (1, "changed_effect")
        assert report.divergence["fields"] == ["args"]


def test_the_stored_fingerprint_is_what_run_returned(tmp_path: Path) -> None:
    result, _runtime = record(tmp_path, "one")
    with Runtime(tmp_path / "one") as reopened:
        end = record_of(reopened, result.run_id).end
        assert end is not None
        assert (end["fingerprint"], end["output"], end["outcome"]) == (result.fingerprint, result.output, "SUCCESS")


def test_the_fingerprint_and_seed_are_those_of_the_recorded_run(tmp_path: Path) -> None:
    """A live run hashes its input, output, arguments and results once, as it goes; the
    projection of its record, every hash computed afresh, gives the same fingerprint, and
    the default seed is H({"run": run_id})."""
    result, _runtime = record(tmp_path, "one", request={"question": "é \U0001f600", "key": "k", "words": []}, seed=None)
    with Runtime(tmp_path / "one") as reopened:
        recorded = record_of(reopened, result.run_id)
        projection = run_projection(
            agent=recorded.agent,
            input=recorded.input,
            policy_hash=recorded.policy_hash,
            effects=[recorded.effects[step] for step in sorted(recorded.effects)],
            routing=recorded.routing,
            output=result.output,
            outcome="SUCCESS",
            code=None,
        )
        assert fingerprint(projection) == result.fingerprint
        expected_seed = value_hash({"run": result.run_id})
        assert recorded.start["seed"] == expected_seed
