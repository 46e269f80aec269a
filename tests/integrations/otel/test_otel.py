"""The OpenTelemetry adapter, with the SDK's in-memory exporter: span names, structure and
attributes by the GenAI conventions, errors, content off by default, and determinism
untouched by tracing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.integrations.capture_helpers import Ids, Ticks, store_bytes
from tracelock.integrations.otel import SpanObserver, instrument, uninstrument
from tracelock.runtime.doors.context import RunContext
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store

SECRET = "the user's secret question"

POLICY: dict[str, Any] = {
    "version": 1,
    "llm": {"allow": True, "models": ["gpt-test"]},
    "tools": [{"name": "lookup"}, {"name": "explode"}],
}


def _provider_llm(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": "answer " + str(len(str(request.get("messages")))),
        "model": "gpt-test-2026",
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }


def _kit() -> Toolkit:
    kit = Toolkit(llm=_provider_llm)

    @kit.tool(side_effect="read_only")
    def lookup(key: str) -> str:
        return f"value of {key}"

    @kit.tool(side_effect="read_only")
    def explode() -> str:
        raise RuntimeError("boom")

    return kit


def agent(ctx: RunContext, question: str) -> Any:
    reply = ctx.llm(model="gpt-test", messages=[{"role": "user", "content": question}])
    found = [ctx.call("lookup", key="a")] + ctx.gather(ctx.task("lookup", key="b"), ctx.task("lookup", key="c"))
    return {"reply": reply["content"], "found": found, "at": ctx.now().isoformat()}


def sequential_agent(ctx: RunContext, question: str) -> Any:
    reply = ctx.llm(model="gpt-test", messages=[{"role": "user", "content": question}])
    return {"reply": reply["content"], "found": ctx.call("lookup", key=question), "at": ctx.now().isoformat()}


def failing_agent(ctx: RunContext, question: str) -> Any:
    ctx.call("lookup", key=question)
    return ctx.call("explode")


def _runtime(directory: Path) -> Runtime:
    # The store's clock is injected too: journal timestamps must not differ between runs.
    store = open_store(directory / "store", clock=Ticks())
    return Runtime(store, POLICY, toolkits=(_kit(),), clock=Ticks(), ids=Ids())


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _traced(runtime: Runtime, exporter: InMemorySpanExporter, **options: Any) -> SpanObserver:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return instrument(runtime, provider, **options)


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def test_run_and_step_spans_follow_the_genai_conventions(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    with _runtime(tmp_path) as runtime:
        _traced(runtime, exporter)
        result = runtime.run(agent, SECRET, run_id="r1")
    assert result.ok
    spans = exporter.get_finished_spans()
    names = _by_name(spans)
    assert set(names) == {"invoke_agent test_otel:agent", "chat gpt-test", "execute_tool lookup", "tracelock.clock.now"}
    run_span = names["invoke_agent test_otel:agent"]
    assert run_span.parent is None
    assert run_span.attributes is not None
    assert run_span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run_span.attributes["gen_ai.agent.name"] == "test_otel:agent"
    assert run_span.attributes["tracelock.run.id"] == "r1"
    assert run_span.attributes["tracelock.mode"] == "record"
    assert run_span.attributes["tracelock.outcome"] == "SUCCESS"
    assert run_span.attributes["tracelock.fingerprint"] == result.fingerprint
    assert run_span.status.status_code is not StatusCode.ERROR
    steps = [span for span in spans if span is not run_span]
    assert len(steps) == len(result.effects)
    for span in steps:
        assert span.parent is not None
        assert span.parent.span_id == run_span.context.span_id
        assert span.context.trace_id == run_span.context.trace_id
    chat = names["chat gpt-test"].attributes
    assert chat is not None
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.request.model"] == "gpt-test"
    assert chat["gen_ai.response.model"] == "gpt-test-2026"
    assert chat["gen_ai.usage.input_tokens"] == 11
    assert chat["gen_ai.usage.output_tokens"] == 7
    assert chat["tracelock.step"] == 0
    assert chat["tracelock.outcome"] == "SUCCESS"
    tool = names["execute_tool lookup"].attributes
    assert tool is not None
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert tool["gen_ai.tool.name"] == "lookup"
    assert sorted((span.attributes or {})["tracelock.step"] for span in steps if span.name == "execute_tool lookup") == [1, 2, 3]


def test_a_failed_step_and_its_run_have_error_status(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    with _runtime(tmp_path) as runtime:
        _traced(runtime, exporter)
        result = runtime.run(failing_agent, "k", run_id="bad")
    assert not result.ok
    names = _by_name(exporter.get_finished_spans())
    failed = names["execute_tool explode"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None
    assert failed.attributes["tracelock.outcome"] == result.outcome
    assert failed.attributes["tracelock.code"] == result.code
    assert failed.attributes["tracelock.phase"] == "EXECUTE"
    assert names["execute_tool lookup"].status.status_code is not StatusCode.ERROR
    run_span = names["invoke_agent test_otel:failing_agent"]
    assert run_span.status.status_code is StatusCode.ERROR
    assert run_span.attributes is not None
    assert run_span.attributes["tracelock.code"] == result.code


def _all_text(spans: tuple[ReadableSpan, ...]) -> str:
    return " ".join(f"{span.name} {dict(span.attributes or {})} {span.events}" for span in spans)


def test_content_is_off_by_default_and_on_with_the_option(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    with _runtime(tmp_path) as runtime:
        _traced(runtime, exporter)
        runtime.run(agent, SECRET, run_id="quiet")
    assert SECRET not in _all_text(exporter.get_finished_spans())
    assert "value of a" not in _all_text(exporter.get_finished_spans())
    exporter.clear()
    with _runtime(tmp_path / "loud") as runtime:
        _traced(runtime, exporter, capture_content=True)
        runtime.run(agent, SECRET, run_id="loud")
    names = _by_name(exporter.get_finished_spans())
    chat = names["chat gpt-test"].attributes or {}
    assert SECRET in str(chat["gen_ai.input.messages"])
    assert "answer" in str(chat["gen_ai.output.messages"])
    results = {
        str((span.attributes or {})["gen_ai.tool.call.result"])
        for span in exporter.get_finished_spans()
        if span.name == "execute_tool lookup"
    }
    assert results == {'"value of a"', '"value of b"', '"value of c"'}


def test_replay_emits_spans_marked_replay(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    with _runtime(tmp_path) as runtime:
        runtime.run(agent, SECRET, run_id="r1")
        _traced(runtime, exporter)
        report = runtime.replay("r1", agent)
    assert report.matched
    spans = exporter.get_finished_spans()
    assert spans
    assert all((span.attributes or {})["tracelock.mode"] == "replay" for span in spans)
    uninstrument(runtime)


@settings(max_examples=8, deadline=None)
@given(question=st.text(max_size=20), content=st.booleans())
def test_tracing_changes_no_journal_byte_and_no_fingerprint(tmp_path_factory: pytest.TempPathFactory, question: str, content: bool) -> None:
    plain_dir = tmp_path_factory.mktemp("plain")
    traced_dir = tmp_path_factory.mktemp("traced")
    with _runtime(plain_dir) as runtime:
        plain = runtime.run(sequential_agent, question, run_id="same")
    exporter = InMemorySpanExporter()
    with _runtime(traced_dir) as runtime:
        _traced(runtime, exporter, capture_content=content)
        traced = runtime.run(sequential_agent, question, run_id="same")
    assert exporter.get_finished_spans()
    assert traced.fingerprint == plain.fingerprint
    journal = (traced_dir / "store" / "journal.log").read_bytes()
    assert journal == (plain_dir / "store" / "journal.log").read_bytes()
    ids = {format(span.context.trace_id, "032x") for span in exporter.get_finished_spans()}
    ids |= {format(span.context.span_id, "016x") for span in exporter.get_finished_spans()}
    assert not any(value.encode() in store_bytes(traced_dir) for value in ids)


async def async_agent(ctx: Any, question: str) -> Any:
    reply = await ctx.llm(model="gpt-test", messages=[{"role": "user", "content": question}])
    found = [await ctx.call("lookup", key="a")] + await ctx.gather(ctx.task("lookup", key="b"), ctx.task("lookup", key="c"))
    return {"reply": reply["content"], "found": found}


def test_awaited_runs_on_one_loop_each_get_their_own_trace(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    import asyncio

    async def main() -> list[Any]:
        with _runtime(tmp_path) as runtime:
            _traced(runtime, exporter)
            return await asyncio.gather(*(runtime.arun(async_agent, f"q{number}") for number in range(4)))

    results = asyncio.run(main())
    assert all(result.ok for result in results)
    spans = exporter.get_finished_spans()
    runs = {span.attributes["tracelock.run.id"]: span for span in spans if span.name.startswith("invoke_agent")}  # type: ignore[index]
    assert sorted(runs) == sorted(result.run_id for result in results)
    for result in results:
        run_span = runs[result.run_id]
        assert run_span.parent is None
        steps = [s for s in spans if s is not run_span and s.context.trace_id == run_span.context.trace_id]
        assert len(steps) == len(result.effects) == 4
        assert all(s.parent is not None and s.parent.span_id == run_span.context.span_id for s in steps)
