"""Workflows: topological order with a name tie-break, ``${...}`` substitution, invalid
definitions, and loading from JSON and YAML files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, assert_store_ok, record_of, runtime_at
from tracelock.core.fingerprint import value_hash
from tracelock.runtime.doors.workflow import Workflow, WorkflowAgent, WorkflowError, WorkflowStep
from tracelock.runtime.runtime import Runtime

POLICY = allow("fetch", "prep", "combine")

DOCUMENT = {
    "name": "report",
    "steps": [
        {"name": "combine", "tool": "combine", "after": ["fetch", "zprep"],
         "args": {"a": "${steps.fetch.value}", "b": "${steps.zprep}", "all": "${input}", "text": "not ${input}"}},
        {"name": "zprep", "tool": "prep", "args": {"n": "${input.n}"}},
        {"name": "fetch", "tool": "fetch", "args": {"key": "${input.key}", "nested": ["${input.n}", {"k": "${input.key}"}]}},
        {"name": "check", "tool": "prep", "after": ["fetch"], "args": {"n": "${steps.fetch.value}"}},
    ],
}
# Ready at first: fetch, zprep -> fetch. Then check, zprep -> check. Then zprep. Then combine.
EXPECTED_ORDER = ["fetch", "check", "zprep", "combine"]
INPUT = {"key": "abc", "n": 4}


def workflow_runtime(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], store: str = "store") -> Runtime:
    runtime = runtime_at(tmp_path, POLICY, store=store)

    @runtime.tool()
    def fetch(key: str, nested: list[Any]) -> dict[str, Any]:
        calls.append(("fetch", {"key": key, "nested": nested}))
        return {"value": len(key) * 10}

    @runtime.tool()
    def prep(n: int) -> int:
        calls.append(("prep", {"n": n}))
        return n + 1

    @runtime.tool()
    def combine(a: int, b: int, all: dict[str, Any], text: str) -> dict[str, Any]:
        calls.append(("combine", {"a": a, "b": b}))
        return {"sum": a + b, "all": all, "text": text}

    return runtime


def test_steps_run_in_topological_order_with_names_breaking_ties(tmp_path: Path) -> None:
    workflow = Workflow.from_mapping(DOCUMENT)
    assert [step.name for step in workflow.order()] == EXPECTED_ORDER
    calls: list[tuple[str, dict[str, Any]]] = []
    with workflow_runtime(tmp_path, calls) as runtime:
        result = runtime.run_workflow(workflow, INPUT)
        assert result.ok, result.error
        assert calls == [
            ("fetch", {"key": "abc", "nested": [4, {"k": "abc"}]}),
            ("prep", {"n": 30}),
            ("prep", {"n": 4}),
            ("combine", {"a": 30, "b": 5}),
        ]
        assert result.output == {
            "fetch": {"value": 30},
            "check": 31,
            "zprep": 5,
            "combine": {"sum": 35, "all": INPUT, "text": "not ${input}"},
        }
        record = record_of(runtime, result.run_id)
        assert record.agent == "workflow:report"
        assert record.effects[3]["args"] == {"a": 30, "b": 5, "all": INPUT, "text": "not ${input}"}
        marks = [
            runtime.store.get_payload(entry.payload)
            for entry in runtime.store.entries(result.run_id)
            if entry.kind == "workflow.step" and entry.payload
        ]
        assert [(mark["step"], mark["index"]) for mark in marks] == list(zip(EXPECTED_ORDER, range(4), strict=True))
        assert marks[2]["input_hash"] == value_hash({"n": 4})
        assert marks[2]["output_hash"] == value_hash(5)
        assert runtime.replay(result.run_id, WorkflowAgent(workflow)).matched
        assert_store_ok(runtime.store)


def test_function_steps_receive_their_dependencies_outputs(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def summarize(ctx: Any, inputs: dict[str, Any]) -> str:
        seen.append(inputs)
        return f"{inputs['fetch']['value']}/{inputs['zprep']}"

    steps = (
        WorkflowStep("zprep", tool="prep", args={"n": 1}),
        WorkflowStep("fetch", tool="fetch", args={"key": "xy", "nested": []}),
        WorkflowStep("summary", fn=summarize, after=("zprep", "fetch")),
    )
    with workflow_runtime(tmp_path, []) as runtime:
        result = runtime.run_workflow(Workflow("fn", steps), None)
        assert result.output["summary"] == "20/2"
        assert seen == [{"zprep": 2, "fetch": {"value": 20}}]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((WorkflowStep("a", tool="t", after=("b",)), WorkflowStep("b", tool="t", after=("a",))), "cycle"),
        ((WorkflowStep("a", tool="t", after=("a",)),), "cycle"),
        (
            (
                WorkflowStep("a", tool="t"),
                WorkflowStep("b", tool="t", after=("a", "c")),
                WorkflowStep("c", tool="t", after=("b",)),
            ),
            "cycle",
        ),
        ((WorkflowStep("a", tool="t", after=("ghost",)),), "unknown"),
        ((WorkflowStep("a", tool="t"), WorkflowStep("a", tool="u")), "duplicate"),
    ],
    ids=["two-cycle", "self-loop", "three-cycle", "unknown-dependency", "duplicate-name"],
)
def test_invalid_graphs_are_refused(steps: tuple[WorkflowStep, ...], message: str) -> None:
    with pytest.raises(WorkflowError, match=message) as caught:
        Workflow("bad", steps)
    assert caught.value.code == "WORKFLOW_INVALID"


@pytest.mark.parametrize(
    "document",
    [
        {"steps": []},
        {"name": "x", "steps": "fetch"},
        {"name": "x", "steps": [{"name": "a", "tool": "t", "retries": 3}]},
        {"name": "x", "steps": [{"name": "a b", "tool": "t"}]},
        {"name": "x", "steps": [{"name": "a"}]},
    ],
)
def test_invalid_documents_are_refused(document: dict[str, Any]) -> None:
    with pytest.raises(WorkflowError):
        Workflow.from_mapping(document)


def test_a_step_needs_exactly_one_of_tool_and_fn() -> None:
    with pytest.raises(WorkflowError):
        WorkflowStep("both", tool="t", fn=lambda ctx, inputs: None)


YAML = """
name: report
steps:
  - name: combine
    tool: combine
    after: [fetch, zprep]
    args:
      a: ${steps.fetch.value}
      b: ${steps.zprep}
      all: ${input}
      text: not ${input}
  - name: zprep
    tool: prep
    args: {n: "${input.n}"}
  - name: fetch
    tool: fetch
    args:
      key: ${input.key}
      nested: ["${input.n}", {k: "${input.key}"}]
  - name: check
    tool: prep
    after: [fetch]
    args: {n: "${steps.fetch.value}"}
"""


def test_workflows_load_from_json_and_yaml_files(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps(DOCUMENT))
    (tmp_path / "report.yaml").write_text(YAML)
    loaded = [Workflow.load(tmp_path / "report.json"), Workflow.load(tmp_path / "report.yaml")]
    assert loaded[0] == loaded[1] == Workflow.from_mapping(DOCUMENT)
    fingerprints = []
    for index, workflow in enumerate(loaded):
        assert [step.name for step in workflow.order()] == EXPECTED_ORDER
        with workflow_runtime(tmp_path, [], store=f"store-{index}") as runtime:
            result = runtime.run_workflow(workflow, INPUT)
            assert result.ok
            fingerprints.append(result.fingerprint)
    assert fingerprints[0] == fingerprints[1]


def test_a_malformed_workflow_file_is_a_workflow_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "bad.yaml").write_text("steps: [")
    for name in ("bad.json", "bad.yaml"):
        with pytest.raises(WorkflowError):
            Workflow.load(tmp_path / name)
