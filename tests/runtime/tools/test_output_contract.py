"""Tool output contracts (issue 25, item 4): a result that does not satisfy the tool's
declared result schema (given, or derived from its return annotation) ends the step
EXECUTION_ERROR [RESULT_CONTRACT_VIOLATION], is journaled, and never reaches the agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, effect_of, record_of, runtime_at
from tracelock.core.fingerprint import value_hash
from tracelock.runtime.errors import StepError
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.runtime.tools.tools import ToolDefinitionError

kit = Toolkit()
DRIFTED = {"shape": "old"}


@kit.tool(timeout=None)
def annotated(key: str) -> dict[str, int]:
    """Promises an object of integers; returns a list when DRIFTED says so."""
    if DRIFTED["shape"] == "new":
        return [key]  # type: ignore[return-value]
    return {key: len(key)}


@kit.tool(timeout=None, result_schema={"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}})
def declared(key: str) -> Any:
    return {"id": key} if key != "bad" else {"ID": key}


@kit.tool(timeout=None, result_schema={})
def opted_out(key: str) -> dict[str, int]:
    return [key]  # type: ignore[return-value]


@kit.tool(timeout=None)
def unannotated(key: str):  # type: ignore[no-untyped-def]
    return [key]


@kit.tool(side_effect="idempotent", timeout=None)
def store_it(key: str) -> str:
    return 42  # type: ignore[return-value]


POLICY = allow("annotated", "declared", "opted_out", "unannotated", "store_it")


def calling(tool: str, key: str = "ab") -> Any:
    def agent(ctx: Any, task: Any) -> Any:
        try:
            return {"result": ctx.call(tool, key=key)}
        except StepError as exc:
            return {"refused": exc.step_code, "phase": exc.phase.value}

    return agent


@pytest.fixture(autouse=True)
def _old_shape() -> Any:
    DRIFTED["shape"] = "old"
    yield
    DRIFTED["shape"] = "old"


def test_schemas_come_from_annotations_or_declarations() -> None:
    assert kit.tools["annotated"].result_schema == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert kit.tools["declared"].result_schema is not None
    assert kit.tools["opted_out"].result_schema is None
    assert kit.tools["unannotated"].result_schema is None


def test_a_result_that_keeps_its_contract_passes(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        assert runtime.run(calling("annotated"), {}).output == {"result": {"ab": 2}}
        assert runtime.run(calling("declared"), {}).output == {"result": {"id": "ab"}}
        assert runtime.run(calling("opted_out"), {}).output == {"result": ["ab"]}
        assert runtime.run(calling("unannotated"), {}).output == {"result": ["ab"]}


def test_contract_drift_is_an_execution_error_never_passed_on(tmp_path: Path) -> None:
    DRIFTED["shape"] = "new"
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        result = runtime.run(calling("annotated"), {})
        assert result.output == {"refused": "RESULT_CONTRACT_VIOLATION", "phase": "RECORD"}
        effect = effect_of(runtime, result.run_id, 0)
    assert effect["outcome"] == "EXECUTION_ERROR" and effect["code"] == "RESULT_CONTRACT_VIOLATION"
    assert effect["result"] is None  # journaled by its hash only
    assert effect["error"]["details"] == {"tool": "annotated", "result_hash": value_hash(["ab"])}
    assert "breaks its output contract" in effect["error"]["message"]


def test_a_declared_schema_is_checked(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        result = runtime.run(calling("declared", "bad"), {})
    assert result.output == {"refused": "RESULT_CONTRACT_VIOLATION", "phase": "RECORD"}


def test_an_idempotent_effects_drift_is_its_intents_result(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        result = runtime.run(calling("store_it"), {})
        record = record_of(runtime, result.run_id)
    kinds = [entry.kind for entry in record.entries]
    assert "effect.intent" in kinds and "effect.result" in kinds
    assert record.effects[0]["code"] == "RESULT_CONTRACT_VIOLATION" and record.effects[0]["attempts"] == 1


def test_replay_answers_the_recorded_drift(tmp_path: Path) -> None:
    DRIFTED["shape"] = "new"
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as runtime:
        run = runtime.run(calling("annotated"), {}).run_id
        DRIFTED["shape"] = "old"  # the tool is fixed since: replay still answers the record
        assert runtime.replay(run, calling("annotated")).matched


def test_an_invalid_result_schema_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="invalid result JSON Schema"):
        Toolkit().tool("t", result_schema={"type": 12})(lambda key: key)


def test_the_contract_is_part_of_the_tools_definition() -> None:
    one, two = Toolkit(), Toolkit()
    one.tool("t", timeout=None, result_schema={"type": "string"})(lambda key: key)
    two.tool("t", timeout=None, result_schema={"type": "integer"})(lambda key: key)
    assert one.tools["t"].definition()["result_schema"] == {"type": "string"}
    assert one.tools["t"].definition_digest != two.tools["t"].definition_digest
