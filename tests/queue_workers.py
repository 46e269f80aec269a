"""Real ``tracelock worker`` processes for the run queue's tests (both backends), and the
readings those tests make: the ledger the agents' tools keep outside the store, a file a
held tool writes, the run ends a run's journal holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tracelock.runtime.runtime import Runtime

REPO = Path(__file__).resolve().parents[1]
#: Long enough for a worker on a busy machine to renew it; short enough for the tests.
LEASE_MS = 1500


class Workers:
    """``tracelock worker <agents>`` processes a test starts (all killed at the end), their
    tools told where the ledger and the hold file are."""

    def __init__(self, location: str, ledger: Path, hold: Path, agents: str = "tests.runtime._queue_agents") -> None:
        self.location = location
        self.ledger = ledger
        self.hold = hold
        self.agents = agents
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *args: str, lease_ms: int = LEASE_MS) -> subprocess.Popen[str]:
        env = dict(os.environ, TRACELOCK_TEST_LEDGER=str(self.ledger), TRACELOCK_TEST_HOLD=str(self.hold))
        process = subprocess.Popen(
            [
                sys.executable, "-m", "tests.runtime._queue_worker_child", "worker", self.agents,
                "--store", self.location, "--json", "--lease-ms", str(lease_ms), *args,
            ],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.started.append(process)
        return process

    @staticmethod
    def report(process: subprocess.Popen[str], timeout: float = 180) -> dict[str, Any]:
        out, err = process.communicate(timeout=timeout)
        assert out.strip(), f"worker printed nothing (exit {process.returncode}): {err[-3000:]}"
        document: dict[str, Any] = json.loads(out)
        document["exit"] = process.returncode
        document["stderr"] = err
        return document

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


def ledger_lines(ledger: Path) -> list[dict[str, Any]]:
    """The ledger's lines (one per real effect, or per event the tools record)."""
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait for ``path`` to appear while ``process`` lives."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the worker ended before {path.name} appeared: {out} {err[-3000:]}")
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.02)


def ends(runtime: Runtime, run_id: str) -> list[str]:
    """The statuses of the run's ``run.end`` entries (a run ends once)."""
    return [str((entry.meta or {}).get("status")) for entry in runtime.store.entries(run_id) if entry.kind == "run.end"]
