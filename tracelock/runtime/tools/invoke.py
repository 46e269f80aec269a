"""Calling a tool's function under its timeout.

An async tool runs on the caller's thread, in an event loop kept per thread and reused
across calls; its deadline is a timer of that loop, which cancels the tool when it passes.
No thread is involved unless the caller's thread already runs an event loop (an async
agent), where a loop cannot nest.

A sync tool with a timeout is handed to a pool thread: the caller must get ``TOOL_TIMEOUT``
at the deadline even when the tool is blocked, and CPython cannot take a thread's stack away
from a function that does not return, nor interrupt one blocked in C (an asynchronous
exception is only seen between bytecodes). A sync tool registered with ``timeout=None`` runs
inline with no hand-off."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

from tracelock.runtime.tools.tools import Tool


class _ThreadLoop:
    """One thread's reusable event loop, closed when the thread's storage goes away."""

    __slots__ = ("runner",)

    def __init__(self) -> None:
        # With a factory the runner leaves the thread's current event loop alone: the
        # caller's own asyncio code never finds this private loop.
        self.runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)

    def __del__(self) -> None:
        self.runner.close()


class ToolInvoker:
    """``invoke(tool, kwargs)``: the tool's result, or ``TimeoutError`` past its deadline."""

    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self._pool = pool
        self._loops = threading.local()

    def __call__(self, tool: Tool, kwargs: dict[str, Any]) -> Any:
        if not tool.is_async:
            if tool.timeout_s is None:
                return tool.func(**kwargs)
            return self._handed_off(tool, lambda: tool.func(**kwargs))
        if asyncio._get_running_loop() is not None:
            return self._handed_off(tool, lambda: asyncio.run(tool.func(**kwargs)))
        return self._inline_async(tool, kwargs)

    def close(self) -> None:
        """Close the calling thread's loop (other threads' close when those threads end)."""
        loop: _ThreadLoop | None = getattr(self._loops, "loop", None)
        if loop is not None:
            del self._loops.loop
            loop.runner.close()

    def _handed_off(self, tool: Tool, call: Callable[[], Any]) -> Any:
        future = self._pool.submit(call)
        try:
            return future.result(timeout=tool.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(tool.name) from None

    def _inline_async(self, tool: Tool, kwargs: dict[str, Any]) -> Any:
        loop: _ThreadLoop | None = getattr(self._loops, "loop", None)
        if loop is None:
            loop = self._loops.loop = _ThreadLoop()
        timeout = tool.timeout_s

        async def bounded() -> Any:
            if timeout is None:
                return await tool.func(**kwargs)
            async with asyncio.timeout(timeout):
                return await tool.func(**kwargs)

        # A fresh copy of the caller's context per call, as asyncio.run would take.
        try:
            return loop.runner.run(bounded(), context=contextvars.copy_context())
        finally:
            _cancel_leftovers(loop.runner.get_loop())


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a tool left running, as asyncio.run does when its loop closes."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    # Nothing a cancelled leftover returns reaches the run, so the order they end in is moot.
    for task in pending:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            loop.run_until_complete(task)
