"""A LangGraph ReAct agent (a model node with tools bound, LangGraph's ToolNode, the
tools_condition edge) recorded and replayed by tracelock. The graph is the usual one; the
tracelock lines are the chat model's clients (``**openai_clients()``), the ToolNode's hook
(``tool_node(...)``), the tools' side-effect classes (``register_langchain_tools``) and the
two-line agent around ``graph.invoke``.

Run it as it is (``pip install 'tracelock[langgraph,openai]' langchain-openai``; no API key,
no network: it starts a small OpenAI-compatible server on loopback that plays a scripted
model calling the tools)::

    python examples/langgraph_agent/agent.py

It records a run against the server, stops the server, then replays the run from the journal
with nothing listening and no tool running: the same answers, the same fingerprint. The
policy denies the model's second refund (over 50): the model reads the denial as the tool's
error message. To use the real API, drop ``base_url`` and ``api_key``, set
``OPENAI_API_KEY`` and allow ``api.openai.com`` in ``policy.toml``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import tools_condition

from tracelock import Runtime
from tracelock.examples.react_server import ReactServer
from tracelock.integrations.langgraph import (
    openai_clients,
    register_langchain_tools,
    state_json,
    tool_node,
)

HERE = Path(__file__).parent
#: What the scripted model does: look both orders up at once, refund two amounts, answer.
SCRIPT = [
    [("lookup_order", {"order_id": "A-1"}), ("lookup_order", {"order_id": "B-2"})],
    [("refund", {"order_id": "A-1", "amount": 20})],
    [("refund", {"order_id": "B-2", "amount": 80})],
]
EXECUTED: list[str] = []  # every real tool execution, outside the store


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id."""
    EXECUTED.append(f"lookup_order {order_id}")
    return {"order": order_id, "status": "delivered", "paid": 100}


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an amount on an order."""
    EXECUTED.append(f"refund {order_id} {amount}")
    return f"refunded {amount} on {order_id}"


TOOLS = [lookup_order, refund]


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def build_graph(base_url: str) -> Any:
    model = ChatOpenAI(
        model="gpt-test",
        base_url=base_url,
        api_key="sk-example-not-a-real-key",
        **openai_clients(),  # tracelock: model calls are captured
    ).bind_tools(TOOLS)

    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke([SystemMessage("You handle refunds. Be brief."), *state["messages"]])]}

    graph = StateGraph(State)
    graph.add_node("model", call_model)
    graph.add_node("tools", tool_node(TOOLS))  # tracelock: ToolNode(TOOLS) with the hook
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def main() -> int:
    store = Path(tempfile.mkdtemp(prefix="tracelock-langgraph-")) / "store"
    server = ReactServer(SCRIPT).start()
    graph = build_graph(server.url + "/v1")

    def agent(ctx: Any, input: dict[str, Any]) -> Any:
        return state_json(graph.invoke(input))

    runtime = Runtime(store, HERE / "policy.toml")
    # Lookups are read-only (re-run freely after a crash); refund keeps the default,
    # irreversible (never run twice: its intent is journaled before it runs).
    register_langchain_tools(runtime, TOOLS, side_effects={"lookup_order": "read_only"})
    question = {"messages": [{"role": "user", "content": "Refund 20 on A-1 and 80 on B-2."}]}
    result = runtime.run(agent, question)
    print("recorded:", result.run_id, result.status)
    print("answer:", result.output["messages"][-1]["content"] if result.output else result.error)
    print("fingerprint:", result.fingerprint)
    for effect in result.effects:
        what = effect["args"]["model"] if effect["kind"] == "llm" else effect["args"]
        print(f"  step {effect['step']}: {effect['kind']} {effect['name']} {what} -> {effect['outcome']} {effect['code'] or ''}")
    print("tools executed:", len(EXECUTED))

    server.stop()  # from here on, nothing answers on that port
    EXECUTED.clear()
    report = runtime.replay(result.run_id, agent)
    print("replayed with the server stopped:", "match" if report.matched else "DIVERGED")
    print("replayed fingerprint:", report.replayed_fingerprint)
    print("tools executed during replay:", len(EXECUTED))
    runtime.close()
    print("store:", store)
    return 0 if report.matched and not EXECUTED else 1


if __name__ == "__main__":
    sys.exit(main())
