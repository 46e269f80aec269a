"""Real MCP server processes for the adapter's tests: ``tool_server.py`` over stdio (started
by the adapter itself, lazily) and over streamable HTTP on a loopback port (started here)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_helpers import TOOL_SERVER, HttpToolServer

from tracelock.integrations.mcp import McpServer


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.jsonl"


@pytest.fixture
def stdio_server(effects: Path) -> Iterator[McpServer]:
    """A stdio server description; its process starts only when something needs it."""
    server = McpServer.stdio(sys.executable, [str(TOOL_SERVER)], env={"MCP_EFFECTS": str(effects)}, name="tools")
    yield server
    server.close()


@pytest.fixture
def http_tool_server(effects: Path) -> Iterator[HttpToolServer]:
    server = HttpToolServer(effects)
    yield server
    server.stop()
