"""The workload on tracelock: an agent function, its tools in a toolkit."""

from __future__ import annotations

from typing import Any

from bench.peers.apps import effects
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit(llm=effects.llm)
kit.tool("search_orders", side_effect="read_only", timeout=None)(effects.search_orders)
kit.tool("lookup_customer", side_effect="read_only", timeout=None)(effects.lookup_customer)


def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    ask = task["ask"]
    plan = ctx.llm(model="stand-in", prompt=ask, max_tokens=64)
    orders = ctx.call("search_orders", query=ask)
    customer = ctx.call("lookup_customer", customer_id=task["customer"])
    return {"plan": plan["content"], "orders": orders, "customer": customer}
