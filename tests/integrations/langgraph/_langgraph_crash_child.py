"""Child process of the LangGraph crash test: records a run of the ReAct graph whose
irreversible ``refund`` tool does its work and then the process dies (``os._exit``), before
the step has a result. The parent recovers the run with the same agent (without the
crash). Every real execution of a tool is a line in ``TL_TEST_COUNTS``, outside the store."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from langchain_core.tools import tool

from tests.integrations.langgraph_helpers import (
    SCRIPT,
    SIDE_EFFECTS,
    Shop,
    build_graph,
    shop_policy,
)
from tracelock.integrations.langgraph import register_langchain_tools, state_json
from tracelock.runtime.runtime import Runtime

# Read at import (agent code may not read the environment in strict mode).
CRASH = os.environ.get("TL_TEST_CRASH") == "1"
COUNTS = Path(os.environ["TL_TEST_COUNTS"])
assert SCRIPT  # the server the parent started plays this script


def _count(line: str) -> None:
    with open(COUNTS, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


@tool
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up by its id."""
    _count(f"lookup {order_id}")
    return {"order": order_id, "status": "shipped", "eta_days": 2}


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an amount on an order (irreversible)."""
    _count(f"refund {order_id} {amount}")
    if CRASH:
        os._exit(9)
    return f"refunded {amount} on {order_id}"


shop = Shop()
shop.tools = [lookup, refund]
graph = build_graph(shop, os.environ["TL_TEST_SERVER"])


def agent(ctx: Any, input: Any) -> Any:
    return state_json(graph.invoke(input))


def make_runtime(store: str) -> Runtime:
    runtime = Runtime(store, shop_policy())
    register_langchain_tools(runtime, shop.tools, side_effects=SIDE_EFFECTS)
    return runtime


if __name__ == "__main__":
    import _langgraph_crash_child as recorded  # the agent by its importable name, not __main__'s

    from tests.integrations.langgraph_helpers import QUESTION

    recorded.make_runtime(sys.argv[1]).run(recorded.agent, QUESTION, run_id="crashed")
