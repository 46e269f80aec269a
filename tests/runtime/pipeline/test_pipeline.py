"""The step pipeline as its own part: one entry behind every door, a request canonicalized
once, and a second door (the sandbox's ``Files``) that records and replays exactly as
``ctx.call`` does."""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.runtime.runtime_helpers import allow, runtime_at
from tracelock.core.canonical import dumps
from tracelock.runtime.doors.files import Files
from tracelock.runtime.errors import StepError
from tracelock.runtime.outcomes import Phase
from tracelock.runtime.pipeline import Environment, Pipeline, StepRequest, phases
from tracelock.runtime.pipeline.request import idempotency_key
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.policy.sandbox import FS_OPERATIONS
from tracelock.runtime.tools.toolkit import Toolkit

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(args=st.dictionaries(st.text(max_size=6), JSON, max_size=4))
def test_a_request_carries_its_arguments_canonical_bytes_and_hash(args: dict[str, Any]) -> None:
    request = StepRequest("tool", "t", args)
    assert request.canonical == dumps(args)
    assert request.args_hash == hashlib.sha256(dumps(args)).hexdigest()
    assert request.problem is None


def test_a_request_whose_arguments_are_not_canonical_json_says_why() -> None:
    request = StepRequest("tool", "t", {"x": math.nan})
    assert request.canonical is None and request.args_hash is None
    assert request.problem is not None and "/x" in request.problem


@settings(max_examples=60, deadline=None)
@given(run=st.text(min_size=1, max_size=12), step=st.integers(0, 2**40), args=JSON)
def test_the_idempotency_key_is_made_from_the_requests_canonical_bytes(run: str, step: int, args: Any) -> None:
    expected = "tlk-" + hashlib.sha256(dumps({"run": run, "step": step, "args": args})).hexdigest()[:40]
    assert idempotency_key(run, step, dumps(args)) == expected


def test_every_phase_is_a_named_function_of_the_pipeline() -> None:
    for phase in Phase:
        assert callable(getattr(phases, phase.value.lower())), phase


def _bare_pipeline(toolkit: Toolkit, policy: Policy, pool: concurrent.futures.Executor) -> Pipeline:
    env = Environment(
        toolkit=toolkit,
        clock_ms=lambda: 0,
        sleep=lambda seconds: None,
        invoke=lambda tool, kwargs: tool.func(**kwargs),
        gather_pool=pool,
    )
    return Pipeline(env, run_id="r", seed="00" * 32, policy=policy, journal=None)


def test_a_door_needs_only_the_pipeline_entry() -> None:
    kit = Toolkit()

    @kit.tool(side_effect="read_only", timeout=None)
    def double(x: int) -> int:
        return 2 * x

    policy = Policy.from_mapping(allow("double"))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pipeline = _bare_pipeline(kit, policy, pool)
        assert pipeline.run(StepRequest("tool", "double", {"x": 21}, "read_only", kit.tools["double"])) == 42
        with pytest.raises(StepError) as caught:
            pipeline.run(StepRequest("tool", "double", {"x": "no"}, "read_only", kit.tools["double"]))
        with pytest.raises(StepError) as denied:
            pipeline.run(StepRequest("tool", "nope", {}, "read_only", None))
    assert caught.value.step == 1 and caught.value.step_code == "ARGS_SCHEMA_MISMATCH"
    assert denied.value.step == 2 and denied.value.step_code == "TOOL_UNKNOWN"
    assert pipeline.effects[0]["result"] == 42 and pipeline.effects[0]["args"] == {"x": 21}
    assert pipeline.hashes[0] == (hashlib.sha256(b'{"x":21}').hexdigest(), hashlib.sha256(b"42").hexdigest())


def _with_calls(ctx: Any, input: Any) -> Any:
    ctx.call("fs.mkdir", path="notes")
    ctx.call("fs.write", path="notes/a.md", content=input["text"])
    listed = ctx.call("fs.list")
    return [listed, ctx.call("fs.read", path="notes/a.md")]


def _with_files(ctx: Any, input: Any) -> Any:
    files = Files(ctx.pipeline)
    files.mkdir("notes")
    files.write("notes/a.md", input["text"])
    listed = files.list()
    return [listed, files.read("notes/a.md")]


def test_the_files_door_records_the_steps_ctx_call_records(tmp_path: Path) -> None:
    policy = allow(fs={"operations": list(FS_OPERATIONS)})
    results = []
    for name, agent in (("calls", _with_calls), ("files", _with_files)):
        with runtime_at(tmp_path, policy, store=f"store-{name}", sandbox=tmp_path / f"sb-{name}") as runtime:
            result = runtime.run(agent, {"text": "hello"}, run_id="run-1")
            assert result.ok, result.error
            results.append(result)
            # Either door replays the other's run: the requests are the same.
            other = _with_files if agent is _with_calls else _with_calls
            replay = runtime.replay("run-1", other)
            assert replay.matched, replay.divergence
    calls, files = results
    assert files.output == calls.output
    assert [(e["kind"], e["name"], e["args"], e["class"], e["outcome"]) for e in files.effects] == [
        (e["kind"], e["name"], e["args"], e["class"], e["outcome"]) for e in calls.effects
    ]
    assert [e["sandbox"] for e in files.effects] == [e["sandbox"] for e in calls.effects]
    assert files.effects[1]["idempotency_key"] == calls.effects[1]["idempotency_key"]


def test_a_files_door_request_that_differs_from_the_recording_diverges(tmp_path: Path) -> None:
    policy = allow(fs={"operations": list(FS_OPERATIONS)})
    with runtime_at(tmp_path, policy, sandbox=tmp_path / "sb") as runtime:
        runtime.run(_with_calls, {"text": "hello"}, run_id="run-1")

        def writes_elsewhere(ctx: Any, input: Any) -> Any:
            files = Files(ctx.pipeline)
            files.mkdir("notes")
            return files.write("notes/b.md", input["text"])

        replay = runtime.replay("run-1", writes_elsewhere)
    assert not replay.matched and replay.divergence is not None
    assert replay.divergence["step"] == 1 and replay.divergence["fields"] == ["args"]
