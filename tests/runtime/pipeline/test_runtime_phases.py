"""The seven phases: every way a step can fail, with its stable code and the phase it failed
in, as the agent sees it (StepError) and as the journal records it; retries; how a run ends."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import (
    Sleeps,
    allow,
    assert_store_ok,
    effect_of,
    record_of,
    runtime_at,
)
from tracelock.runtime.errors import StepError
from tracelock.runtime.outcomes import Outcome, Phase, lookup_code
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.tools import RetryPolicy

POLICY = allow(
    "add",
    "boom",
    "hang",
    "odd_result",
    {"name": "limited", "args": {"n": {"type": "integer", "max": 10}}},
    {"name": "forbidden", "allow": False},
    llm={"allow": True, "models": ["m1"]},
)


@pytest.fixture
def calls() -> Counter[str]:
    return Counter()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # lets a timed-out tool's worker thread finish


@pytest.fixture
def runtime(tmp_path: Path, calls: Counter[str], release: threading.Event) -> Iterator[Runtime]:
    with runtime_at(tmp_path, POLICY) as runtime:

        @runtime.tool()
        def add(a: int, b: int = 0) -> int:
            calls["add"] += 1
            return a + b

        @runtime.tool()
        def boom() -> None:
            calls["boom"] += 1
            raise RuntimeError("the disk is on fire")

        @runtime.tool(timeout=0.2)
        def hang() -> str:
            calls["hang"] += 1
            release.wait(5)
            return "late"

        @runtime.tool()
        def odd_result() -> Any:
            calls["odd_result"] += 1
            return {"a set": {1, 2}}

        @runtime.tool()
        def limited(n: int) -> int:
            calls["limited"] += 1
            return n

        @runtime.tool()
        def unlisted() -> str:
            calls["unlisted"] += 1
            return "should never run"

        @runtime.tool()
        def forbidden() -> str:
            calls["forbidden"] += 1
            return "should never run"

        yield runtime


CASES = [
    # id, the request, outcome, code, phase, attempts, the tool that must not have run
    ("unknown-tool", lambda ctx: ctx.call("nope", x=1), "VALIDATION_ERROR", "TOOL_UNKNOWN", "VALIDATE", 0, None),
    ("nan-args", lambda ctx: ctx.call("add", a=float("nan")), "VALIDATION_ERROR", "ARGS_NOT_JSON", "PARSE", 0, "add"),
    ("set-args", lambda ctx: ctx.call("add", a={1, 2}), "VALIDATION_ERROR", "ARGS_NOT_JSON", "PARSE", 0, "add"),
    ("huge-int-args", lambda ctx: ctx.call("add", a=2**60), "VALIDATION_ERROR", "ARGS_NOT_JSON", "PARSE", 0, "add"),
    ("schema-mismatch", lambda ctx: ctx.call("add", a="one"), "VALIDATION_ERROR", "ARGS_SCHEMA_MISMATCH", "VALIDATE", 0, "add"),
    ("missing-arg", lambda ctx: ctx.call("add", b=1), "VALIDATION_ERROR", "ARGS_SCHEMA_MISMATCH", "VALIDATE", 0, "add"),
    ("not-in-policy", lambda ctx: ctx.call("unlisted"), "DENIED", "POLICY_TOOL_NOT_ALLOWED", "AUTHORIZE", 0, "unlisted"),
    ("denied-by-policy", lambda ctx: ctx.call("forbidden"), "DENIED", "POLICY_TOOL_DENIED", "AUTHORIZE", 0, "forbidden"),
    ("argument-rejected", lambda ctx: ctx.call("limited", n=11), "DENIED", "POLICY_ARGUMENT_REJECTED", "AUTHORIZE", 0, "limited"),
    ("tool-raises", lambda ctx: ctx.call("boom"), "EXECUTION_ERROR", "TOOL_RAISED", "EXECUTE", 1, None),
    ("tool-hangs", lambda ctx: ctx.call("hang"), "EXECUTION_ERROR", "TOOL_TIMEOUT", "EXECUTE", 1, None),
    ("result-not-json", lambda ctx: ctx.call("odd_result"), "EXECUTION_ERROR", "RESULT_NOT_JSON", "RECORD", 1, None),
    ("llm-not-configured", lambda ctx: ctx.llm(model="m1", prompt="hi"), "EXECUTION_ERROR", "LLM_NOT_CONFIGURED", "EXECUTE", 1, None),
    ("llm-both-prompt-and-messages", lambda ctx: ctx.llm(model="m1", prompt="hi", messages=[]), "VALIDATION_ERROR", "LLM_REQUEST_INVALID", "VALIDATE", 0, None),
    ("llm-zero-tokens", lambda ctx: ctx.llm(model="m1", prompt="hi", max_tokens=0), "VALIDATION_ERROR", "LLM_REQUEST_INVALID", "VALIDATE", 0, None),
    ("llm-model-not-allowed", lambda ctx: ctx.llm(model="m2", prompt="hi"), "DENIED", "POLICY_MODEL_NOT_ALLOWED", "AUTHORIZE", 0, None),
]


@pytest.mark.parametrize(
    ("request_", "outcome", "code", "phase", "attempts", "untouched"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_each_failure_has_its_code_and_phase_in_the_error_and_the_journal(
    runtime: Runtime,
    calls: Counter[str],
    request_: Callable[[Any], Any],
    outcome: str,
    code: str,
    phase: str,
    attempts: int,
    untouched: str | None,
) -> None:
    seen: list[StepError] = []

    def agent(ctx: Any, _: Any) -> Any:
        ctx.random()  # step 0: the failing request is step 1
        try:
            request_(ctx)
        except StepError as failure:
            seen.append(failure)
            raise
        return "unreachable"

    result = runtime.run(agent)

    # The agent saw a StepError naming the outcome, the code, the phase and the step.
    (failure,) = seen
    assert failure.outcome is Outcome(outcome)
    assert failure.step_code == code
    assert failure.phase is Phase(phase)
    assert failure.step == 1
    assert lookup_code(code).outcome is Outcome(outcome)
    # Uncaught, it ended the run with the same outcome and code.
    assert (result.status, result.outcome, result.code) == ("failed", outcome, code)
    assert result.output is None
    assert result.fingerprint is not None
    # The journal tells the same story.
    record = record_of(runtime, result.run_id)
    effect = record.effects[1]
    assert (effect["outcome"], effect["code"], effect["phase"]) == (outcome, code, phase)
    assert effect["attempts"] == attempts
    assert effect["result"] is None
    assert effect["error"]["message"] == failure.reason
    assert record.status == "failed"
    assert record.end is not None
    assert (record.end["outcome"], record.end["code"]) == (outcome, code)
    assert record.end["fingerprint"] == result.fingerprint
    if untouched is not None:
        assert calls[untouched] == 0
    assert_store_ok(runtime.store)


def test_arguments_that_are_not_json_are_recorded_as_such(runtime: Runtime) -> None:
    result = runtime.run(lambda ctx, _: ctx.call("add", a=float("nan")))
    effect = effect_of(runtime, result.run_id, 0)
    assert set(effect["args"]) == {"__unserializable__"}
    assert "nan" in effect["args"]["__unserializable__"].lower()


def test_a_tool_exception_is_named_in_the_record(runtime: Runtime, calls: Counter[str]) -> None:
    result = runtime.run(lambda ctx, _: ctx.call("boom"))
    effect = effect_of(runtime, result.run_id, 0)
    assert effect["error"]["details"]["exception"] == "RuntimeError"
    assert "the disk is on fire" in effect["error"]["message"]
    assert calls["boom"] == 1


def test_a_timed_out_step_records_the_configured_timeout(runtime: Runtime, calls: Counter[str]) -> None:
    result = runtime.run(lambda ctx, _: ctx.call("hang"))
    assert result.code == "TOOL_TIMEOUT"
    assert effect_of(runtime, result.run_id, 0)["timeout_ms"] == 200
    assert calls["hang"] == 1


def test_a_caught_step_error_lets_the_run_carry_on(runtime: Runtime) -> None:
    def agent(ctx: Any, _: Any) -> Any:
        try:
            ctx.call("unlisted")
        except StepError as denied:
            return {"denied": denied.step_code, "sum": ctx.call("add", a=2, b=3)}
        return None

    result = runtime.run(agent)
    assert result.ok
    assert result.output == {"denied": "POLICY_TOOL_NOT_ALLOWED", "sum": 5}
    record = record_of(runtime, result.run_id)
    assert record.effects[0]["outcome"] == "DENIED"
    assert record.effects[1]["outcome"] == "SUCCESS"
    assert_store_ok(runtime.store)


def test_an_agent_bug_ends_the_run_with_agent_raised(runtime: Runtime) -> None:
    def agent(ctx: Any, payload: dict[str, Any]) -> Any:
        ctx.call("add", a=1)
        return payload["missing"]

    result = runtime.run(agent, {"present": 1})
    assert (result.status, result.outcome, result.code) == ("failed", "EXECUTION_ERROR", "AGENT_RAISED")
    assert result.error is not None and result.error.startswith("KeyError")
    assert result.output is None
    end = record_of(runtime, result.run_id).end
    assert end is not None and end["code"] == "AGENT_RAISED"
    assert_store_ok(runtime.store)


@pytest.mark.parametrize("output", [{1, 2}, float("inf"), {"k": object()}, 2**64])
def test_an_output_that_is_not_json_ends_the_run_with_output_not_json(runtime: Runtime, output: Any) -> None:
    result = runtime.run(lambda ctx, _: output)
    assert (result.status, result.outcome, result.code) == ("failed", "EXECUTION_ERROR", "OUTPUT_NOT_JSON")
    assert result.output is None
    end = record_of(runtime, result.run_id).end
    assert end is not None and (end["code"], end["output"]) == ("OUTPUT_NOT_JSON", None)
    assert_store_ok(runtime.store)


def test_retries_use_fixed_delays_through_the_injected_sleeper(tmp_path: Path) -> None:
    sleeps = Sleeps()
    attempts: list[int] = []
    with runtime_at(tmp_path, allow("flaky"), sleep=sleeps) as runtime:

        @runtime.tool(retry=RetryPolicy(max_attempts=4, delays_ms=(100, 250)))
        def flaky() -> str:
            attempts.append(len(attempts) + 1)
            if len(attempts) < 3:
                raise ConnectionError("try again")
            return "finally"

        result = runtime.run(lambda ctx, _: ctx.call("flaky"))
        assert result.output == "finally"
        assert attempts == [1, 2, 3]
        assert sleeps.calls == [0.1, 0.25]
        effect = effect_of(runtime, result.run_id, 0)
        assert (effect["outcome"], effect["attempts"]) == ("SUCCESS", 3)
        assert_store_ok(runtime.store)


def test_exhausted_retries_record_every_attempt(tmp_path: Path) -> None:
    sleeps = Sleeps()
    with runtime_at(tmp_path, allow("down"), sleep=sleeps) as runtime:

        @runtime.tool(retry=RetryPolicy(max_attempts=3, delays_ms=(40,)))
        def down() -> None:
            raise ConnectionError("still down")

        result = runtime.run(lambda ctx, _: ctx.call("down"))
        assert (result.outcome, result.code) == ("EXECUTION_ERROR", "TOOL_RAISED")
        assert sleeps.calls == [0.04, 0.04]
        effect = effect_of(runtime, result.run_id, 0)
        assert (effect["phase"], effect["attempts"]) == ("EXECUTE", 3)
        assert effect["error"]["details"]["attempt"] == 3
        assert_store_ok(runtime.store)


def test_only_the_listed_exceptions_are_retried(tmp_path: Path) -> None:
    sleeps = Sleeps()
    tries: list[str] = []
    with runtime_at(tmp_path, allow("picky"), sleep=sleeps) as runtime:

        @runtime.tool(retry=RetryPolicy(max_attempts=5, delays_ms=(10,), retry_on=(ConnectionError,)))
        def picky() -> None:
            tries.append("x")
            raise ValueError("a bug, not a blip")

        result = runtime.run(lambda ctx, _: ctx.call("picky"))
        assert result.code == "TOOL_RAISED"
        assert tries == ["x"]
        assert sleeps.calls == []
        assert effect_of(runtime, result.run_id, 0)["attempts"] == 1


def test_an_idempotent_tool_gets_the_same_key_on_every_attempt(tmp_path: Path) -> None:
    keys: list[str | None] = []
    with runtime_at(tmp_path, allow("charge")) as runtime:

        @runtime.tool(side_effect="idempotent", retry=RetryPolicy(max_attempts=3))
        def charge(amount: int, idempotency_key: str | None = None) -> int:
            keys.append(idempotency_key)
            if len(keys) < 2:
                raise TimeoutError("gateway")
            return amount

        result = runtime.run(lambda ctx, _: ctx.call("charge", amount=5))
        assert result.output == 5
        effect = effect_of(runtime, result.run_id, 0)
        assert effect["attempts"] == 2
        assert keys == [effect["idempotency_key"]] * 2
        assert isinstance(keys[0], str) and keys[0].startswith("tlk-")


def test_llm_provider_failures_are_recorded(tmp_path: Path) -> None:
    def provider(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("prompt") == "raise":
            raise OSError("network")
        if request.get("prompt") == "bad":
            return {"text": "no content member"}
        return {"content": "hello " + str(request["prompt"]), "usage": {"input_tokens": 3, "output_tokens": 2}}

    with runtime_at(tmp_path, POLICY, llm=provider) as runtime:

        def agent(ctx: Any, _: Any) -> Any:
            codes = []
            for prompt in ("raise", "bad"):
                try:
                    ctx.llm(model="m1", prompt=prompt)
                except StepError as failure:
                    codes.append([failure.step_code, failure.phase.value])
            return {"codes": codes, "ok": ctx.llm(model="m1", prompt="you", max_tokens=8)["content"]}

        result = runtime.run(agent)
        assert result.output == {
            "codes": [["LLM_PROVIDER_ERROR", "EXECUTE"], ["LLM_RESPONSE_INVALID", "EXECUTE"]],
            "ok": "hello you",
        }
        record = record_of(runtime, result.run_id)
        assert record.effects[2]["args"] == {"model": "m1", "max_tokens": 8, "prompt": "you"}
        assert record.effects[2]["kind"] == "llm"
        assert_store_ok(runtime.store)
