"""Recovery beside a live process (tracelock.storage.presence): a run another process is
executing is left alone, never run a second time; once that process is gone, recovery
continues it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from tests.runtime._presence_child import POLICY, build
from tracelock import Runtime
from tracelock.cli.main import cli

CHILD = Path(__file__).parent.parent / "_presence_child.py"
ROOT = Path(__file__).resolve().parents[3]


def test_recover_leaves_a_live_process_s_run_alone_then_continues_it_after_a_kill(tmp_path: Path) -> None:
    store = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(store)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "in-tool").exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the service never reached its tool"
            time.sleep(0.05)
        kit = build(None)
        with Runtime(str(store), POLICY, toolkits=(kit,)) as runtime:
            assert runtime.store.ownership().others_present(runtime._presence) == [f"process {child.pid}"]
            report = runtime.recover()
        (row,) = report.runs
        assert (row["run"], row["from"], row["to"]) == ("run-live", "running", "running")
        assert "live process" in row["reason"] and str(child.pid) in row["reason"]
        shown = CliRunner().invoke(cli, ["recover", "--store", str(store), "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["runs"][0]["to"] == "running"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # The service is gone: its mark is stale, and recovery continues the run.
    kit = build(None)
    with Runtime(str(store), POLICY, toolkits=(kit,)) as runtime:
        assert runtime.store.ownership().others_present(runtime._presence) == []
        report = runtime.recover()
    (row,) = report.runs
    assert (row["run"], row["to"]) == ("run-live", "completed")
    assert not any((store / "runtimes").glob(f"{child.pid}-*.lock"))


def test_force_continues_running_runs_beside_another_runtime(tmp_path: Path) -> None:
    """With ``force`` the operator says the other runtimes run other agents: a run a crash
    left ``running`` is continued though another runtime is open on the store."""
    store = tmp_path / "store"
    kit = build(None)
    with Runtime(str(store), POLICY, toolkits=(kit,), ids=lambda: "run-crashed") as first:
        journal_run = first.store.append("run-crashed", "run.start", payload={
            "agent": "service-agent", "entry": "x:y", "input": {"key": "k"}, "policy": first.policy.hash,
            "seed": "0" * 64, "parent": None,
        }, meta={"agent": "service-agent", "status": "running"}, new_run=True)
        assert journal_run.i == 0
        with Runtime(str(store), POLICY, toolkits=(kit,)) as operator:
            assert operator.recover().runs[0]["to"] == "running"
            assert operator.recover(force=True).runs[0]["to"] == "completed"
