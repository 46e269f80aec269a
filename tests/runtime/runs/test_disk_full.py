"""A full disk is the store's failure, never the agent's: on a small tmpfs, runs of an agent
with an irreversible tool fill the store until an append fails. The run in flight must stay
unfinished (not ``failed``), the process must end with ``STORE_FULL``, and once space is
freed ``tracelock recover`` continues it without running an irreversible effect twice (the
tool writes each real execution to a ledger outside the store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.small_disk import grow, mounted_tmpfs

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test."""
    with mounted_tmpfs(tmp_path / "disk", "2m") as mount:
        yield mount



def _cli(*args: str | Path, env: dict[str, str]) -> tuple[int, Any, str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from tracelock.cli.main import main; main()", *map(str, args), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize(
    ("size", "steps"),
    [(150_000, 30), (2_000, 200)],
    ids=["large-results", "many-small-steps"],
)
def test_a_full_disk_leaves_the_run_unfinished_for_recover(
    small_disk: Path, tmp_path: Path, size: int, steps: int
) -> None:
    store = small_disk / "store"
    ledger = tmp_path / "ledger.txt"  # outside the tmpfs: it never fills
    env = dict(os.environ, TRACELOCK_LEDGER=str(ledger), PYTHONPATH=str(REPO))
    child = subprocess.run(
        [sys.executable, "-m", "tests.runtime._disk_full_child", str(store), str(size), str(steps)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = child.stdout.splitlines()
    assert child.returncode == 3, (child.stdout, child.stderr)
    assert "Traceback" not in child.stderr, child.stderr
    failed = [line for line in lines if line.startswith("FAILED ")]
    assert len(failed) == 1
    _, code, in_flight = failed[0].split()
    assert code == "STORE_FULL"
    finished = {line.split()[1]: line.split()[2] for line in lines if line.startswith("DONE ")}
    assert set(finished.values()) <= {"completed"}, finished

    grow(small_disk)
    status, listed, _ = _cli("log", "--store", store, env=env)
    assert status == 0
    before = {run["run"]: run["status"] for run in listed["runs"]}
    # No run ended because of the full disk: the one in flight is still unfinished.
    assert before[in_flight] == "running"
    assert "failed" not in before.values(), before

    status, report, _ = _cli("recover", "--store", store, env=env)
    assert status == 0, report
    assert [row["run"] for row in report["runs"]] == [in_flight]
    status, listed, _ = _cli("log", "--store", store, env=env)
    after = {run["run"]: run["status"] for run in listed["runs"]}
    assert after[in_flight] in ("completed", "blocked"), after
    assert set(after.values()) <= {"completed", "blocked"}, after

    executions = Counter(ledger.read_text(encoding="utf-8").split())
    assert executions, "the irreversible tool never ran"
    assert max(executions.values()) == 1, [key for key, count in executions.items() if count > 1]
    for run, state in after.items():
        paid = {key for key in executions if key.startswith(f"{run}:")}
        if state == "completed":
            assert paid == {f"{run}:{number}" for number in range(steps)}, run
    status, verified, _ = _cli("verify", "--store", store, env=env)
    assert status == 0 and verified["ok"], verified
