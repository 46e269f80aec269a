"""Errors and step codes of the MCP adapter (all documented in ``docs/errors.md``).

Exceptions are raised outside any step (the ``mcp`` package missing, a server that cannot be
reached while its tools are listed, a listing tracelock cannot take); step codes end the step
of a live call that the server answered with an error or could not answer at all.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tracelock.errors import RuntimeFault
from tracelock.runtime.outcomes import Outcome, register_code

__all__ = [
    "MCP_REQUEST_FAILED",
    "MCP_TOOL_ERROR",
    "MCP_UNREACHABLE",
    "McpConnectError",
    "McpListingError",
    "McpNotInstalledError",
    "missing_extra",
]

_X = Outcome.EXECUTION_ERROR

#: The server answered the call with a result whose ``isError`` is true (the tool failed).
MCP_TOOL_ERROR = register_code("MCP_TOOL_ERROR", _X, "the MCP server answered the tool call with isError: true")
#: The server could not be reached, or the connection broke before the call was answered.
MCP_UNREACHABLE = register_code("MCP_UNREACHABLE", _X, "the MCP server could not be reached or the connection broke during the call")
#: The server answered the call with a JSON-RPC error (unknown tool, invalid params...).
MCP_REQUEST_FAILED = register_code("MCP_REQUEST_FAILED", _X, "the MCP server answered the tool call with a protocol error")


class McpNotInstalledError(RuntimeFault):
    """The ``mcp`` package is not installed (``pip install 'tracelock[mcp]'``)."""

    code: ClassVar[str] = "MCP_NOT_INSTALLED"


class McpConnectError(RuntimeFault):
    """An MCP server could not be reached (a command that does not start, a URL nobody
    answers, a failed handshake) when its tools were listed outside a step."""

    code: ClassVar[str] = "MCP_CONNECT_FAILED"


class McpListingError(RuntimeFault):
    """A tool listing cannot become tracelock tools: malformed, a name tracelock refuses, an
    override naming a tool the server does not list, or an unknown side-effect class."""

    code: ClassVar[str] = "MCP_LISTING_INVALID"


def missing_extra(exc: ImportError) -> McpNotInstalledError:
    """The error for the ``mcp`` package missing, naming the extra that installs it."""
    details: dict[str, Any] = {"extra": "mcp", "module": exc.name}
    return McpNotInstalledError(
        "the MCP adapter needs the mcp package (not installed): pip install 'tracelock[mcp]'",
        details=details,
    )
