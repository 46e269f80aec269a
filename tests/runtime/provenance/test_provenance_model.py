"""Model identity (issue 25, item 5): an LLM step records the model the provider says
answered beside the requested one; diff and drift name ``model`` when the provider
answered with another model; drift can hold LLM answers fixed to separate code drift from
model variance."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.runtime.runtime_helpers import (
    Ids,
    Sleeps,
    Ticks,
    allow,
    effect_of,
    record_of,
    runtime_at,
)
from tracelock.runtime.pipeline.held import HeldAnswers, answered_model
from tracelock.runtime.replay.compare import run_difference, step_table
from tracelock.runtime.replay.drift import detect_drift
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit

POLICY = allow("lookup", llm={"allow": True, "models": ["gpt-x"]})


class Provider:
    """Answers ``content`` from ``contents`` in turn, naming ``models`` in turn."""

    def __init__(self, models: list[str], contents: list[str] | None = None) -> None:
        self.models = itertools.cycle(models)
        self.contents = itertools.cycle(contents or ["use lookup"])
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return {"content": next(self.contents), "model": next(self.models), "usage": {"input_tokens": 3, "output_tokens": 2}}


kit = Toolkit()
COUNTER = itertools.count()


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key


def agent(ctx: Any, task: Any) -> Any:
    answer = ctx.llm(model="gpt-x", prompt=task["q"], max_tokens=16)
    return ctx.call("lookup", key=answer["content"])


def drifting_code(ctx: Any, task: Any) -> Any:
    answer = ctx.llm(model="gpt-x", prompt=task["q"], max_tokens=16)
    return ctx.call("lookup", key=f"{answer['content']}-{next(COUNTER)}")  # code drift


def test_the_answering_model_is_recorded_beside_the_requested_one(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,), llm=Provider(["gpt-x-2026-01"])) as runtime:
        result = runtime.run(agent, {"q": "hi"})
        effect = effect_of(runtime, result.run_id, 0)
    assert effect["args"]["model"] == "gpt-x" and effect["model"] == "gpt-x-2026-01"
    assert answered_model({"llm": {"model": "m"}}) == "m"  # a captured call's answer
    assert answered_model({"content": "x"}) is None


def test_diff_names_the_model_when_the_provider_answered_with_another(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,), llm=Provider(["gpt-x-2026-01", "gpt-x-2026-06"])) as runtime:
        a = runtime.run(agent, {"q": "hi"}, seed="s")
        b = runtime.run(agent, {"q": "hi"}, seed="s")
        ra, rb = record_of(runtime, a.run_id), record_of(runtime, b.run_id)
    assert a.fingerprint != b.fingerprint
    found = run_difference(ra, rb)
    assert found is not None
    assert (found["component"], found["kind"], found["step"]) == ("model", "model", 0)
    assert (found["a"], found["b"], found["requested"]) == ("gpt-x-2026-01", "gpt-x-2026-06", "gpt-x")
    assert "model" in step_table(ra, rb)[0]["differs"]


def test_same_model_other_answer_is_an_output_difference(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,), llm=Provider(["m"], ["one", "two"])) as runtime:
        a, b = runtime.run(agent, {"q": "hi"}, seed="s"), runtime.run(agent, {"q": "hi"}, seed="s")
        found = run_difference(record_of(runtime, a.run_id), record_of(runtime, b.run_id))
    assert found is not None and found["kind"] == "output" and found["component"] == "effects"


def _maker(provider: Provider) -> Any:
    def make(store: Any) -> Runtime:
        return Runtime(store, POLICY, toolkits=(kit,), llm=provider, clock=Ticks(), sleep=Sleeps(), ids=Ids())

    return make


def test_drift_can_hold_llm_answers_fixed() -> None:
    varied = detect_drift(_maker(Provider(["m"], ["one", "two", "three"])), agent, {"q": "hi"}, 3)
    assert varied.drifted and varied.drift is not None and varied.drift["step"] == 0
    provider = Provider(["m"], ["one", "two", "three"])
    held = detect_drift(_maker(provider), agent, {"q": "hi"}, 3, hold_llm=True)
    assert not held.drifted and held.held_llm and held.to_dict()["held_llm"] is True
    assert provider.calls == 1  # only the first attempt asked the model
    models = detect_drift(_maker(Provider(["m-1", "m-2"])), agent, {"q": "hi"}, 2)
    assert models.drift is not None and models.drift["component"] == "model"


def test_held_answers_still_show_code_drift() -> None:
    held = detect_drift(_maker(Provider(["m"], ["one", "two"])), drifting_code, {"q": "hi"}, 2, hold_llm=True)
    assert held.drift is not None and held.drift["kind"] == "argument" and held.drift["step"] == 1


def test_held_answers_are_used_once_in_step_order() -> None:
    effects = [
        {"step": 2, "kind": "llm", "outcome": "SUCCESS", "args": {"p": 1}, "result": "second"},
        {"step": 0, "kind": "llm", "outcome": "SUCCESS", "args": {"p": 1}, "result": "first"},
        {"step": 1, "kind": "tool", "outcome": "SUCCESS", "args": {"p": 1}, "result": "tool"},
    ]
    held = HeldAnswers(effects)
    assert held.take(b'{"p":1}') == (True, "first")
    assert held.take(b'{"p":1}') == (True, "second")
    assert held.take(b'{"p":1}') == (False, None)
    assert held.take(None) == (False, None)
