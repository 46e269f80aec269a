"""Replay catches every kind of code change at the right step and field; fork, drift, diff,
the replay gate and patch markers."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tracelock import Runtime, Toolkit
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.compare import first_difference, projection_of, step_table
from tracelock.runtime.replay.drift import detect_drift
from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.replay.gate import replay_all

POLICY = {
    "version": 1,
    "tools": [{"name": "search"}, {"name": "summarize"}, {"name": "notify"}],
    "llm": {"allow": True, "models": ["m"]},
}
CALLS: list[str] = []
kit = Toolkit(llm=lambda request: {"content": f"answer to {request.get('prompt')}"})


@kit.tool(timeout=None)
def search(query: str) -> list[str]:
    CALLS.append(f"search:{query}")
    return [query.upper(), query.lower()]


@kit.tool(timeout=None)
def summarize(items: list[str]) -> str:
    CALLS.append("summarize")
    return " / ".join(items)


@kit.tool(timeout=None)
def notify(text: str) -> bool:
    CALLS.append("notify")
    return True


def base(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="m", prompt=f"plan {task['q']}", max_tokens=10)
    found = ctx.call("search", query=task["q"])
    summary = ctx.call("summarize", items=found)
    return {"plan": plan["content"], "summary": summary}


def changed_argument(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="m", prompt=f"plan {task['q']}", max_tokens=10)
    found = ctx.call("search", query=task["q"] + "!")
    summary = ctx.call("summarize", items=found)
    return {"plan": plan["content"], "summary": summary}


def added_call(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    result = base(ctx, task)
    ctx.call("notify", text="done")
    return result


def removed_call(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="m", prompt=f"plan {task['q']}", max_tokens=10)
    found = ctx.call("search", query=task["q"])
    return {"plan": plan["content"], "summary": " / ".join(found)}


def reordered(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    found = ctx.call("search", query=task["q"])
    plan = ctx.llm(model="m", prompt=f"plan {task['q']}", max_tokens=10)
    summary = ctx.call("summarize", items=found)
    return {"plan": plan["content"], "summary": summary}


def changed_prompt(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="m", prompt=f"think hard, then plan {task['q']}", max_tokens=10)
    found = ctx.call("search", query=task["q"])
    summary = ctx.call("summarize", items=found)
    return {"plan": plan["content"], "summary": summary}


def changed_output_handling(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="m", prompt=f"plan {task['q']}", max_tokens=10)
    found = ctx.call("search", query=task["q"])
    summary = ctx.call("summarize", items=found)
    return {"plan": plan["content"], "summary": summary.upper()}


def new_clock_read(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="m", prompt=f"plan {task['q']}", max_tokens=10)
    ctx.now()
    found = ctx.call("search", query=task["q"])
    summary = ctx.call("summarize", items=found)
    return {"plan": plan["content"], "summary": summary}


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    handle = Runtime(tmp_path / "store", POLICY, toolkits=(kit,))
    yield handle
    handle.close()


def _record(runtime: Runtime) -> str:
    result = runtime.run(base, {"q": "Order"})
    assert result.ok
    return result.run_id


def test_unchanged_agent_replays_identically_without_running_tools(runtime: Runtime) -> None:
    run_id = _record(runtime)
    recorded = runtime.retrieve(run_id)
    CALLS.clear()
    report = runtime.replay(run_id, base)
    assert report.matched and report.divergence is None
    assert report.replayed_fingerprint == recorded.fingerprint
    assert CALLS == []


@pytest.mark.parametrize(
    ("agent", "kind", "step", "fields", "pointer"),
    [
        (changed_argument, "changed_effect", 1, ["args"], "/args/query"),
        (added_call, "added_effect", 3, None, None),
        (removed_call, "missing_effect", 2, None, None),
        (reordered, "reordered_effect", 0, ["args", "kind", "name"], "/kind"),
        (changed_prompt, "changed_effect", 0, ["args"], "/args/prompt"),
        (changed_output_handling, "changed_output", None, None, "/output/summary"),
        (new_clock_read, "changed_effect", 1, ["args", "kind", "name"], "/kind"),
    ],
)
def test_each_kind_of_change_is_caught_at_the_right_step(
    runtime: Runtime, agent: Any, kind: str, step: int | None, fields: list[str] | None, pointer: str | None
) -> None:
    run_id = _record(runtime)
    report = runtime.replay(run_id, agent)
    assert not report.matched
    divergence = report.divergence or {}
    assert divergence["kind"] == kind
    assert divergence["step"] == step
    if fields is not None:
        assert divergence["fields"] == fields
    if pointer is not None:
        assert pointer in [change["path"] for change in divergence["diff"]]


def test_fork_reuses_the_prefix_without_executing_it(runtime: Runtime) -> None:
    run_id = _record(runtime)
    CALLS.clear()
    child = fork_run(runtime, run_id, 2, changed_output_handling)
    assert child.ok and child.run_id != run_id
    assert CALLS == ["summarize"]  # steps 0 and 1 (LLM, search) were reused, not re-run
    assert child.parent is not None and child.parent["run"] == run_id and child.parent["reused_steps"] == [0, 1]
    record = load_run(runtime.store, child.run_id)
    assert record.parent == {"run": run_id, "step": 2}
    assert record.effects[1]["reused_from"] == {"run": run_id, "step": 1}


def test_fork_refuses_a_prefix_the_new_code_does_not_reproduce(runtime: Runtime) -> None:
    from tracelock import DivergenceError

    run_id = _record(runtime)
    with pytest.raises(DivergenceError):
        fork_run(runtime, run_id, 2, changed_argument)


def unseeded(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    return {"pick": ctx.call("search", query=str(random.random()))}


def seeded(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    return {"pick": ctx.call("search", query=str(ctx.random()))}


def test_drift_catches_direct_randomness_and_passes_ctx_random() -> None:
    def make(store: Any) -> Runtime:
        # Not strict: this test is about what happens when nondeterminism gets through.
        return Runtime(store, POLICY, toolkits=(kit,), strict=False)

    drifting = detect_drift(make, unseeded, {"q": "x"}, 3)
    assert drifting.drifted
    assert drifting.drift is not None
    assert drifting.drift["kind"] == "argument" and drifting.drift["step"] == 0
    steady = detect_drift(make, seeded, {"q": "x"}, 3)
    assert not steady.drifted and len(set(steady.fingerprints)) == 1


def test_diff_names_the_differing_steps(runtime: Runtime) -> None:
    first = runtime.run(base, {"q": "a"}).run_id
    second = runtime.run(base, {"q": "b"}).run_id
    same = runtime.run(base, {"q": "a"}).run_id
    a, b, c = (load_run(runtime.store, run) for run in (first, second, same))
    assert first_difference(projection_of(a), projection_of(c)) is None
    difference = first_difference(projection_of(a), projection_of(b))
    assert difference is not None and difference["kind"] == "input"
    rows = step_table(a, b)
    assert [row["differs"] for row in rows] == [["args", "result"], ["args", "result"], ["args", "result"]]


def test_replay_gate_fails_on_any_divergence(runtime: Runtime) -> None:
    for query in ("a", "b", "c"):
        runtime.run(base, {"q": query})
    assert replay_all(runtime, agent=base).ok
    report = replay_all(runtime, agent=changed_argument)
    assert not report.ok and len(report.diverged) == 3 and report.checked == 3


def patched_agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    if ctx.patched("notify-v2"):
        ctx.call("notify", text=task["q"])
    return base(ctx, task)


def test_patch_marker_accepts_a_deliberate_change(runtime: Runtime) -> None:
    old = _record(runtime)
    assert not runtime.replay(old, added_call).matched
    assert runtime.replay(old, patched_agent).matched  # old run: no marker, old path
    new = runtime.run(patched_agent, {"q": "Order"}).run_id
    assert "notify-v2" in load_run(runtime.store, new).patches
    assert runtime.replay(new, patched_agent).matched
