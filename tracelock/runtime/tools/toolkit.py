"""A toolkit: the tools, agents and LLM provider a module declares, for a runtime to use.

Modules declare their tools on a :class:`Toolkit` (or directly on a ``Runtime``, which has
one). The CLI imports a module, finds its toolkits and gives them to the runtime it builds,
so the same module runs under any store and policy.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tracelock.runtime.errors import AgentDefinitionError
from tracelock.runtime.tools.tools import (
    RetryPolicy,
    SideEffect,
    TimeoutMode,
    Tool,
    ToolDefinitionError,
    result_schema_from_signature,
    schema_from_signature,
)

__all__ = ["Toolkit", "AgentSpec", "Intent", "LlmProvider", "agent_name"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Intent:
    """An intent an agent handles: routing picks by priority (higher first), then name."""

    name: str
    version: int = 1
    priority: int = 0


@dataclass(frozen=True)
class AgentSpec:
    name: str
    func: Callable[..., Any]
    intents: tuple[Intent, ...] = ()


def agent_name(func: Callable[..., Any]) -> str:
    """The stable name of an agent function: its registered name, else ``module:qualname``."""
    spec = getattr(func, "__tracelock_agent__", None)
    if isinstance(spec, AgentSpec):
        return spec.name
    return f"{func.__module__}:{func.__qualname__}"


#: An LLM provider: a request document in, ``{"content": str, ...}`` out; an ``async def``
#: one is awaited (on the caller's loop in an awaited run).
LlmProvider = Callable[[dict[str, Any]], dict[str, Any]] | Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Toolkit:
    """A set of tools and agents (and optionally an LLM provider)."""

    def __init__(self, *, llm: LlmProvider | None = None) -> None:
        self.tools: dict[str, Tool] = {}
        self.agents: dict[str, AgentSpec] = {}
        self.llm = llm
        #: Counts changes to the tools, so that what is derived from them (a run's
        #: provenance) is computed again only when they changed.
        self.revision = 0

    def tool(
        self,
        name: str | None = None,
        *,
        side_effect: SideEffect = "read_only",
        schema: dict[str, Any] | None = None,
        timeout: float | None = 30.0,
        retry: RetryPolicy | None = None,
        description: str | None = None,
        result_schema: dict[str, Any] | None = None,
        timeout_mode: TimeoutMode = "auto",
    ) -> Callable[[F], F]:
        """Register a plain function as a tool.

        ``schema`` is the JSON Schema of its keyword arguments (derived from type hints when
        omitted). ``result_schema`` is the JSON Schema its result must satisfy, the tool's
        output contract (derived from the return annotation when omitted and the
        annotation has a JSON Schema; ``{}`` declares none); a result that does not
        satisfy it ends the step ``EXECUTION_ERROR [RESULT_CONTRACT_VIOLATION]``.
        ``side_effect`` is ``read_only`` (safe to re-run), ``idempotent`` (safe to
        re-run with the same idempotency key, passed as ``idempotency_key=`` when the
        function accepts it) or ``irreversible`` (never re-run after a crash; may need
        approval). Irreversible tools cannot be retried automatically.
        ``timeout_mode`` says where a sync tool under a timeout runs: ``auto`` (on the
        caller's thread when the deadline can end it there, else in a pool thread),
        ``inline`` (always on the caller's thread) or ``thread`` (always in a pool thread,
        abandoned rather than interrupted at the deadline); see docs/runtime.md.
        """

        def register(func: F) -> F:
            tool_name = name or func.__name__
            wants_key = "idempotency_key" in inspect.signature(func).parameters
            policy = retry or RetryPolicy()
            if side_effect == "irreversible" and policy.max_attempts > 1:
                raise ToolDefinitionError(
                    f"tool {tool_name}: an irreversible effect cannot be retried automatically"
                )
            self.add(
                Tool(
                    name=tool_name,
                    func=func,
                    side_effect=side_effect,
                    schema=schema
                    if schema is not None
                    else schema_from_signature(func, skip=frozenset({"idempotency_key"})),
                    timeout_s=timeout,
                    retry=policy,
                    description=description or (inspect.getdoc(func) or "").split("\n")[0],
                    wants_idempotency_key=wants_key,
                    result_schema=(result_schema or None)
                    if result_schema is not None
                    else result_schema_from_signature(func),
                    timeout_mode=timeout_mode,
                )
            )
            # A bound method takes no attributes; ``ctx.call`` then finds it by its __name__.
            with contextlib.suppress(AttributeError):
                func.__tracelock_tool__ = tool_name  # type: ignore[attr-defined]
            return func

        return register

    def add(self, tool: Tool) -> None:
        if tool.name in self.tools and self.tools[tool.name].func is not tool.func:
            raise ToolDefinitionError(f"a different tool named {tool.name!r} is already registered")
        if self.tools.get(tool.name) is not tool:
            self.revision += 1
        self.tools[tool.name] = tool

    def agent(
        self, name: str | None = None, *, intents: Sequence[Intent | str] = ()
    ) -> Callable[[F], F]:
        """Register an agent ``def agent(ctx, input)`` (or ``async def``), optionally with
        the intents it handles."""

        def register(func: F) -> F:
            if not callable(func):
                raise AgentDefinitionError(f"{func!r} is not callable")
            parsed = tuple(Intent(i) if isinstance(i, str) else i for i in intents)
            spec = AgentSpec(name or f"{func.__module__}:{func.__qualname__}", func, parsed)
            if spec.name in self.agents and self.agents[spec.name].func is not func:
                raise AgentDefinitionError(f"a different agent named {spec.name!r} is registered")
            self.agents[spec.name] = spec
            func.__tracelock_agent__ = spec  # type: ignore[attr-defined]
            return func

        return register

    def merge(self, other: Toolkit) -> None:
        for tool in other.tools.values():
            self.add(tool)
        for spec in other.agents.values():
            if spec.name in self.agents and self.agents[spec.name].func is not spec.func:
                raise AgentDefinitionError(f"a different agent named {spec.name!r} is registered")
            self.agents[spec.name] = spec
        if other.llm is not None:
            self.llm = other.llm
