"""MCP servers' tools as tracelock tools, and a store served as MCP tools (``docs/integrations.md``).

``McpServer.stdio(...)`` / ``McpServer.http(url)`` say where a server is (nothing connects
yet); ``mcp_toolkit(server)`` turns the tools it lists into tracelock tools whose calls are
steps. The ``mcp`` package (extra ``tracelock[mcp]``) is imported only when a connection is
opened or a store is served; importing this package does not import it.
"""

from __future__ import annotations

from tracelock.integrations.mcp.connection import IDEMPOTENCY_META, McpServer, result_document
from tracelock.integrations.mcp.errors import (
    McpConnectError,
    McpListingError,
    McpNotInstalledError,
)
from tracelock.integrations.mcp.tools import mcp_toolkit, mcp_tools, side_effect_of

__all__ = [
    "IDEMPOTENCY_META",
    "McpConnectError",
    "McpListingError",
    "McpNotInstalledError",
    "McpServer",
    "mcp_toolkit",
    "mcp_tools",
    "result_document",
    "side_effect_of",
]
