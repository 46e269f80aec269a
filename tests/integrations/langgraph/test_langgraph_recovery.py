"""A LangGraph agent killed right after its irreversible tool did its work: recovery
answers what the journal holds, never runs the tool again, and blocks the run on that step
for an operator; once resolved, the run finishes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.langgraph_helpers import SCRIPT
from tracelock.examples.react_server import ReactServer
from tracelock.runtime.records import load_run


def test_a_crash_after_an_irreversible_tool_never_runs_it_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = tmp_path / "counts.log"
    store = tmp_path / "store"
    with ReactServer(SCRIPT) as server:
        monkeypatch.setenv("TL_TEST_SERVER", server.url)
        monkeypatch.setenv("TL_TEST_COUNTS", str(counts))
        monkeypatch.delenv("TL_TEST_CRASH", raising=False)
        monkeypatch.delitem(sys.modules, "_langgraph_crash_child", raising=False)
        env = dict(os.environ, TL_TEST_CRASH="1",
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
        done = subprocess.run([sys.executable, "-m", "_langgraph_crash_child", str(store)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 9, done.stderr
        assert counts.read_text().splitlines() == ["lookup A-1", "lookup B-2", "refund A-1 5"]
        assert len(server.requests) == 2

        import _langgraph_crash_child as child

        runtime = child.make_runtime(str(store))
        crashed = load_run(runtime.store, "crashed")
        assert sorted(crashed.effects) == [0, 1, 2, 3] and sorted(crashed.pending) == [4]
        report = runtime.recover()
        assert [row["to"] for row in report.runs] == ["blocked"], report.to_dict()
        assert counts.read_text().splitlines() == ["lookup A-1", "lookup B-2", "refund A-1 5"]  # nothing ran again
        assert len(server.requests) == 2  # recorded model calls answered from the journal

        runtime.resolve("crashed", 4, by="alice", reason="the bank confirms the refund", result="refunded 5 on A-1")
        report = runtime.recover()
        assert [row["to"] for row in report.runs] == ["completed"], report.to_dict()
        output = runtime.retrieve("crashed").output
        assert output["messages"][-1]["content"] == "done: refunded 5 on A-1"
        assert counts.read_text().splitlines() == ["lookup A-1", "lookup B-2", "refund A-1 5"]
        assert len(server.requests) == 3  # only the last model call was new
        runtime.close()
