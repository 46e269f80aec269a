"""The workload on LangGraph: a three-node graph, one node per effect."""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from bench.peers.apps import effects


class State(TypedDict, total=False):
    ask: str
    customer: str
    plan: dict[str, Any]
    orders: list[dict[str, Any]]
    update: dict[str, Any]


def plan_node(state: State) -> State:
    return {"plan": effects.plan(state["ask"])}


def search_node(state: State) -> State:
    ask = state["ask"]
    return {"orders": effects.search_orders(query=ask)}


def update_node(state: State) -> State:
    return {"update": effects.send_update(customer_id=state["customer"], text=state["plan"]["content"])}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("plan", plan_node)
    graph.add_node("search", search_node)
    graph.add_node("update", update_node)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "search")
    graph.add_edge("search", "update")
    graph.add_edge("update", END)
    return graph.compile(checkpointer=checkpointer)


def output(state: dict[str, Any]) -> dict[str, Any]:
    return {"plan": state["plan"]["content"], "orders": state["orders"], "update": state["update"]}
