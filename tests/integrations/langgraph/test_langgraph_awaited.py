"""A LangGraph ReAct graph driven with ``await graph.ainvoke`` inside an awaited run
(``await runtime.arun``): its tool calls and model calls are steps run on the caller's event
loop, which keeps running other tasks while a tool works; the run replays (``areplay``)
with the server stopped and no tool run."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, tool

from tests.integrations.capture_helpers import runtime_at
from tests.integrations.langgraph_helpers import (
    QUESTION,
    SCRIPT,
    SIDE_EFFECTS,
    async_agent_of,
    build_graph,
    shop_policy,
)
from tests.integrations.loop_helpers import (
    MIN_TICKS,
    Effect,
    Heartbeat,
    StepThreads,
    record_then_replay,
)
from tracelock.examples.react_server import ReactServer
from tracelock.integrations.langgraph import register_langchain_tools


class SlowShop:
    """The shop's tools with an ``async`` lookup that takes a while (``Effect.slow``)."""

    def __init__(self, beat: Heartbeat) -> None:
        self.lookups: list[Effect] = []
        self.refunds: list[dict[str, Any]] = []
        shop = self

        @tool
        async def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up by its id."""
            effect = Effect(beat)
            shop.lookups.append(effect)
            await effect.slow()
            return {"order": order_id, "status": "shipped", "eta_days": 2}

        @tool
        def refund(order_id: str, amount: int) -> str:
            """Refund an amount on an order (irreversible)."""
            shop.refunds.append({"order_id": order_id, "amount": amount})
            return f"refunded {amount} on {order_id}"

        self.tools: list[BaseTool] = [lookup, refund]


def test_an_awaited_graph_runs_its_steps_on_the_callers_loop_which_keeps_running(tmp_path: Path) -> None:
    beat = Heartbeat()
    shop = SlowShop(beat)
    server = ReactServer(SCRIPT).start()
    agent = async_agent_of(build_graph(shop, server.url, use_async=True))  # type: ignore[arg-type]
    runtime = runtime_at(tmp_path, shop_policy())
    register_langchain_tools(runtime, shop.tools, side_effects=SIDE_EFFECTS)
    observer = StepThreads()
    runtime.environment.observer = observer

    # The server stopped between: nothing listens any more.
    loop, result, report = record_then_replay(runtime, agent, QUESTION, beat, server.stop)
    assert result.status == "completed", result.to_dict()
    assert [(effect["kind"], effect["name"]) for effect in result.effects] == [
        ("llm", "openai.chat.completions"), ("tool", "lookup"), ("tool", "lookup"),
        ("llm", "openai.chat.completions"), ("tool", "refund"), ("llm", "openai.chat.completions"),
    ]
    assert [effect["args"]["order_id"] for effect in result.effects if effect["name"] == "lookup"] == ["A-1", "B-2"]
    assert result.output["messages"][-1] == {"type": "ai", "content": "done: refunded 5 on A-1"}
    # Each lookup was awaited on the caller's loop, and the heartbeat ticked meanwhile.
    assert len(shop.lookups) == 2
    for effect in shop.lookups:
        assert effect.loop is loop and effect.thread is threading.main_thread()
        assert effect.ticks >= MIN_TICKS, effect.ticks
    # Every step (the tools' and the model's captured requests) entered the pipeline on the
    # caller's thread: none was handed to a thread of its own.
    assert set(observer.threads.values()) == {threading.main_thread().name}, observer.threads
    assert report.matched, report.divergence
    assert report.replayed_fingerprint == result.fingerprint
    assert len(shop.lookups) == 2 and len(shop.refunds) == 1  # the replay ran no tool
    runtime.close()
