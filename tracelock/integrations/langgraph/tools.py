"""LangChain tools as tracelock tools.

A LangChain tool (a ``BaseTool``, what ``@tool`` makes, or a plain function as ``ToolNode``
accepts one) becomes a :class:`~tracelock.runtime.tools.tools.Tool` of the same name: its
JSON Schema is the tool's own ``tool_call_schema`` (what the model is shown), its side-effect
class is the one the user gives for it (default ``irreversible``: a tool nobody classified is
never run twice), and its function calls the LangChain tool. Registered on a runtime, it is
reached by the ``ToolNode`` hook (:mod:`.hook`) or by ``ctx.call``: the same request, so the
same step either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tracelock.integrations.langgraph.errors import missing
from tracelock.runtime.tools.tools import SIDE_EFFECTS, SideEffect, Tool, ToolDefinitionError

__all__ = ["DEFAULT_SIDE_EFFECT", "register_langchain_tools", "tools_from_langchain"]

#: The class of a tool the user did not classify: never run again after a crash, its intent
#: durable before it runs. Declare lookups ``read_only`` (re-run freely, cheaper to journal).
DEFAULT_SIDE_EFFECT: SideEffect = "irreversible"


def langchain_tools_module() -> Any:
    """``langchain_core.tools``, or the typed error naming the extra."""
    try:
        import langchain_core.tools
    except ImportError as exc:
        raise missing("langgraph", exc.name) from None
    return langchain_core.tools


def _as_base_tool(tool: Any, module: Any) -> Any:
    if isinstance(tool, module.BaseTool):
        return tool
    if callable(tool):
        # What ToolNode does with a plain function: the same name, description and schema.
        return module.tool(tool)
    raise ToolDefinitionError(f"not a LangChain tool or a function: {type(tool).__qualname__}")


def _schema_of(tool: Any) -> dict[str, Any]:
    """The JSON Schema of the arguments the model gives (``tool_call_schema``: injected
    arguments left out)."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return dict(schema)
    document: dict[str, Any] = schema.model_json_schema()
    return document


def _injected(tool: Any) -> list[str]:
    """Arguments LangGraph injects (state, store, tool call id, runtime): in the tool's input
    schema but not in what the model is shown."""
    shown = _schema_of(tool).get("properties", {})
    try:
        full = tool.get_input_schema().model_json_schema().get("properties", {})
    except Exception:  # a tool whose input schema is not a pydantic model: nothing injected
        return []
    return sorted(name for name in full if name not in shown)


def _jsonable(output: Any) -> Any:
    """What a LangChain tool returned, as the step's result: JSON values as they are, a
    pydantic model as its JSON form, a message as its content. Anything else is left for
    RECORD to refuse (``RESULT_NOT_JSON``)."""
    content = getattr(output, "content", None)
    if content is not None and hasattr(output, "tool_call_id"):
        return content
    dump = getattr(output, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(output, tuple):
        return list(output)
    return output


def _runner(tool: Any) -> Callable[..., Any]:
    """The tracelock tool's function: call the LangChain tool with the step's arguments."""
    if getattr(tool, "func", None) is None and inspect.iscoroutinefunction(getattr(tool, "coroutine", None)):

        async def run_async(**kwargs: Any) -> Any:
            return _jsonable(await tool.ainvoke(kwargs))

        run_async.__name__ = tool.name
        return run_async

    def run(**kwargs: Any) -> Any:
        return _jsonable(tool.invoke(kwargs))

    run.__name__ = tool.name
    return run


def tools_from_langchain(
    tools: Iterable[Any],
    *,
    side_effects: Mapping[str, SideEffect] | None = None,
    default: SideEffect = DEFAULT_SIDE_EFFECT,
    timeout: float | None = 30.0,
) -> list[Tool]:
    """tracelock tools for LangChain ``tools`` (``BaseTool``, ``@tool`` functions, plain
    functions). ``side_effects`` maps a tool name to its class (``read_only``,
    ``idempotent``, ``irreversible``); a tool it does not name gets ``default``. A name in
    ``side_effects`` that is not among the tools is refused (a typo would leave the real
    tool with the default class), and so is a tool that takes injected arguments: the state
    or store LangGraph passes it would be an input the journal does not see."""
    module = langchain_tools_module()
    classes = dict(side_effects or {})
    if default not in SIDE_EFFECTS:
        raise ToolDefinitionError(f"default side effect must be one of {', '.join(SIDE_EFFECTS)}")
    made: list[Tool] = []
    for given in tools:
        tool = _as_base_tool(given, module)
        injected = _injected(tool)
        if injected:
            raise ToolDefinitionError(
                f"tool {tool.name}: injected arguments ({', '.join(injected)}) are not supported: "
                "what LangGraph injects is an input the journal would not see",
                details={"tool": tool.name, "injected": injected},
            )
        made.append(
            Tool(
                name=tool.name,
                func=_runner(tool),
                side_effect=classes.pop(tool.name, default),
                schema=_schema_of(tool),
                timeout_s=timeout,
                description=(tool.description or "").split("\n")[0],
            )
        )
    if classes:
        raise ToolDefinitionError(
            f"side_effects names tools that were not given: {', '.join(sorted(classes))}",
            details={"unknown": sorted(classes)},
        )
    return made


def register_langchain_tools(
    target: Any,
    tools: Iterable[Any],
    *,
    side_effects: Mapping[str, SideEffect] | None = None,
    default: SideEffect = DEFAULT_SIDE_EFFECT,
    timeout: float | None = 30.0,
) -> list[Tool]:
    """Register LangChain ``tools`` on ``target`` (a :class:`tracelock.Runtime` or a
    :class:`~tracelock.runtime.tools.toolkit.Toolkit`); returns the tracelock tools. The
    options are :func:`tools_from_langchain`'s."""
    toolkit = getattr(target, "toolkit", target)
    made = tools_from_langchain(tools, side_effects=side_effects, default=default, timeout=timeout)
    for tool in made:
        toolkit.add(tool)
    return made
