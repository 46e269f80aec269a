"""A small MCP server (the official SDK's MCPServer) for the adapter's tests, the example's
shape: run over stdio (no argument) or streamable HTTP (``--http PORT``).

Every tool call that reaches it appends one JSON line to the file named by the
``MCP_EFFECTS`` environment variable (outside any tracelock store): the tests count the
calls a server really received, so "replay ran nothing" is checked, not assumed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("tracelock-test-tools", log_level="WARNING")
_VALUES: dict[str, str] = {"greeting": "hello"}


def _count(tool: str, args: dict[str, Any], ctx: Context | None = None) -> None:
    meta = ctx.request_context.meta if ctx is not None else None
    key = meta.get("tracelock/idempotency-key") if isinstance(meta, dict) else None
    with open(os.environ["MCP_EFFECTS"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"tool": tool, "args": args, "key": key}, sort_keys=True) + "\n")


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key: str) -> str:
    """Read a value."""
    _count("lookup", {"key": key})
    return _VALUES.get(key, "")


@app.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
def set_value(key: str, value: str, ctx: Context) -> str:
    """Set a value (the same call twice changes nothing more)."""
    _count("set_value", {"key": key, "value": value}, ctx)
    _VALUES[key] = value
    return "ok"


@app.tool()
def send_message(to: str, text: str) -> dict[str, Any]:
    """Send a message: no annotations, so destructive and not idempotent by default."""
    _count("send_message", {"to": to, "text": text})
    return {"sent": True, "to": to, "length": len(text)}


@app.tool(annotations=ToolAnnotations(destructive_hint=False))
def append_note(text: str) -> int:
    """Append a note: additive, yet each call adds one more."""
    _count("append_note", {"text": text})
    return len(text)


@app.tool()
def send_then_crash_client(to: str, text: str) -> str:
    """Send a message, then kill the client process (a crash while the call is in flight:
    the effect happened, the client never gets the answer)."""
    _count("send_then_crash_client", {"to": to, "text": text})
    os.kill(os.getppid(), signal.SIGKILL)
    return "never read"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(seconds: float) -> str:
    """Answers after ``seconds``."""
    _count("slow", {"seconds": seconds})
    await anyio.sleep(seconds)
    return "late"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str) -> str:
    """Always fails (a tool error: isError)."""
    _count("fail", {"reason": reason})
    raise ToolError(f"refused: {reason}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
