"""A tiny MCP server (the official ``mcp`` SDK) with one tool of each kind tracelock tells
apart by its annotations. ``agent.py`` starts it over stdio; run it alone with
``python server.py`` (stdio) or ``python server.py --http 8000`` (streamable HTTP at
``http://127.0.0.1:8000/mcp``).

Sent e-mails are appended to the file named by ``NOTES_OUTBOX`` (default ``outbox.txt``),
so you can see how many the server really sent.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("notes", log_level="WARNING")

NOTES = {
    "n1": "Invoice 2291 from Acme is due on the 30th",
    "n2": "Team lunch on Friday",
    "n3": "Acme asked for a corrected invoice for order 77",
}
TAGS: dict[str, set[str]] = {}


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def search_notes(query: str) -> list[dict[str, str]]:
    """Notes whose text contains the query (case-insensitive)."""
    return [{"id": key, "text": text} for key, text in NOTES.items() if query.lower() in text.lower()]


@app.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def tag_note(note_id: str, tag: str) -> list[str]:
    """Add a tag to a note (tagging twice changes nothing more)."""
    TAGS.setdefault(note_id, set()).add(tag)
    return sorted(TAGS[note_id])


@app.tool()
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail (no annotations: destructive and not idempotent, by MCP's defaults)."""
    with open(os.environ.get("NOTES_OUTBOX", "outbox.txt"), "a", encoding="utf-8") as outbox:
        outbox.write(f"{to}\t{subject}\n")
    return "queued"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
