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
    customer_record: dict[str, Any]


def plan_node(state: State) -> State:
    return {"plan": effects.plan(state["ask"])}


def search_node(state: State) -> State:
    ask = state["ask"]
    return {"orders": effects.search_orders(query=ask)}


def lookup_node(state: State) -> State:
    return {"customer_record": effects.lookup_customer(customer_id=state["customer"])}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("plan", plan_node)
    graph.add_node("search", search_node)
    graph.add_node("lookup", lookup_node)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "search")
    graph.add_edge("search", "lookup")
    graph.add_edge("lookup", END)
    return graph.compile(checkpointer=checkpointer)


def output(state: dict[str, Any]) -> dict[str, Any]:
    return {"plan": state["plan"]["content"], "orders": state["orders"], "customer": state["customer_record"]}
