"""The example under examples/mcp_tools runs as a new user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_tools" / "agent.py"


def test_the_example_records_then_replays_with_the_server_stopped() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "tool notes.search_notes: read_only" in out
    assert "tool notes.tag_note: idempotent" in out
    assert "tool notes.send_email: irreversible" in out
    assert "replayed with the server stopped: match" in out
    assert "server connections during replay: 0" in out
    assert "e-mails sent: 1 before replay, 1 after" in out
    assert "differs at: /args/tag" in out
    lines = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith(("fingerprint", "replayed fingerprint")))
    assert lines["fingerprint"] == lines["replayed fingerprint"]
