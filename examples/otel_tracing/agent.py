"""An agent's runs and steps as OpenTelemetry spans, named and attributed by the GenAI
semantic conventions (``invoke_agent``, ``chat {model}``, ``execute_tool {name}``).

Run it as it is (``pip install 'tracelock[otel]'``; no network, no collector)::

    python examples/otel_tracing/agent.py

It records a run and replays it, with the SDK's in-memory exporter, and prints the spans
as a tree with their main attributes. To send them to a collector instead, install
``opentelemetry-exporter-otlp`` and replace the exporter::

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracelock import Runtime
from tracelock.integrations.otel import instrument

POLICY = {
    "version": 1,
    "llm": {"allow": True, "models": ["gpt-test"]},
    # Refunds above 100 are denied: the denied step is an ERROR span with its code.
    "tools": [{"name": "lookup_order"}, {"name": "refund", "args": {"amount": {"type": "integer", "max": 100}}}],
}
SHOWN = ("gen_ai.operation.name", "gen_ai.request.model", "gen_ai.tool.name", "gen_ai.usage.input_tokens",
         "gen_ai.usage.output_tokens", "tracelock.step", "tracelock.mode", "tracelock.outcome", "tracelock.code")


def model(request: dict[str, Any]) -> dict[str, Any]:
    """A stand-in LLM provider (``Runtime(llm=...)``): no network."""
    return {"content": "refund A-1", "model": "gpt-test", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}


def agent(ctx: Any, ticket: dict[str, str]) -> dict[str, Any]:
    plan = ctx.llm(model="gpt-test", max_tokens=32, messages=[{"role": "user", "content": ticket["text"]}])
    order = ctx.call("lookup_order", order_id="A-1")
    try:
        ctx.call("refund", order_id="A-1", amount=500)
    except Exception as denied:  # a denied step is a StepError the agent may catch
        return {"plan": plan["content"], "order": order, "refund": str(denied)}
    return {"plan": plan["content"], "order": order, "refund": "done"}


def print_tree(spans: list[ReadableSpan]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda span: span.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        attributes = dict(span.attributes or {})
        shown = " ".join(f"{key}={attributes[key]}" for key in SHOWN if key in attributes)
        print(f"{'  ' * depth}{span.name}  [{span.status.status_code.name}]  {shown}")
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


def main() -> int:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = Runtime(Path(tempfile.mkdtemp(prefix="tracelock-otel-")) / "store", POLICY, llm=model)

    @runtime.tool(side_effect="read_only")
    def lookup_order(order_id: str) -> dict[str, Any]:
        return {"order": order_id, "paid": 120}

    @runtime.tool(side_effect="irreversible")
    def refund(order_id: str, amount: int) -> str:
        return f"refunded {amount}"

    instrument(runtime, provider)  # the one tracelock line: every run and replay emits spans
    result = runtime.run(agent, {"text": "Please refund my order A-1"})
    report = runtime.replay(result.run_id, agent)
    provider.force_flush()
    spans = list(exporter.get_finished_spans())
    print_tree(spans)
    print("recorded:", result.status, "replayed:", "match" if report.matched else "DIVERGED")
    print("spans:", len(spans))
    runtime.close()
    return 0 if result.status == "completed" and report.matched else 1


if __name__ == "__main__":
    sys.exit(main())
