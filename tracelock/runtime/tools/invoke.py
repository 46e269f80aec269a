"""Calling a tool's function under its timeout.

A sync tool under a timeout runs on the caller's thread, with no hand-off, wherever its
deadline can end it there: the process's one watchdog thread
(:mod:`tracelock.runtime.tools.watchdog`) acts only when a deadline passes, and raises
``ToolDeadline`` in the tool, which the caller reports as ``TimeoutError`` (the pipeline's
``TOOL_TIMEOUT``). On the main thread a signal carries it, so the tool is ended at the
deadline even while blocked in a system call (sleeping, reading a socket, waiting on a
lock); on other threads only an asynchronous exception can, which Python code sees at its
next bytecode and a call blocked in C only when that call returns. So the tool's
``timeout_mode`` decides:

- ``auto`` (the default): inline on the main thread (when the signal's handler is ours);
  elsewhere handed to a pool thread, as before: the caller gets ``TOOL_TIMEOUT`` at the
  deadline whatever the tool does, and a blocked tool keeps running in its thread;
- ``inline``: on the caller's thread everywhere, accepting that off the main thread a tool
  blocked in C is ended only when its call returns;
- ``thread``: always handed to a pool thread; the tool is never interrupted, only abandoned
  at the deadline (for a tool whose half-done work is worse than a leaked thread).

A sync tool registered with ``timeout=None`` runs inline with no deadline at all.

An async tool runs on the caller's thread, in an event loop kept per thread and reused
across calls; its deadline is a timer of that loop, which cancels the tool when it passes.
No thread is involved unless the caller's thread already runs an event loop outside a
bridged call, where a loop cannot nest.

In a bridged call (an async caller's run, :mod:`tracelock.runtime.bridge`), nothing blocks
the caller's loop: an async tool is awaited on it, under its deadline as an asyncio
timeout that cancels it; a sync tool runs in the runtime's bounded tool pool and is
abandoned at its deadline (``TOOL_TIMEOUT`` either way). An LLM provider is called the
same way (:meth:`ToolInvoker.ask`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from tracelock.runtime import bridge
from tracelock.runtime.tools.tools import Tool
from tracelock.runtime.tools.watchdog import WATCHDOG, ToolDeadline


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
        if bridge.active():
            return bridge.wait(self._on_loop(tool, kwargs))
        if not tool.is_async:
            timeout = tool.timeout_s
            if timeout is None:
                return tool.func(**kwargs)
            mode = tool.timeout_mode
            if mode != "thread":
                if threading.current_thread() is threading.main_thread() and WATCHDOG.signal_ready():
                    slot = WATCHDOG.slot(signalled=True)
                elif mode == "inline":
                    slot = WATCHDOG.slot(signalled=False)
                else:
                    slot = None
                # A tool calling a tool on the same thread: the outer one holds the slot.
                if slot is not None and not slot.armed:
                    return _watched(tool, kwargs, slot, timeout)
            return self._handed_off(tool, lambda: tool.func(**kwargs))
        if asyncio._get_running_loop() is not None:
            return self._handed_off(tool, lambda: asyncio.run(tool.func(**kwargs)))
        return self._inline_async(tool, kwargs)

    def ask(self, provider: Callable[[dict[str, Any]], Any], request: dict[str, Any]) -> Any:
        """Call an LLM provider (sync or ``async``) with ``request``, the way the caller's
        place allows: awaited on the caller's loop or run in the tool pool in a bridged call,
        else on this thread (an async one in its private loop)."""
        if bridge.active():
            if is_async_callable(provider):
                return bridge.wait(provider(request))
            return bridge.wait(bridge.in_thread(provider, request, executor=self._pool))
        answer = provider(request)
        if not inspect.iscoroutine(answer):
            return answer
        if asyncio._get_running_loop() is not None:
            return self._pool.submit(asyncio.run, answer).result()
        return self._on_thread_loop(lambda: answer)

    async def _on_loop(self, tool: Tool, kwargs: dict[str, Any]) -> Any:
        timeout = tool.timeout_s
        if tool.is_async:
            if timeout is None:
                return await tool.func(**kwargs)
            async with asyncio.timeout(timeout):
                return await tool.func(**kwargs)
        call = bridge.in_thread(functools.partial(tool.func, **kwargs), executor=self._pool)
        if timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, timeout)
        except TimeoutError:
            raise TimeoutError(tool.name) from None

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
        timeout = tool.timeout_s

        async def bounded() -> Any:
            if timeout is None:
                return await tool.func(**kwargs)
            async with asyncio.timeout(timeout):
                return await tool.func(**kwargs)

        return self._on_thread_loop(bounded)

    def _on_thread_loop(self, coroutine: Callable[[], Any]) -> Any:
        """Run the coroutine ``coroutine()`` makes in this thread's private event loop."""
        loop: _ThreadLoop | None = getattr(self._loops, "loop", None)
        if loop is None:
            loop = self._loops.loop = _ThreadLoop()
        # A fresh copy of the caller's context per call, as asyncio.run would take.
        try:
            return loop.runner.run(coroutine(), context=contextvars.copy_context())
        finally:
            _cancel_leftovers(loop.runner.get_loop())


def is_async_callable(func: Callable[..., Any]) -> bool:
    """Whether calling ``func`` makes a coroutine (an ``async def``, or an object whose
    ``__call__`` is one)."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def _watched(tool: Tool, kwargs: dict[str, Any], slot: Any, timeout: float) -> Any:
    """Run a sync tool on this thread under the watchdog's deadline."""
    fired = False
    try:
        try:
            WATCHDOG.arm(slot, timeout)
            result = tool.func(**kwargs)
        finally:
            fired = WATCHDOG.disarm(slot)
    except ToolDeadline:
        raise TimeoutError(tool.name) from None
    except Exception:
        # What the tool raised while being ended (a cleanup failing, say) is still a timeout.
        if slot.fired:
            raise TimeoutError(tool.name) from None
        raise
    if fired:  # the deadline passed before the tool's result was taken
        raise TimeoutError(tool.name)
    return result


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a tool left running, as asyncio.run does when its loop closes."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    # Nothing a cancelled leftover returns reaches the run, so the order they end in is moot.
    for task in pending:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            loop.run_until_complete(task)
