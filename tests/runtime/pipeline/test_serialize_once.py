"""A step's arguments and its result are each serialized once (docs/architecture.md): the
request canonicalizes its arguments when it is made, RECORD its result, and the journal's
payload is written around those bytes. The payloads stay the canonical bytes of their
documents (what hashes, fingerprints and verification read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, effect_of, runtime_at
from tests.serialization_spy import Serializations
from tracelock.core.canonical import dumps
from tracelock.runtime.runtime import Runtime

ARGS = "args-marker-5be1"
RESULT = "result-marker-c04d"


def _runtime(tmp_path: Path) -> Runtime:
    runtime = runtime_at(tmp_path, allow("look", "book", "charge"))

    def answer(text: str) -> dict[str, Any]:
        return {"said": RESULT, "size": len(text), "ratio": 0.5}

    runtime.tool(side_effect="read_only", name="look")(answer)
    runtime.tool(side_effect="idempotent", name="book")(answer)
    runtime.tool(side_effect="irreversible", name="charge")(answer)
    return runtime


def _assert_canonical_payloads(runtime: Runtime, run_id: str) -> None:
    for entry in runtime.store.entries(run_id):
        if entry.payload is not None:
            data = runtime.store.get_payload_bytes(entry.payload)
            assert data == dumps(runtime.store.get_payload(entry.payload)), entry.kind


@pytest.mark.parametrize("tool", ["look", "book", "charge"])
def test_one_call_serializes_its_arguments_once_and_its_result_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    runtime = _runtime(tmp_path)
    # A first run, so that the counted one meets nothing done once per process.
    runtime.run(lambda ctx, input: ctx.call(tool, text="warm-up"), None)
    spy = Serializations(monkeypatch, ARGS, RESULT)

    answers: list[Any] = []
    # The run's output is not the step's result: it is journaled on its own.
    result = runtime.run(lambda ctx, input: answers.append(ctx.call(tool, text=ARGS)), None)

    assert answers == [{"said": RESULT, "size": len(ARGS), "ratio": 0.5}]
    assert spy.dumped == {ARGS: 1, RESULT: 1}
    effect = effect_of(runtime, result.run_id, 0)
    assert (effect["args"], effect["result"]) == ({"text": ARGS}, answers[0])
    _assert_canonical_payloads(runtime, result.run_id)
    report = runtime.replay(result.run_id, lambda ctx, input: answers.append(ctx.call(tool, text=ARGS)))
    assert (report.matched, report.replayed_fingerprint) == (True, result.fingerprint)


def test_a_failed_step_and_a_gather_journal_the_same_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _runtime(tmp_path)
    spy = Serializations(monkeypatch, ARGS)

    def agent(ctx: Any, input: Any) -> Any:
        ctx.gather(ctx.task("look", text=ARGS + "-1"), ctx.task("charge", text=ARGS + "-2"))
        try:
            ctx.call("look", text={ARGS})  # arguments that are not JSON: ARGS_NOT_JSON
        except Exception as exc:
            return type(exc).__name__
        return None

    result = runtime.run(agent, None)
    assert result.output == "StepError"
    assert spy.dumped[ARGS] == 2  # each gather member's arguments, once
    failed = effect_of(runtime, result.run_id, 2)
    assert (failed["code"], set(failed["args"])) == ("ARGS_NOT_JSON", {"__unserializable__"})
    _assert_canonical_payloads(runtime, result.run_id)
