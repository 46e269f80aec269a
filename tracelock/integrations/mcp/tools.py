"""An MCP server's tools as tracelock tools.

Each tool the server lists becomes one :class:`~tracelock.runtime.tools.tools.Tool` whose
function calls the server: its ``inputSchema`` is the tool's schema (VALIDATE checks the
arguments before anything is sent), its side-effect class comes from its annotations, and
every call is a step like any ``ctx.call``: authorized by the policy, its intent journaled
first when it is idempotent or irreversible, its result journaled, answered from the journal
on replay.

The side-effect class, from the MCP annotations and their defaults in the specification
(``readOnlyHint`` false, ``destructiveHint`` true, ``idempotentHint`` false):

- ``readOnlyHint: true``: ``read_only`` (the other hints are meaningless then);
- else ``idempotentHint: true``: ``idempotent`` (tracelock's idempotency key is sent in the
  call's ``_meta``);
- else ``irreversible``, whatever ``destructiveHint`` says: a tool that is neither read-only
  nor idempotent adds something each time it runs (even a non-destructive one), so running
  it again after a crash is not safe.

Annotations are hints the server gives about itself; ``side_effects=`` overrides them per
tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from tracelock.integrations.mcp.connection import IDEMPOTENCY_META, McpServer
from tracelock.integrations.mcp.errors import McpListingError
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.runtime.tools.tools import SIDE_EFFECTS, SideEffect, Tool, ToolDefinitionError

__all__ = ["mcp_toolkit", "mcp_tools", "side_effect_of"]


def side_effect_of(annotations: Mapping[str, Any] | None) -> SideEffect:
    """The side-effect class of a tool with these MCP ``annotations`` (see the module)."""
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return "read_only"
    if hints.get("idempotentHint") is True:
        return "idempotent"
    return "irreversible"


def _caller(server: McpServer, mcp_name: str, timeout: float | None, wants_key: bool) -> Callable[..., Any]:
    """The tool's function: ``async``, so that an awaited run awaits the call on its own
    loop (no thread held while the server works); a sync run awaits it in its thread's
    loop (see ``tracelock.runtime.tools.invoke``)."""
    if wants_key:

        async def call_with_key(**arguments: Any) -> Any:
            key = arguments.pop("idempotency_key", None)
            meta = {IDEMPOTENCY_META: key} if isinstance(key, str) else None
            return await server.acall(mcp_name, arguments, timeout=timeout, meta=meta)

        return call_with_key

    async def call(**arguments: Any) -> Any:
        return await server.acall(mcp_name, arguments, timeout=timeout)

    return call


def mcp_tools(
    server: McpServer,
    *,
    listing: Sequence[Mapping[str, Any]] | None = None,
    prefix: str = "",
    side_effects: Mapping[str, str] | None = None,
    only: Sequence[str] | None = None,
    timeout: float | None = 30.0,
) -> list[Tool]:
    """The server's tools as :class:`Tool` objects (see :func:`mcp_toolkit`)."""
    if listing is None:
        listing = server.list_tools()
    overrides = dict(side_effects or {})
    names: list[str] = []
    tools: list[Tool] = []
    for index, entry in enumerate(listing):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        schema = entry.get("inputSchema") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not isinstance(schema, Mapping):
            raise McpListingError(
                f"MCP server {server.name}: tool listing entry {index} has no name or inputSchema",
                details={"server": server.name, "index": index},
            )
        names.append(name)
        if only is not None and name not in only:
            continue
        annotations = entry.get("annotations")
        side_effect: str = side_effect_of(annotations if isinstance(annotations, Mapping) else None)
        if name in overrides:
            side_effect = overrides[name]
            if side_effect not in SIDE_EFFECTS:
                raise McpListingError(
                    f"side_effects[{name!r}]: {side_effect!r} is not one of {', '.join(SIDE_EFFECTS)}",
                    details={"server": server.name, "tool": name},
                )
        properties = schema.get("properties")
        # A tool whose own argument is called idempotency_key keeps it; it gets no key.
        wants_key = side_effect == "idempotent" and not (isinstance(properties, Mapping) and "idempotency_key" in properties)
        description = entry.get("description")
        try:
            tools.append(
                Tool(
                    name=prefix + name,
                    func=_caller(server, name, timeout, wants_key),
                    side_effect=cast(SideEffect, side_effect),
                    schema=dict(schema),
                    timeout_s=timeout,
                    description=(description if isinstance(description, str) else "").split("\n")[0],
                    wants_idempotency_key=wants_key,
                )
            )
        except ToolDefinitionError as exc:
            raise McpListingError(
                f"MCP server {server.name}: tool {name!r} cannot be a tracelock tool: {exc.message}",
                details={"server": server.name, "tool": name},
            ) from None
    unknown = sorted((set(overrides) | set(only or ())) - set(names))
    if unknown:
        raise McpListingError(
            f"MCP server {server.name} lists no tool named {', '.join(map(repr, unknown))}",
            details={"server": server.name, "tools": unknown},
        )
    return tools


def mcp_toolkit(
    server: McpServer,
    *,
    listing: Sequence[Mapping[str, Any]] | None = None,
    prefix: str = "",
    side_effects: Mapping[str, str] | None = None,
    only: Sequence[str] | None = None,
    timeout: float | None = 30.0,
) -> Toolkit:
    """A :class:`Toolkit` of the tools ``server`` exposes, named ``prefix + name``.

    ``listing`` is a saved :meth:`McpServer.list_tools` result: with it nothing connects
    (replay with the server stopped, or a fixed set of tools); without it the server is
    asked now. ``side_effects`` maps MCP tool names to a class that overrides their
    annotations; ``only`` keeps just the named tools; ``timeout`` (seconds) bounds each call
    (``TOOL_TIMEOUT``).
    """
    toolkit = Toolkit()
    for tool in mcp_tools(
        server, listing=listing, prefix=prefix, side_effects=side_effects, only=only, timeout=timeout
    ):
        toolkit.add(tool)
    return toolkit
