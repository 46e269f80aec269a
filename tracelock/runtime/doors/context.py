"""The run context: the door an agent's code reaches the outside world through.

Every method that is a step (``call``, ``llm``, ``submit``, ``now``, ``random``, ``uuid``,
``sleep``, ``gather``) makes a :class:`StepRequest` and hands it to the run's
:class:`Pipeline` (:mod:`tracelock.runtime.pipeline`), which takes it through the seven
phases, or answers it from the recording. ``route``, ``patched`` and ``mark`` record what
is not a step. Nothing here decides anything: the context only shapes requests and
results.

The first divergence from a recording is final: it is raised as :class:`Diverged` (which
``except Exception`` does not catch), kept by the pipeline, and raised again by every later
door, so agent code can neither turn it into a match nor move it.
"""

from __future__ import annotations

import datetime
import uuid as uuid_module
from collections.abc import Callable
from typing import Any

from tracelock.runtime.bridge import bridged
from tracelock.runtime.pipeline.phases import now_value
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.request import StepRequest, Task, tool_kind, tool_request
from tracelock.runtime.strict.guard import door

__all__ = ["AsyncRunContext", "RunContext", "Task"]

_NOW = ("clock.now", "now")
_RANDOM = ("random", "random")
_UUID = ("uuid", "uuid")


class RunContext:
    """What an agent receives. Create runs through :class:`tracelock.Runtime`, not directly."""

    def __init__(
        self, pipeline: Pipeline, *, input: Any, annotations: dict[str, Any] | None = None
    ) -> None:
        self.run_id = pipeline.run_id
        self.input = input
        #: What the run recorded beside its input (e.g. a proposal's reasoning): audit only,
        #: never part of the fingerprint.
        self.annotations: dict[str, Any] = dict(annotations or {})
        #: The run's step pipeline: another door (e.g. ``Files``) hands it requests too.
        self.pipeline = pipeline
        self._run = pipeline.run
        self._tools = pipeline.env.tools
        self.policy = pipeline.policy
        #: The effect document of every step so far, by step.
        self.effects = pipeline.effects
        self.routing = pipeline.routing
        self.reused = pipeline.reused
        #: H(args), H(result) of steps, computed once for the fingerprint.
        self.hashes = pipeline.hashes

    @property
    def divergence(self) -> dict[str, Any] | None:
        """The first divergence from the recording, once one was detected: the run's verdict."""
        return self.pipeline.divergence

    # -- doors -------------------------------------------------------------------------
    @door
    def call(self, tool: str | Callable[..., Any], /, **args: Any) -> Any:
        """Call a registered tool (by name or by the decorated function)."""
        return self._run(tool_request(self._tools, tool, args))

    @door
    def llm(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]] | None = None,
        prompt: str | None = None,
        max_tokens: int = 1024,
        **params: Any,
    ) -> dict[str, Any]:
        """Call the runtime's LLM provider. Returns the provider's response document
        (at least ``{"content": str}``)."""
        args: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
        if messages is not None:
            args["messages"] = messages
        if prompt is not None:
            args["prompt"] = prompt
        if params:
            args["params"] = params
        result: dict[str, Any] = self._run(StepRequest("llm", "llm", args))
        return result

    @door
    def submit(self, proposal: Any) -> Any:
        """Submit an LLM's action proposal ``{schema_version, id, action, args, reasoning}``
        (a dict or JSON text) as a step. Its reasoning is recorded and never read."""
        return self._run(StepRequest("proposal", "", proposal))

    @door
    def now(self) -> datetime.datetime:
        """The current time (UTC), read through the runtime's clock and recorded."""
        ms: int = self._run(StepRequest(*_NOW, {}))
        return now_value(ms)

    @door
    def random(self) -> float:
        """A float in [0, 1), derived from the run's seed and the step number, recorded."""
        value: float = self._run(StepRequest(*_RANDOM, {}))
        return value

    @door
    def uuid(self) -> uuid_module.UUID:
        """A version-4-shaped UUID derived from the run's seed and the step number, recorded."""
        text: str = self._run(StepRequest(*_UUID, {}))
        return uuid_module.UUID(text)

    @door
    def sleep(self, seconds: float) -> None:
        """Sleep through the runtime's sleeper; replay does not sleep."""
        self._run(StepRequest("sleep", "sleep", {"ms": round(seconds * 1000)}))

    @door
    def task(self, tool: str | Callable[..., Any], /, **args: Any) -> Task:
        """A tool call to run inside :meth:`gather` (which makes its request: its arguments
        are canonicalized there, once)."""
        kind, name = tool_kind(tool)
        return Task(kind, name, args)

    @door
    def gather(self, *tasks: Task) -> list[Any]:
        """Run several tool calls concurrently. Results come back in argument order; the
        order in which they completed is recorded, and replayed exactly.

        Against a recording, every member is judged before any of them runs, in argument
        order: the first member whose request differs is the divergence, and then a member
        count different from the recorded gather's."""
        tools = self._tools
        return self.pipeline.gather([tool_request(tools, task.name, dict(task.args)) for task in tasks])

    @door
    def route(self, decision: dict[str, Any]) -> None:
        """Record a routing decision (replay: it must equal the recorded one)."""
        self.pipeline.route(decision)

    @door
    def patched(self, change_id: str) -> bool:
        """True when this run follows the code path introduced by ``change_id``.

        A deliberate code change is accepted by the replay gate when guarded like this::

            if ctx.patched("refund-v2"):
                new behaviour
            else:
                old behaviour

        A new run takes the new path and records the marker; a run recorded before the change
        has no marker, so its replay (or resumption) takes the old path and still matches.
        """
        return self.pipeline.patched(change_id)

    @door
    def mark(self, kind: str, doc: dict[str, Any]) -> None:
        """Journal an informational entry (not an effect; not part of the fingerprint)."""
        self.pipeline.mark(kind, doc)


class AsyncRunContext:
    """The context an ``async def`` agent receives: the same doors, awaited.

    Each awaited door runs the one step pipeline of :class:`RunContext` in a bridged call
    (:mod:`tracelock.runtime.bridge`): where the step waits (a durable journal append, the
    LLM provider, a tool, a sleep), the caller's event loop goes on with its other tasks.
    An ``async`` provider or tool is awaited on that loop (a tool under its timeout, as an
    asyncio deadline that cancels it); a sync one runs in the runtime's tool pool. The
    doors that never wait (``now``, ``random``, ``uuid``, ``route``, ``patched``,
    ``mark``, ``task``) are plain calls."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self.pipeline = ctx.pipeline
        self.run_id = ctx.run_id
        self.input = ctx.input
        self.annotations = ctx.annotations
        self.policy = ctx.policy
        self.effects = ctx.effects

    @property
    def divergence(self) -> dict[str, Any] | None:
        """The first divergence from the recording, once one was detected."""
        return self._ctx.divergence

    async def call(self, tool: str | Callable[..., Any], /, **args: Any) -> Any:
        """Call a registered tool (by name or by the decorated function)."""
        return await bridged(self._ctx.call, tool, **args)

    async def llm(self, **kwargs: Any) -> dict[str, Any]:
        """Call the runtime's LLM provider (arguments as :meth:`RunContext.llm`)."""
        return await bridged(self._ctx.llm, **kwargs)

    async def submit(self, proposal: Any) -> Any:
        """Submit an LLM's action proposal as a step (see :meth:`RunContext.submit`)."""
        return await bridged(self._ctx.submit, proposal)

    async def sleep(self, seconds: float) -> None:
        """Sleep through the runtime's sleeper without blocking the loop; replay does not."""
        await bridged(self._ctx.sleep, seconds)

    async def gather(self, *tasks: Task) -> list[Any]:
        """Run several tool calls concurrently on the loop (see :meth:`RunContext.gather`)."""
        return await bridged(self._ctx.gather, *tasks)

    def task(self, tool: str | Callable[..., Any], /, **args: Any) -> Task:
        return self._ctx.task(tool, **args)

    def now(self) -> datetime.datetime:
        return self._ctx.now()

    def random(self) -> float:
        return self._ctx.random()

    def uuid(self) -> uuid_module.UUID:
        return self._ctx.uuid()

    def route(self, decision: dict[str, Any]) -> None:
        self._ctx.route(decision)

    def patched(self, change_id: str) -> bool:
        return self._ctx.patched(change_id)

    def mark(self, kind: str, doc: dict[str, Any]) -> None:
        self._ctx.mark(kind, doc)
