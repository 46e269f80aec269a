"""The benchmark workload shared by every comparison: the README's own kind of agent run.

One LLM call (a deterministic stand-in), one read-only tool and one **irreversible** tool,
with tool settings left at their defaults (``timeout=30.0``), and inputs, LLM answers and
tool results unique to each run (no payload is ever stored twice), as a real agent's are.
The irreversible effect makes its intent durable before it runs, so every system pays the
syncs that exactly-once after a crash needs."""

from __future__ import annotations

from typing import Any

from tracelock.runtime.tools.toolkit import Toolkit

#: What the LLM stand-in answers, before the run's own prompt is appended to it.
PLAN = {"content": "search for the order, then send the customer an update", "usage": {"input_tokens": 12, "output_tokens": 9}}
POLICY = {
    "version": 1,
    "tools": [{"name": "search_orders"}, {"name": "send_update"}],
    "llm": {"allow": True, "models": ["stand-in"]},
}


def llm_stand_in(request: dict[str, Any]) -> dict[str, Any]:
    """A fixed plan that quotes the prompt: each run's answer is its own."""
    return {"content": f"{PLAN['content']}: {request['prompt']}", "usage": PLAN["usage"]}


def search_orders(query: str) -> list[dict[str, Any]]:
    return [{"order": "A-" + query.rsplit(" ", 1)[-1].rstrip("?"), "query": query, "status": "shipped"}]


def send_update(customer_id: str, text: str) -> dict[str, Any]:
    """The irreversible effect (a message to the customer): never re-run after a crash."""
    return {"to": customer_id, "chars": len(text), "message": f"msg-{customer_id}"}


def make_kit(**settings: Any) -> Toolkit:
    """The workload's toolkit; ``settings`` (e.g. ``timeout=None``) apply to both tools."""
    kit = Toolkit(llm=llm_stand_in)
    kit.tool(side_effect="read_only", **settings)(search_orders)
    kit.tool(side_effect="irreversible", **settings)(send_update)
    return kit


#: Default tool settings: what a user who writes ``@kit.tool(...)`` gets.
kit = make_kit()


def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="stand-in", prompt=task["ask"], max_tokens=64)
    orders = ctx.call("search_orders", query=task["ask"])
    update = ctx.call("send_update", customer_id=task["customer"], text=plan["content"])
    return {"plan": plan["content"], "orders": orders, "update": update}


def plain_python(task: dict[str, Any]) -> dict[str, Any]:
    """The same work with no runtime at all: the floor."""
    plan = llm_stand_in({"model": "stand-in", "prompt": task["ask"], "max_tokens": 64})
    return {
        "plan": plan["content"],
        "orders": search_orders(task["ask"]),
        "update": send_update(task["customer"], plan["content"]),
    }


def task(number: int) -> dict[str, Any]:
    return {"ask": f"where is order {number}?", "customer": f"c-{number}"}


def dbos_workflow() -> Any:
    """The workload as a DBOS workflow with one step per effect, registered with DBOS (which
    must be installed: the bench environment has it), for the harnesses that drive DBOS."""
    from dbos import DBOS

    @DBOS.step()
    def plan_step(prompt: str) -> dict[str, Any]:
        return llm_stand_in({"model": "stand-in", "prompt": prompt, "max_tokens": 64})

    @DBOS.step()
    def search_step(query: str) -> list[dict[str, Any]]:
        return search_orders(query)

    @DBOS.step()
    def update_step(customer_id: str, text: str) -> dict[str, Any]:
        return send_update(customer_id, text)

    @DBOS.workflow(name="agent_workflow")
    def agent_workflow(task: dict[str, Any]) -> dict[str, Any]:
        plan = plan_step(task["ask"])
        orders = search_step(task["ask"])
        update = update_step(task["customer"], plan["content"])
        return {"plan": plan["content"], "orders": orders, "update": update}

    return agent_workflow
