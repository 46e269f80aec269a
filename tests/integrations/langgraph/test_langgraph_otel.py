"""OpenTelemetry spans of a LangGraph agent: its model calls are ``chat {model}`` spans, its
tool calls ``execute_tool {name}`` spans, all children of the run's ``invoke_agent`` span,
sync and async alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integrations.capture_helpers import runtime_at
from tests.integrations.langgraph_helpers import (
    QUESTION,
    SCRIPT,
    SIDE_EFFECTS,
    Shop,
    agent_of,
    async_agent_of,
    build_graph,
    shop_policy,
)
from tracelock.examples.react_server import ReactServer
from tracelock.integrations.langgraph import register_langchain_tools
from tracelock.integrations.otel import instrument


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_tool_calls_of_a_graph_are_execute_tool_spans(tmp_path: Path, use_async: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop = Shop()
    with ReactServer(SCRIPT) as server:
        runtime = runtime_at(tmp_path, shop_policy())
        register_langchain_tools(runtime, shop.tools, side_effects=SIDE_EFFECTS)
        instrument(runtime, provider)
        graph = build_graph(shop, server.url, use_async=use_async)
        result = runtime.run(async_agent_of(graph) if use_async else agent_of(graph), QUESTION)
    assert result.status == "completed", result.to_dict()
    spans = sorted(exporter.get_finished_spans(), key=lambda span: span.start_time or 0)
    run_span = spans[0]
    assert run_span.name.startswith("invoke_agent ")
    steps = sorted(spans[1:], key=lambda span: span.attributes["tracelock.step"] if span.attributes else 0)
    assert [span.name for span in steps] == [
        "chat gpt-test",
        "execute_tool lookup",
        "execute_tool lookup",
        "chat gpt-test",
        "execute_tool refund",
        "chat gpt-test",
    ]
    for span in steps:
        assert span.parent is not None and span.parent.span_id == run_span.context.span_id
        assert span.attributes is not None and span.attributes["tracelock.outcome"] == "SUCCESS"
    tools = [span for span in steps if span.name.startswith("execute_tool")]
    assert [span.attributes["gen_ai.tool.name"] for span in tools if span.attributes] == ["lookup", "lookup", "refund"]
    assert all(span.attributes and span.attributes["gen_ai.operation.name"] == "execute_tool" for span in tools)
    runtime.close()
