"""The ``ToolNode`` hook: LangGraph's tool calls become steps of the current run.

``ToolNode(tools, wrap_tool_call=wrap_tool_call, awrap_tool_call=awrap_tool_call)`` hands
every tool call the model makes to the hook instead of running it. The hook makes the same
request ``ctx.call(name, **args)`` makes (kind ``tool``, the registered tool, the call's
arguments) and gives it to the run's pipeline, which validates it against the tool's
schema, asks the policy, journals it and runs the tool (or, on replay, answers from the
journal and runs nothing). The step's result comes back to the graph as the ``ToolMessage``
the tool's output would have made. The hook never calls ``ToolNode``'s own ``execute``: the
pipeline runs the tool, like an HTTP transport that sends nothing itself.

Order. ``ToolNode`` runs the calls of one model message concurrently (threads, or tasks), and
steps are numbered in the order they reach the pipeline. So that a run is recorded and
replayed in one order, the calls of one message take their turn in the message's order (the
model's), one after the other; a call whose message the hook cannot find in the state runs
when it arrives.

``async``. ``awrap_tool_call`` (what ``graph.ainvoke`` reaches) runs the same step on the
caller's event loop, with no thread: the step is the sync hook's, run by
:func:`~tracelock.runtime.bridge.bridged`, so each place the pipeline waits (a durable journal
append, an ``async`` tool, a sleep) is awaited on the loop, and a sync tool runs in the
runtime's tool pool. A call waiting for its turn awaits it. The loop keeps running the
graph's other tasks meanwhile (in an awaited run, ``await runtime.arun(agent)``, as in an
``async`` agent run by ``runtime.run``). A coroutine always runs on its loop's own stack, so
there is no place where this hook could not bridge, and no thread fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from tracelock.core.canonical import dumps
from tracelock.integrations.langgraph import strict
from tracelock.integrations.langgraph.errors import LangGraphOutsideRunError, missing
from tracelock.runtime.bridge import bridged
from tracelock.runtime.doors.current import current_pipeline
from tracelock.runtime.errors import StepError
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.request import tool_request
from tracelock.runtime.strict.guard import door, runtime_code

__all__ = ["ToolCallDoor", "awrap_tool_call", "error_text", "tool_node", "wrap_tool_call"]

Errors = Literal["message", "raise"]


def _messages_module() -> Any:
    try:
        import langchain_core.messages
    except ImportError as exc:
        raise missing("langgraph", exc.name) from None
    return langchain_core.messages


def error_text(error: StepError) -> str:
    """What the model reads when a tool step failed: outcome, code and reason (the same on
    replay, where it is rebuilt from the journal)."""
    return f"{error.outcome.value} [{error.step_code}]: {error.reason}"


def _siblings(state: Any, call_id: str) -> tuple[str, ...] | None:
    """The ids of the tool calls of the model message that made ``call_id``, in the model's
    order (the latest AI message of the state's ``messages``), or None when not found."""
    if isinstance(state, dict):
        messages = state.get("messages")
    elif isinstance(state, list):
        messages = state
    else:
        messages = getattr(state, "messages", None)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        calls = getattr(message, "tool_calls", None)
        if calls:
            ids = tuple(str(call.get("id")) for call in calls)
            return ids if call_id in ids else None
    return None


_Key = tuple[Pipeline, tuple[str, ...]]


class _Turns:
    """Per run and model message, whose turn it is: the index of the next call to run.
    A thread waits for its turn on a condition, a task awaits a future of its loop; a
    call that leaves wakes both kinds."""

    def __init__(self, wait_s: float) -> None:
        self._wait_s = wait_s
        self._cond = threading.Condition()
        # Keyed by the pipeline object itself: a replay and its recording share a run id.
        self._next: dict[_Key, int] = {}
        self._waiting: dict[_Key, list[asyncio.Future[None]]] = {}

    def enter(self, pipeline: Pipeline, siblings: tuple[str, ...], index: int) -> None:
        key = (pipeline, siblings)
        with self._cond:
            # Bounded: a sibling that never comes (a graph that sends only some of a
            # message's calls) must not hang the run; then calls run as they arrive.
            self._cond.wait_for(lambda: self._next.get(key, 0) >= index, timeout=self._wait_s)

    async def aenter(self, pipeline: Pipeline, siblings: tuple[str, ...], index: int) -> None:
        """:meth:`enter` for a task: awaits its turn (bounded alike), the loop goes on."""
        key = (pipeline, siblings)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._wait_s):
                while True:
                    with self._cond:  # held only to look: never across an await
                        if self._next.get(key, 0) >= index:
                            return
                        woken: asyncio.Future[None] = loop.create_future()
                        self._waiting.setdefault(key, []).append(woken)
                    try:
                        await woken
                    finally:
                        with self._cond:
                            waiters = self._waiting.get(key)
                            if waiters is not None and woken in waiters:
                                waiters.remove(woken)
                                if not waiters:
                                    del self._waiting[key]

    def leave(self, pipeline: Pipeline, siblings: tuple[str, ...], index: int) -> None:
        key = (pipeline, siblings)
        with self._cond:
            done = max(self._next.get(key, 0), index + 1)
            if done >= len(siblings):
                self._next.pop(key, None)
            else:
                self._next[key] = done
            self._cond.notify_all()
            woken = self._waiting.pop(key, [])
        for future in woken:  # each looks again, on its own loop
            future.get_loop().call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class ToolCallDoor:
    """The hook, with its two choices. ``errors``: what a failed step (denied by the policy,
    arguments refused by the schema, the tool raised) becomes: ``"message"`` (default) an
    error ``ToolMessage`` the model reads, ``"OUTCOME [CODE]: reason"``, so the graph goes on
    as it would with ``ToolNode``'s own error handling; ``"raise"`` the
    :class:`~tracelock.runtime.errors.StepError` itself, which ends the run with the step's
    outcome unless the graph catches it. ``order_wait_s`` bounds how long a call waits for
    the calls before it in its message (see the module's docstring)."""

    def __init__(self, *, errors: Errors = "message", order_wait_s: float = 60.0) -> None:
        if errors not in ("message", "raise"):
            raise ValueError("errors is 'message' or 'raise'")
        self.errors = errors
        self._turns = _Turns(order_wait_s)
        strict.allow()

    @door
    def wrap_tool_call(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        """``ToolNode``'s ``wrap_tool_call``: run ``request.tool_call`` as a step."""
        pipeline = _pipeline()
        turn = _turn(request)
        if turn is not None:
            self._turns.enter(pipeline, *turn)
        try:
            return self._step(pipeline, request.tool_call)
        finally:
            if turn is not None:
                self._turns.leave(pipeline, *turn)

    async def awrap_tool_call(self, request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        """``ToolNode``'s ``awrap_tool_call``: the same step, on the caller's event loop (a
        bridged call: the pipeline's waits are awaited there, see the module). The hook's
        own work, not agent code's: strict mode lets it through."""
        with runtime_code():
            pipeline = _pipeline()
            turn = _turn(request)
            if turn is not None:
                await self._turns.aenter(pipeline, *turn)
            try:
                message: Any = await bridged(self._step, pipeline, request.tool_call)
            finally:
                if turn is not None:
                    self._turns.leave(pipeline, *turn)
            return message

    def _step(self, pipeline: Pipeline, call: Any) -> Any:
        """The step of one tool call, and the ``ToolMessage`` its result (or failure) makes."""
        messages = _messages_module()
        step = tool_request(pipeline.env.tools, call["name"], dict(call.get("args") or {}))
        try:
            result = pipeline.run(step)
        except StepError as error:
            if self.errors == "raise":
                raise
            return messages.ToolMessage(content=error_text(error), name=call["name"], tool_call_id=call.get("id"), status="error")
        return messages.ToolMessage(content=_content(result), name=call["name"], tool_call_id=call.get("id"), status="success")


def _pipeline() -> Pipeline:
    pipeline = current_pipeline()
    if pipeline is None:
        raise LangGraphOutsideRunError(
            "a ToolNode with the tracelock hook ran outside a run: invoke the graph inside an "
            "agent the tracelock runtime drives (runtime.run(agent, input))"
        )
    return pipeline


def _turn(request: Any) -> tuple[tuple[str, ...], int] | None:
    """The call's message's call ids and its index among them, when it has siblings."""
    call = request.tool_call
    if call.get("id") is None:
        return None
    call_id = str(call.get("id"))
    siblings = _siblings(request.state, call_id)
    if siblings is None or len(siblings) < 2:
        return None
    return siblings, siblings.index(call_id)


def _content(result: Any) -> Any:
    """The ``ToolMessage`` content for a step's result: a string as it is, anything else as
    its canonical JSON text (RFC 8785), as the journal holds it: the message, and so the
    next prompt, is the same live and on replay (answered from the journal)."""
    if isinstance(result, str):
        return result
    text: str = dumps(result).decode()
    return text


_DEFAULT = ToolCallDoor()
#: The hook with the default choices (failed steps become error messages).
wrap_tool_call = _DEFAULT.wrap_tool_call
awrap_tool_call = _DEFAULT.awrap_tool_call


def tool_node(tools: Any, *, door: ToolCallDoor | None = None, **options: Any) -> Any:
    """``ToolNode(tools, wrap_tool_call=..., awrap_tool_call=..., **options)`` with the
    hook of ``door`` (default: the module's)."""
    try:
        from langgraph.prebuilt import ToolNode
    except ImportError as exc:
        raise missing("langgraph", exc.name) from None
    hooks = door or _DEFAULT
    return ToolNode(tools, wrap_tool_call=hooks.wrap_tool_call, awrap_tool_call=hooks.awrap_tool_call, **options)
