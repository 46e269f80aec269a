"""A small, realistic support agent: an LLM plans, tools act, one action is denied.

The LLM is a deterministic stand-in (``planner``) so the example runs anywhere; swap in a
real provider with ``Toolkit(llm=...)``. Run it with::

    tracelock run tracelock.examples.support:agent --input input.json \\
        --policy <this folder>/support_policy.toml --sandbox ./support-sandbox
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracelock.runtime.doors.context import RunContext
from tracelock.runtime.errors import StepError
from tracelock.runtime.tools.toolkit import Toolkit

POLICY_FILE = Path(__file__).with_name("support_policy.toml")

_ORDERS = {
    "A-1001": {"status": "delivered", "sku": "KB-42", "paid_cents": 24999},
    "A-1002": {"status": "in transit", "sku": "MS-7", "paid_cents": 3999},
}
_STOCK = {"KB-42": 17, "MS-7": 0}


def planner(request: dict[str, Any]) -> dict[str, Any]:
    """A deterministic LLM stand-in: it proposes the same plan for the same request."""
    ticket = request["messages"][-1]["content"]
    order_id = ticket.split("order ", 1)[1].split()[0].strip(".,")
    plan = [
        {"schema_version": 1, "id": "p1", "action": "lookup_order", "args": {"order_id": order_id},
         "reasoning": "First find out what the customer bought."},
        {"schema_version": 1, "id": "p2", "action": "check_stock", "args": {"sku": "KB-42"},
         "reasoning": "A replacement is only possible if it is in stock."},
        {"schema_version": 1, "id": "p3", "action": "issue_refund",
         "args": {"order_id": order_id, "amount_cents": 24999},
         "reasoning": "The customer is unhappy; refund everything."},
        {"schema_version": 1, "id": "p4", "action": "fs.write",
         "args": {"path": f"ticket-{order_id}.md", "content": f"# {order_id}\nReplacement offered.\n"},
         "reasoning": "Leave a note for the human team."},
    ]
    return {
        "content": json.dumps({"proposals": plan}),
        "model": request["model"],
        "usage": {"input_tokens": 42 + len(ticket) // 4, "output_tokens": 180},
    }


support = Toolkit(llm=planner)


@support.tool(side_effect="read_only", timeout=5.0)
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up in the order system."""
    return {"order_id": order_id, **_ORDERS.get(order_id, {"status": "unknown"})}


@support.tool(side_effect="read_only", timeout=5.0)
def check_stock(sku: str) -> dict[str, Any]:
    """How many units of a SKU are in stock."""
    return {"sku": sku, "units": _STOCK.get(sku, 0)}


@support.tool(side_effect="irreversible", timeout=10.0)
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund money to the customer (irreversible)."""
    return {"refunded_cents": amount_cents, "order_id": order_id}


@support.agent("support-triage")
def agent(ctx: RunContext, ticket: dict[str, Any]) -> dict[str, Any]:
    """Plan with the LLM, then submit each proposed action through the runtime."""
    response = ctx.llm(
        model="demo-planner",
        messages=[
            {"role": "system", "content": "You are a careful support agent."},
            {"role": "user", "content": ticket["text"]},
        ],
        max_tokens=400,
    )
    outcomes = []
    for proposal in json.loads(response["content"])["proposals"]:
        try:
            result = ctx.submit(proposal)
            outcomes.append({"id": proposal["id"], "outcome": "SUCCESS", "result": result})
        except StepError as failure:
            outcomes.append({"id": proposal["id"], "outcome": failure.outcome.value, "code": failure.step_code})
    return {"ticket": ticket["id"], "handled": outcomes}
