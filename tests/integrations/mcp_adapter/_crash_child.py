"""Records a run whose irreversible MCP call kills this process while it is in flight (the
test server's ``send_then_crash_client`` does the effect, then SIGKILLs its client).

``python _crash_child.py STORE EFFECTS``; the test then recovers the store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tracelock import Runtime
from tracelock.integrations.mcp import McpServer, mcp_toolkit
from tracelock.runtime.tools.toolkit import Toolkit

TOOL_SERVER = Path(__file__).resolve().with_name("tool_server.py")
RUN_ID = "crash-1"
POLICY_DOC: dict[str, Any] = {"version": 1, "tools": [{"name": "t.lookup"}, {"name": "t.send_then_crash_client"}]}


AGENTS = Toolkit()


@AGENTS.agent("mcp-crash")
def agent(ctx: Any, input: Any) -> Any:
    ctx.call("t.lookup", key="greeting")
    return ctx.call("t.send_then_crash_client", to="ada", text="once only")


def main(store: str, effects: str) -> None:
    server = McpServer.stdio(sys.executable, [str(TOOL_SERVER)], env={"MCP_EFFECTS": effects}, name="tools")
    toolkit = mcp_toolkit(server, prefix="t.", only=["lookup", "send_then_crash_client"])
    with Runtime(store, POLICY_DOC, toolkits=(toolkit, AGENTS)) as runtime:
        runtime.run(agent, None, run_id=RUN_ID)
    raise SystemExit("the server did not end this process")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
