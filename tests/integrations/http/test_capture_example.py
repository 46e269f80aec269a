"""The example under examples/openai_capture runs as a new user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "openai_capture" / "agent.py"


def test_the_example_records_then_replays_with_the_server_stopped() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "replayed with the server stopped: match" in done.stdout
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if line.startswith(("fingerprint", "replayed fingerprint")))
    assert lines["fingerprint"] == lines["replayed fingerprint"]
