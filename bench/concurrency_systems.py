"""The systems ``python -m bench.concurrency`` compares, each running the README's 3-effect
workload (``bench.workload``: one LLM call, the read-only ``search_orders``, the
irreversible ``send_update``, unique inputs) with an LLM that takes :data:`LLM_LATENCY_S`.

Two kinds of system. An *async* system (:class:`AsyncSystem`) runs on the child's event loop:
its runs are coroutines, and the LLM's latency is an ``await asyncio.sleep``. A *threaded*
system (:class:`ThreadedSystem`) runs each run on a thread of its own, and the LLM's latency
is a ``time.sleep``. Peers are imported only when their system is opened, so this module
imports without them (the test environment has neither DBOS nor LangGraph).
"""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench import workload

#: The simulated LLM's latency: every system's LLM call takes this long (awaited or slept).
LLM_LATENCY_S = 0.05


class AsyncSystem:
    """A system whose runs are coroutines on the caller's event loop."""

    key = ""
    title = ""
    #: Distributions whose versions the report shows.
    distributions: tuple[str, ...] = ()
    #: How the workload is written for this system, for the report.
    how = ""
    threaded = False

    async def open(self, root: Path) -> None:
        """Set up a fresh store under ``root`` (an empty directory)."""

    async def run(self, number: int) -> Any:
        """One durable run on ``workload.task(number)``; returns its output once durable."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release the store."""


class ThreadedSystem:
    """A system whose runs are blocking calls, one thread per concurrent run."""

    key = ""
    title = ""
    distributions: tuple[str, ...] = ()
    how = ""
    threaded = True

    def open(self, root: Path) -> None:
        """Set up a fresh store under ``root`` (an empty directory)."""

    def run(self, number: int) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Release the store."""


# -- the workload's effects, awaitable ----------------------------------------------------------
class Waiting:
    """The Python heap held by the runs waiting on their LLM call: when most of them wait at
    once (while ``tracemalloc`` traces), how many do and the heap's size then. What a run in
    flight holds, apart from what the runs starting and ending around it allocate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.inside = 0
        self.most = 0
        self.heap = 0

    def enter(self) -> None:
        with self._lock:
            self.inside += 1
            if self.inside > self.most and tracemalloc.is_tracing():
                self.most = self.inside
                self.heap = tracemalloc.get_traced_memory()[0]

    def leave(self) -> None:
        with self._lock:
            self.inside -= 1


WAITING = Waiting()


async def async_llm(request: dict[str, Any]) -> dict[str, Any]:
    """The LLM stand-in behind an awaited network round trip."""
    WAITING.enter()
    try:
        await asyncio.sleep(LLM_LATENCY_S)
    finally:
        WAITING.leave()
    return workload.llm_stand_in(request)


def sleeping_llm(request: dict[str, Any]) -> dict[str, Any]:
    """The LLM stand-in behind a blocking network round trip."""
    WAITING.enter()
    try:
        time.sleep(LLM_LATENCY_S)
    finally:
        WAITING.leave()
    return workload.llm_stand_in(request)


async def search_orders(query: str) -> list[dict[str, Any]]:
    return workload.search_orders(query)


async def send_update(customer_id: str, text: str) -> dict[str, Any]:
    return workload.send_update(customer_id, text)


# -- tracelock ----------------------------------------------------------------------------------
async def tracelock_async_agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """``bench.workload.agent`` written as an ``async def`` agent."""
    plan = await ctx.llm(model="stand-in", prompt=task["ask"], max_tokens=64)
    orders = await ctx.call("search_orders", query=task["ask"])
    update = await ctx.call("send_update", customer_id=task["customer"], text=plan["content"])
    return {"plan": plan["content"], "orders": orders, "update": update}


def _checked(result: Any) -> Any:
    if not result.ok:
        raise RuntimeError(f"tracelock run failed: {result.code} {result.error}")
    return result.output


class TracelockArun(AsyncSystem):
    key = "tracelock-arun"
    title = "tracelock `arun` (async agent, async tools)"
    distributions = ("tracelock",)
    how = (
        "`await runtime.arun(agent, task)`: an `async def` agent, an async LLM provider "
        "(`await asyncio.sleep(0.05)`), both tools `async def` (an async service's natural "
        "tools), default settings, a directory store"
    )

    async def open(self, root: Path) -> None:
        from tracelock.runtime.runtime import Runtime
        from tracelock.runtime.tools.toolkit import Toolkit

        kit = Toolkit()
        kit.tool("search_orders", side_effect="read_only")(search_orders)
        kit.tool("send_update", side_effect="irreversible")(send_update)
        self.runtime = Runtime(root / "store", workload.POLICY, llm=async_llm, toolkits=(kit,))

    async def run(self, number: int) -> Any:
        result = await self.runtime.arun(tracelock_async_agent, workload.task(number))
        return _checked(result)

    async def close(self) -> None:
        self.runtime.close()


class TracelockThreads(ThreadedSystem):
    key = "tracelock-threads"
    title = "tracelock `run` on threads"
    distributions = ("tracelock",)
    how = (
        "`runtime.run(agent, task)` from N threads: `bench.workload`'s agent and tools, an LLM "
        "provider doing `time.sleep(0.05)`, default settings, a directory store"
    )

    def open(self, root: Path) -> None:
        from tracelock.runtime.runtime import Runtime
        from tracelock.runtime.tools.toolkit import Toolkit

        kit = Toolkit()
        kit.tool(side_effect="read_only")(workload.search_orders)
        kit.tool(side_effect="irreversible")(workload.send_update)
        self.runtime = Runtime(root / "store", workload.POLICY, llm=sleeping_llm, toolkits=(kit,))

    def run(self, number: int) -> Any:
        return _checked(self.runtime.run(workload.agent, workload.task(number)))

    def close(self) -> None:
        self.runtime.close()


# -- DBOS ---------------------------------------------------------------------------------------
def _dbos_async_workflow() -> Any:
    """The workload as an async DBOS workflow, one async step per effect (registered with DBOS
    when called, before launch)."""
    from dbos import DBOS

    @DBOS.step()
    async def plan_step(prompt: str) -> dict[str, Any]:
        return await async_llm({"model": "stand-in", "prompt": prompt, "max_tokens": 64})

    @DBOS.step()
    async def search_step(query: str) -> list[dict[str, Any]]:
        return await search_orders(query)

    @DBOS.step()
    async def update_step(customer_id: str, text: str) -> dict[str, Any]:
        return await send_update(customer_id, text)

    @DBOS.workflow(name="agent_workflow")
    async def agent_workflow(task: dict[str, Any]) -> dict[str, Any]:
        plan = await plan_step(task["ask"])
        orders = await search_step(task["ask"])
        update = await update_step(task["customer"], plan["content"])
        return {"plan": plan["content"], "orders": orders, "update": update}

    return agent_workflow


class DbosAsync(AsyncSystem):
    key = "dbos"
    title = "DBOS async workflows (SQLite)"
    distributions = ("dbos",)
    how = (
        "an `async def` `@DBOS.workflow` with one `async def` `@DBOS.step` per effect, one "
        "workflow id per run (`SetWorkflowID`), the system database in a SQLite file"
    )

    async def open(self, root: Path) -> None:
        from dbos import DBOS

        self.workflow = _dbos_async_workflow()
        DBOS(config={"name": "bench-concurrency", "system_database_url": f"sqlite:///{root / 'dbos.sqlite'}", "log_level": "ERROR"})
        DBOS.launch()

    async def run(self, number: int) -> Any:
        from dbos import SetWorkflowID

        with SetWorkflowID(f"run-{number}"):
            return await self.workflow(workload.task(number))

    async def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()


# -- LangGraph ----------------------------------------------------------------------------------
def _langgraph_async_graph(checkpointer: Any) -> Any:
    """The workload as a three-node LangGraph graph with async nodes."""
    from langgraph.graph import END, START, StateGraph

    from bench.peers.apps.langgraph_app import State

    async def plan_node(state: State) -> State:
        return {"plan": await async_llm({"model": "stand-in", "prompt": state["ask"], "max_tokens": 64})}

    async def search_node(state: State) -> State:
        return {"orders": await search_orders(state["ask"])}

    async def update_node(state: State) -> State:
        return {"update": await send_update(state["customer"], state["plan"]["content"])}

    graph = StateGraph(State)
    graph.add_node("plan", plan_node)
    graph.add_node("search", search_node)
    graph.add_node("update", update_node)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "search")
    graph.add_edge("search", "update")
    graph.add_edge("update", END)
    return graph.compile(checkpointer=checkpointer)


class LanggraphAsync(AsyncSystem):
    key = "langgraph"
    title = "LangGraph `ainvoke` + AsyncSqliteSaver"
    distributions = ("langgraph", "langgraph-checkpoint-sqlite", "aiosqlite")
    how = (
        "a three-node graph with `async def` nodes, `graph.ainvoke(task, config, "
        'durability="sync")` with one thread id per run, `AsyncSqliteSaver` over one aiosqlite '
        "connection"
    )

    async def open(self, root: Path) -> None:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        self.connection = await aiosqlite.connect(root / "langgraph.sqlite")
        saver = AsyncSqliteSaver(self.connection)
        await saver.setup()
        self.graph = _langgraph_async_graph(saver)

    async def run(self, number: int) -> Any:
        config = {"configurable": {"thread_id": f"run-{number}"}}
        state = await self.graph.ainvoke(workload.task(number), config, durability="sync")
        return {"plan": state["plan"]["content"], "orders": state["orders"], "update": state["update"]}

    async def close(self) -> None:
        await self.connection.close()


#: The systems, in the order the report lists them.
SYSTEMS: dict[str, type[AsyncSystem | ThreadedSystem]] = {
    "tracelock-arun": TracelockArun,
    "tracelock-threads": TracelockThreads,
    "dbos": DbosAsync,
    "langgraph": LanggraphAsync,
}
