"""The workload on DBOS: one workflow, one step per effect."""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from bench.peers.apps import effects


@DBOS.step()
def plan_step(prompt: str) -> dict[str, Any]:
    return effects.plan(prompt)


@DBOS.step()
def search_step(query: str) -> list[dict[str, Any]]:
    return effects.search_orders(query)


@DBOS.step()
def update_step(customer_id: str, text: str) -> dict[str, Any]:
    return effects.send_update(customer_id, text)


@DBOS.workflow()
def agent_workflow(task: dict[str, Any]) -> dict[str, Any]:
    ask = task["ask"]
    plan = plan_step(prompt=ask)
    orders = search_step(query=ask)
    update = update_step(customer_id=task["customer"], text=plan["content"])
    return {"plan": plan["content"], "orders": orders, "update": update}
