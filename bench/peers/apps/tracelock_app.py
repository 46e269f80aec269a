"""The workload on tracelock: an agent function, its tools in a toolkit (default settings)."""

from __future__ import annotations

from typing import Any

from bench.peers.apps import effects
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit(llm=effects.llm)
kit.tool("search_orders", side_effect="read_only")(effects.search_orders)
kit.tool("send_update", side_effect="irreversible")(effects.send_update)


def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    ask = task["ask"]
    plan = ctx.llm(model="stand-in", prompt=ask, max_tokens=64)
    orders = ctx.call("search_orders", query=ask)
    update = ctx.call("send_update", customer_id=task["customer"], text=plan["content"])
    return {"plan": plan["content"], "orders": orders, "update": update}
