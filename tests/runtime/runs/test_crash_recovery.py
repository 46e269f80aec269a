"""Crash harness: real child processes killed with SIGKILL at random instants, then
recovery. An irreversible effect never runs twice; nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.runtime import _crash_child as child
from tracelock.runtime.records import load_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_run, verify_store

REPO = Path(__file__).resolve().parents[3]
STEP_OF = {"fetch": None, "reserve": 1, "charge": 2}


def _read_counts(counters: Path, tool: str) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    path = counters / f"{tool}.log"
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split(" ")
            found[(parts[0], parts[1])].append(parts[2] if len(parts) > 2 else "")
    return found


def _journaled_results(store_dir: Path) -> dict[str, set[int]]:
    """Per run, the steps whose result is in the journal (read before recovery)."""
    results: dict[str, set[int]] = {}
    with DirectoryStore(store_dir, read_only=True) as store:
        for info in store.runs():
            results[info.run] = set(load_run(store, info.run).effects)
    return results


def _trial(tmp: Path, rng: random.Random, trial: int) -> Counter[str]:
    store_dir = tmp / "store"
    counters = tmp / "counters"
    counters.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TRACELOCK_CRASH_COUNTERS=str(counters))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime._crash_child", str(store_dir), f"t{trial}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    output = b""
    ready_by = time.monotonic() + 60
    while b"READY" not in output and time.monotonic() < ready_by and proc.poll() is None:
        try:
            output += os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.005)
    assert b"READY" in output, proc.stderr.read().decode()
    deadline = time.monotonic() + rng.uniform(0.01, 0.4)
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            output += os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    os.set_blocking(fd, True)
    output += proc.stdout.read()
    assert b"Traceback" not in proc.stderr.read()
    done = {
        line.split()[1]
        for line in output.decode().splitlines()
        if line.startswith("DONE ") and line.endswith(" completed")
    }
    before = _journaled_results(store_dir)

    os.environ["TRACELOCK_CRASH_COUNTERS"] = str(counters)  # recovery runs the tools here
    runtime = child.make_runtime(str(store_dir))
    try:
        report = runtime.recover()
        outcomes: Counter[str] = Counter(row["to"] for row in report.runs)
        assert not report.errors, report.errors
        store = runtime.store
        assert verify_store(store).ok  # type: ignore[arg-type]
        statuses = {info.run: info.status for info in store.runs()}
        # Everything acknowledged before the kill is still complete and verifies.
        for run in done:
            assert statuses[run] == "completed", run
            assert verify_run(store, run).ok  # type: ignore[arg-type]
        charges = _read_counts(counters, "charge")
        fetches = _read_counts(counters, "fetch")
        reserves = _read_counts(counters, "reserve")
        for run, status in statuses.items():
            record = load_run(store, run)
            assert status in ("completed", "blocked"), (run, status)
            charged = len(charges.get((run, "2"), []))
            # An irreversible effect never runs twice.
            assert charged <= 1, (run, charged)
            if 2 in record.effects and "operator" not in record.effects[2]:
                assert charged == 1, (run, "journaled charge result without an execution")
            if status == "blocked":
                # Only an irreversible effect whose result was not journaled blocks a run.
                assert record.waiting_step == 2 and 2 in record.pending and 2 not in record.effects
            # Read-only / idempotent effects were re-run only when their result was missing.
            had = before.get(run, set())
            for step, counts in (("0", fetches), ("1", reserves), ("3", fetches)):
                ran = len(counts.get((run, step), []))
                if int(step) in had:
                    assert ran == 1, (run, step, ran)
                elif status == "completed":
                    assert 1 <= ran <= 2, (run, step, ran)
            keys = set(reserves.get((run, "1"), []))
            assert len(keys) <= 1, f"idempotent effect of {run} got different keys {keys}"
        return outcomes
    finally:
        runtime.close()


def _run_trials(tmp_path: Path, trials: int, seed: int) -> Counter[str]:
    rng = random.Random(seed)
    totals: Counter[str] = Counter()
    for trial in range(trials):
        totals += _trial(tmp_path / f"trial-{trial}", rng, trial)
    return totals


@pytest.fixture(autouse=True)
def _restore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACELOCK_CRASH_COUNTERS", "")


def test_kill_and_recover(tmp_path: Path) -> None:
    totals = _run_trials(tmp_path, trials=12, seed=3)
    assert sum(totals.values()) > 0, "no run was ever interrupted"


@pytest.mark.slow
def test_kill_and_recover_many(tmp_path: Path) -> None:
    totals = _run_trials(tmp_path, trials=250, seed=5)
    print(f"recovery outcomes over 250 kill trials: {dict(totals)}")
    assert totals["blocked"] > 0 and totals["completed"] > 0
