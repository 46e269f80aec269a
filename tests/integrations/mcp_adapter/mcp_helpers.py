"""Helpers of the MCP adapter's tests: the policy, the calls a server received, and
``tool_server.py`` over streamable HTTP as a loopback subprocess."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tracelock.integrations.mcp import McpServer

HERE = Path(__file__).resolve().parent
TOOL_SERVER = HERE / "tool_server.py"

#: Every tool of tool_server.py, allowed, under the prefix the tests use.
TOOL_NAMES = ("lookup", "set_value", "send_message", "append_note", "send_then_crash_client", "slow", "fail")
POLICY: dict[str, Any] = {"version": 1, "tools": [{"name": "t." + name} for name in TOOL_NAMES]}


def saved_listing(server: McpServer) -> list[dict[str, Any]]:
    """The server's tool listing as a saved document would give it back (the server is
    started for it and closed after)."""
    try:
        listing: list[dict[str, Any]] = json.loads(json.dumps(server.list_tools()))
    finally:
        server.close()
    return listing


def stopped(name: str = "tools") -> McpServer:
    """A server that cannot start: any connection attempt fails."""
    return McpServer.stdio("/nonexistent/mcp-server", name=name)


def calls(effects: Path) -> list[dict[str, Any]]:
    """The tool calls the server really received, in order."""
    if not effects.exists():
        return []
    return [json.loads(line) for line in effects.read_text().splitlines()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HttpToolServer:
    """``tool_server.py --http PORT`` as a subprocess on loopback."""

    def __init__(self, effects: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen(
            [sys.executable, str(TOOL_SERVER), "--http", str(self.port)],
            env={"MCP_EFFECTS": str(effects), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                assert self.process.stderr is not None
                raise AssertionError(f"the MCP HTTP server exited: {self.process.stderr.read().decode()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError("the MCP HTTP server did not start listening within 60 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


