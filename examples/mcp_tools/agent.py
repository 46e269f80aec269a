"""An agent that uses an MCP server's tools, recorded and replayed by tracelock.

Run it as it is (``pip install 'tracelock[mcp]'``; nothing leaves the machine)::

    python examples/mcp_tools/agent.py

It starts ``server.py`` as an MCP server over stdio, lists its tools (their annotations give
each one its side-effect class), records a run that searches, tags and sends an e-mail,
saves the tool listing, stops the server, then replays the run from the journal with no
server: the same answers, the same fingerprint, no tool runs again. A changed argument
makes the replay diverge, naming the field.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tracelock import Runtime
from tracelock.integrations.mcp import McpServer, mcp_toolkit

HERE = Path(__file__).resolve().parent


def agent(ctx: Any, request: dict[str, str]) -> dict[str, Any]:
    found = ctx.call("notes.search_notes", query=request["topic"])["structuredContent"]["result"]
    for note in found:
        ctx.call("notes.tag_note", note_id=note["id"], tag="billing")
    body = "\n".join(note["text"] for note in found)
    ctx.call("notes.send_email", to=request["to"], subject=f"{len(found)} notes on {request['topic']}", body=body)
    return {"tagged": [note["id"] for note in found]}


def changed_agent(ctx: Any, request: dict[str, str]) -> dict[str, Any]:
    """The agent after a code change: it tags with another word."""
    found = ctx.call("notes.search_notes", query=request["topic"])["structuredContent"]["result"]
    for note in found:
        ctx.call("notes.tag_note", note_id=note["id"], tag="follow-up")
    return {"tagged": [note["id"] for note in found]}


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="tracelock-mcp-"))
    outbox = work / "outbox.txt"
    server = McpServer.stdio(
        sys.executable, [str(HERE / "server.py")], env={"NOTES_OUTBOX": str(outbox)}, name="notes"
    )
    listing = server.list_tools()  # starts the server process
    (work / "tools.json").write_text(json.dumps(listing, indent=2))
    toolkit = mcp_toolkit(server, listing=listing, prefix="notes.")
    for tool in toolkit.tools.values():
        print(f"tool {tool.name}: {tool.side_effect}")

    request = {"topic": "invoice", "to": "billing@example.org"}
    with Runtime(work / "store", HERE / "policy.toml", toolkits=(toolkit,)) as runtime:
        result = runtime.run(agent, request)
    print("recorded:", result.run_id, result.status, result.output)
    print("fingerprint:", result.fingerprint)
    for effect in result.effects:
        print(f"  step {effect['step']}: {effect['name']} ({effect['class']}) {effect['outcome']}")
    server.close()  # the server process ends here
    sent = len(outbox.read_text().splitlines())

    # A fresh runtime, tools from the saved listing: nothing starts the server again.
    saved = json.loads((work / "tools.json").read_text())
    replaying = McpServer.stdio(sys.executable, [str(HERE / "server.py")], name="notes")
    with Runtime(work / "store", HERE / "policy.toml", toolkits=(mcp_toolkit(replaying, listing=saved, prefix="notes."),)) as runtime:
        report = runtime.replay(result.run_id, agent)
        changed = runtime.replay(result.run_id, changed_agent)
    print("replayed with the server stopped:", "match" if report.matched else "DIVERGED")
    print("replayed fingerprint:", report.replayed_fingerprint)
    print("server connections during replay:", replaying.connections)
    print("e-mails sent:", sent, "before replay,", len(outbox.read_text().splitlines()), "after")
    if changed.divergence is not None:
        print("changed code:", changed.divergence["message"])
        print("  differs at:", ", ".join(change["path"] for change in changed.divergence["diff"]))
    print("store:", work / "store")
    ok = report.matched and not changed.matched and replaying.connections == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
