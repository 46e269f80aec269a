"""The examples under examples/langgraph_agent and examples/otel_tracing run as a new user
would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _run(path: Path) -> str:
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_langgraph_example_records_then_replays_with_the_server_stopped() -> None:
    out = _run(EXAMPLES / "langgraph_agent" / "agent.py")
    assert "recorded: " in out and " completed" in out
    assert "replayed with the server stopped: match" in out
    assert "tools executed: 3" in out and "tools executed during replay: 0" in out
    assert "DENIED POLICY_ARGUMENT_REJECTED" in out  # the second refund, over the policy's cap
    lines = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith(("fingerprint", "replayed fingerprint")))
    assert lines["fingerprint"] == lines["replayed fingerprint"]


def test_the_otel_example_prints_the_span_tree_of_a_run_and_its_replay() -> None:
    out = _run(EXAMPLES / "otel_tracing" / "agent.py")
    names = [line.strip().split("  [")[0] for line in out.splitlines() if "  [" in line]
    assert names == ["invoke_agent __main__:agent", "chat gpt-test", "execute_tool lookup_order", "execute_tool refund"] * 2
    assert "tracelock.mode=replay" in out and "recorded: completed replayed: match" in out
