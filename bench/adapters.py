"""Overhead of the LangGraph adapter (and of OpenTelemetry over it) on a ReAct loop of 5
tool calls, side by side in one run.

The graph is the usual one: a model node calling ``ChatOpenAI`` (the official ``openai`` SDK)
with two tools bound, LangGraph's ``ToolNode``, the ``tools_condition`` edge. Its model talks
to the scripted loopback server (``tracelock.examples.react_server``): 6 model calls (5 asking
for one tool each, then the answer) and 5 tool calls per run. The model is on loopback, not a
LangChain fake chat model, so that the model calls go through the SDK and the capture as they
would against a real API (the ``plain`` row is the graph's own cost, round trips included).
The variants:

- ``plain``: the graph on its own (no tracelock, no checkpointer);
- ``sqlite``: the same graph compiled with LangGraph's own ``SqliteSaver`` checkpointer (a file
  in the temporary directory; one thread per run);
- ``tracelock``: the graph as a tracelock agent with default settings: model calls captured at
  the transport, tool calls through the ``ToolNode`` hook, tools registered with the default
  side-effect class (``irreversible``: each tool's intent is durable before it runs), the
  directory store;
- ``tracelock+otel``: the same with the OpenTelemetry adapter and the SDK's in-memory exporter;
- ``tracelock/ro``: the ``tracelock`` variant with both tools declared ``read_only`` (no
  durable intent and result per tool call: what the side-effect class costs);
- ``replay``: a tracelock run replayed from the journal (no network, no tool runs).

Each figure is the median (p50) of one whole run (``graph.invoke``, or ``runtime.run`` /
``runtime.replay`` around it, so a tracelock run's start and end are counted): its wall time,
and the CPU time of the process (every thread, the in-process loopback server's too). The
variants are interleaved run by run.

Run with ``python -m bench.adapters [--quick] [--json]``.
"""

from __future__ import annotations

import itertools
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.cli import bench_main
from tracelock.examples.react_server import ReactServer
from tracelock.integrations.langgraph import (
    openai_clients,
    register_langchain_tools,
    state_json,
    tool_node,
)
from tracelock.integrations.otel import instrument
from tracelock.runtime.runtime import Runtime

SCRIPT = [
    [("lookup", {"order_id": "A-1"})],
    [("lookup", {"order_id": "B-2"})],
    [("refund", {"order_id": "A-1", "amount": 5})],
    [("lookup", {"order_id": "C-3"})],
    [("refund", {"order_id": "C-3", "amount": 7})],
]
POLICY = {
    "version": 1,
    "llm": {"allow": True, "models": ["gpt-bench"]},
    "http": {"allow": [{"host": "127.0.0.1", "methods": ["POST"], "paths": ["/v1/chat/completions"]}]},
    "tools": [{"name": "lookup"}, {"name": "refund"}],
}
QUESTION = {"messages": [{"role": "user", "content": "Check A-1, B-2 and C-3 and refund what is late."}]}
VARIANTS = ("plain", "sqlite", "tracelock", "tracelock+otel", "tracelock/ro", "replay")


@tool
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up by its id."""
    return {"order": order_id, "status": "late", "paid": 100}


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an amount on an order."""
    return f"refunded {amount} on {order_id}"


TOOLS = [lookup, refund]


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def _graph(url: str, *, hooked: bool, checkpointer: Any = None) -> Any:
    clients = openai_clients() if hooked else {}
    model = ChatOpenAI(model="gpt-bench", base_url=url + "/v1", api_key="sk-bench", max_retries=0, **clients).bind_tools(TOOLS)

    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke([SystemMessage("You handle late orders."), *state["messages"]])]}

    graph = StateGraph(State)
    graph.add_node("model", call_model)
    graph.add_node("tools", tool_node(TOOLS) if hooked else ToolNode(TOOLS))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def _timed(call: Callable[[], Any]) -> tuple[float, float]:
    """Wall time and this process's CPU time (every thread's, the loopback server's too) of
    one call: the CPU figure is less at the mercy of other processes on a shared machine,
    the wall figure includes what the CPU figure cannot see (journal syncs)."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def run(quick: bool) -> dict[str, Any]:
    runs = 15 if quick else 60
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu_times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with ReactServer(SCRIPT) as server, tempfile.TemporaryDirectory() as tmp:
        plain = _graph(server.url, hooked=False)
        connection = sqlite3.connect(Path(tmp) / "checkpoints.sqlite", check_same_thread=False)
        saved = _graph(server.url, hooked=False, checkpointer=SqliteSaver(connection))
        hooked = _graph(server.url, hooked=True)

        def agent(ctx: Any, input: Any) -> Any:
            return state_json(hooked.invoke(input))

        runtime = Runtime(Path(tmp) / "store", POLICY)
        register_langchain_tools(runtime, TOOLS)  # default class: irreversible
        traced = Runtime(Path(tmp) / "traced", POLICY)
        register_langchain_tools(traced, TOOLS)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrument(traced, provider)
        lenient = Runtime(Path(tmp) / "lenient", POLICY)
        register_langchain_tools(lenient, TOOLS, default="read_only")
        threads = itertools.count()
        recorded: list[str] = []

        def record(on: Runtime) -> None:
            result = on.run(agent, QUESTION)
            assert result.status == "completed" and len(result.effects) == 11, result.to_dict()
            recorded.append(result.run_id)

        def replay() -> None:
            report = runtime.replay(recorded[0], agent)
            assert report.matched, report.divergence

        variants: dict[str, Callable[[], Any]] = {
            "plain": lambda: plain.invoke(QUESTION),
            "sqlite": lambda: saved.invoke(QUESTION, {"configurable": {"thread_id": f"t{next(threads)}"}}),
            "tracelock": lambda: record(runtime),
            "tracelock+otel": lambda: record(traced),
            "tracelock/ro": lambda: record(lenient),
            "replay": replay,
        }
        for call in variants.values():  # warm up: lazy imports, connections, the SDK's first call
            call()
        names = list(variants)
        for number in range(runs):
            # Interleaved run by run, the order turned each time: a load spike from outside
            # falls on every variant alike.
            for name in names[number % len(names):] + names[: number % len(names)]:
                wall, cpu = _timed(variants[name])
                times[name].append(wall)
                cpu_times[name].append(cpu)
            exporter.clear()
        assert len(exporter.get_finished_spans()) == 0
        runtime.close()
        traced.close()
        lenient.close()
        connection.close()
    p50 = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    cpu_p50 = {name: statistics.median(values) * 1e3 for name, values in cpu_times.items()}
    base = p50["plain"]
    figures: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "model": "loopback OpenAI wire-format server (ChatOpenAI over the openai SDK)",
        "runs_per_variant": runs,
        "model_calls_per_run": len(SCRIPT) + 1,
        "tool_calls_per_run": len(SCRIPT),
        "p50_ms_per_run": {name: round(value, 2) for name, value in p50.items()},
        "ratio_to_plain": {name: round(value / base, 2) for name, value in p50.items()},
        "cpu_p50_ms_per_run": {name: round(value, 2) for name, value in cpu_p50.items()},
        "cpu_ratio_to_plain": {name: round(value / cpu_p50["plain"], 2) for name, value in cpu_p50.items()},
        "tracelock_over_sqlite": round(p50["tracelock"] / p50["sqlite"], 2),
        "tracelock_added_ms": round(p50["tracelock"] - base, 2),
        "sqlite_added_ms": round(p50["sqlite"] - base, 2),
        "otel_added_ms": round(p50["tracelock+otel"] - p50["tracelock"], 2),
    }
    print(f"LangGraph ReAct loop: {len(SCRIPT) + 1} model calls on loopback + {len(SCRIPT)} tool calls "
          f"({figures['mode']}: {runs} runs per variant, p50 per run; wall, and CPU of this process)")
    for name in VARIANTS:
        print(f"  {name:<15} {p50[name]:8.2f} ms  x{figures['ratio_to_plain'][name]:.2f}   "
              f"cpu {cpu_p50[name]:7.2f} ms  x{figures['cpu_ratio_to_plain'][name]:.2f} of plain")
    print(f"  tracelock vs LangGraph's SqliteSaver: x{figures['tracelock_over_sqlite']:.2f} "
          f"(+{figures['tracelock_added_ms']} ms vs +{figures['sqlite_added_ms']} ms over plain); "
          f"OpenTelemetry adds {figures['otel_added_ms']} ms")
    return figures


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
