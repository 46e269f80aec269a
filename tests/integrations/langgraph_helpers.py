"""Shared parts of the LangGraph adapter's tests: a shop with two LangChain tools whose real
executions are counted outside the store, and a ReAct-style ``StateGraph`` (a model node
calling ``ChatOpenAI`` with the tools bound, the ``ToolNode`` with the tracelock hook, the
``tools_condition`` edge) whose model talks to the scripted loopback server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from tests.integrations.capture_helpers import API_KEY, policy
from tracelock.integrations.langgraph import ToolCallDoor, openai_clients, state_json, tool_node

#: Turn 1: two lookups at once (parallel tool calls); turn 2: a refund; then the answer.
SCRIPT: list[list[tuple[str, dict[str, Any]]]] = [
    [("lookup", {"order_id": "A-1"}), ("lookup", {"order_id": "B-2"})],
    [("refund", {"order_id": "A-1", "amount": 5})],
]
PROMPT = "You help customers with their orders. Be brief."
QUESTION = {"messages": [{"role": "user", "content": "Where are my orders A-1 and B-2? Refund A-1."}]}
SIDE_EFFECTS: dict[str, Any] = {"lookup": "read_only"}  # refund: the default, irreversible


def shop_policy(**extra: Any) -> dict[str, Any]:
    return policy(**{"tools": [{"name": "lookup"}, {"name": "refund"}], **extra})


class Shop:
    """The tools, and every real execution of them (outside the store)."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, dict[str, Any]]] = []
        shop = self

        @tool
        def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up by its id."""
            shop.executed.append(("lookup", {"order_id": order_id}))
            return {"order": order_id, "status": "shipped", "eta_days": 2}

        @tool
        def refund(order_id: str, amount: int) -> str:
            """Refund an amount on an order (irreversible)."""
            shop.executed.append(("refund", {"order_id": order_id, "amount": amount}))
            return f"refunded {amount} on {order_id}"

        self.tools: list[BaseTool] = [lookup, refund]


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def chat_model(url: str) -> Any:
    return ChatOpenAI(model="gpt-test", base_url=url + "/v1", api_key=API_KEY, max_retries=0, **openai_clients())


def build_graph(
    shop: Shop,
    url: str,
    *,
    prompt: str = PROMPT,
    rewrite: Callable[[AIMessage], AIMessage] | None = None,
    door: ToolCallDoor | None = None,
    hooked: bool = True,
    use_async: bool = False,
    **tool_options: Any,
) -> Any:
    """The ReAct graph. ``rewrite`` is graph code that edits the model's message (e.g. a
    tool call's arguments) before the tools run; ``hooked=False`` is the plain graph."""
    model = chat_model(url).bind_tools(shop.tools)

    def finish(message: Any) -> dict[str, Any]:
        return {"messages": [rewrite(message) if rewrite is not None else message]}

    def call_model(state: State) -> dict[str, Any]:
        return finish(model.invoke([SystemMessage(prompt), *state["messages"]]))

    async def acall_model(state: State) -> dict[str, Any]:
        return finish(await model.ainvoke([SystemMessage(prompt), *state["messages"]]))

    graph = StateGraph(State)
    graph.add_node("model", acall_model if use_async else call_model)  # type: ignore[call-overload]
    graph.add_node("tools", tool_node(shop.tools, door=door, **tool_options) if hooked else ToolNode(shop.tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def tools_only_graph(shop: Shop) -> Any:
    """A graph of the hooked ``ToolNode`` alone: it runs the tool calls of the last message
    of its input."""
    graph = StateGraph(State)
    graph.add_node("tools", tool_node(shop.tools))
    graph.add_edge(START, "tools")
    return graph.compile()


def agent_of(graph: Any) -> Callable[..., Any]:
    def agent(ctx: Any, input: Any) -> Any:
        return state_json(graph.invoke(input))

    return agent


def async_agent_of(graph: Any) -> Callable[..., Any]:
    async def agent(ctx: Any, input: Any) -> Any:
        return state_json(await graph.ainvoke(input))

    return agent
