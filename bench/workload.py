"""The benchmark workload shared by every comparison: one LLM call (a deterministic
stand-in returning a fixed plan) and two tool calls, per run."""

from __future__ import annotations

from typing import Any

from tracelock.runtime.tools.toolkit import Toolkit

PLAN = {"content": "search for the order, then look up the customer", "usage": {"input_tokens": 12, "output_tokens": 9}}
POLICY = {
    "version": 1,
    "tools": [{"name": "search_orders"}, {"name": "lookup_customer"}, {"name": "save_note"}],
    "llm": {"allow": True, "models": ["stand-in"]},
}


def llm_stand_in(request: dict[str, Any]) -> dict[str, Any]:
    return PLAN


def search_orders(query: str) -> list[dict[str, Any]]:
    return [{"order": "A-1001", "query": query}]


def lookup_customer(customer_id: str) -> dict[str, Any]:
    return {"id": customer_id, "tier": "gold"}


def save_note(text: str) -> dict[str, Any]:
    return {"saved": len(text)}


kit = Toolkit(llm=llm_stand_in)
kit.tool(side_effect="read_only", timeout=None)(search_orders)
kit.tool(side_effect="read_only", timeout=None)(lookup_customer)
kit.tool(side_effect="idempotent", timeout=None)(save_note)


def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="stand-in", prompt=task["ask"], max_tokens=64)
    orders = ctx.call("search_orders", query=task["ask"])
    customer = ctx.call("lookup_customer", customer_id=task["customer"])
    return {"plan": plan["content"], "orders": orders, "customer": customer}


def agent_with_write(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="stand-in", prompt=task["ask"], max_tokens=64)
    orders = ctx.call("search_orders", query=task["ask"])
    note = ctx.call("save_note", text=plan["content"])
    return {"plan": plan["content"], "orders": orders, "note": note}


def plain_python(task: dict[str, Any]) -> dict[str, Any]:
    """The same work with no runtime at all: the floor."""
    plan = llm_stand_in({"model": "stand-in", "prompt": task["ask"], "max_tokens": 64})
    return {
        "plan": plan["content"],
        "orders": search_orders(task["ask"]),
        "customer": lookup_customer(task["customer"]),
    }


def task(number: int) -> dict[str, Any]:
    return {"ask": f"where is order {number}?", "customer": f"c-{number % 100}"}
