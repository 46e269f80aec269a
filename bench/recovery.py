"""Recovery of many unfinished runs (crash leftovers): time, and that it grows linearly.
``python -m bench.recovery``."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import workload
from tracelock.core.fingerprint import value_hash
from tracelock.runtime.records import RunJournal
from tracelock.runtime.runtime import Runtime


def _leave_unfinished(runtime: Runtime, count: int) -> None:
    """What a crash leaves: each run started and got its LLM answer, then the process died."""
    for number in range(count):
        run_id = f"crashed-{number}"
        task = workload.task(number)
        journal = RunJournal(runtime.store, run_id)
        journal.start(
            {
                "agent": "bench.workload:agent",
                "entry": "bench.workload:agent",
                "input": task,
                "policy": runtime.policy.hash,
                "seed": value_hash({"agent": "bench.workload:agent", "input": value_hash(task)}),
                "parent": None,
            },
            agent="bench.workload:agent",
            parent=None,
        )
        args = {"model": "stand-in", "max_tokens": 64, "prompt": task["ask"]}
        journal.effect(
            {"step": 0, "kind": "llm", "name": "llm", "class": "read_only", "args": args,
             "timeout_ms": None, "attempts": 1, "outcome": "SUCCESS", "code": None,
             "phase": None, "result": workload.PLAN, "error": None}
        )
    runtime.store.sync()


def run(quick: bool) -> dict[str, Any]:
    sizes = [200, 1000] if quick else [1000, 5000, 10000]
    figures: dict[str, Any] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
            runtime = Runtime(Path(tmp) / "store", workload.POLICY, toolkits=(workload.kit,))
            _leave_unfinished(runtime, size)
            started = time.perf_counter()
            report = runtime.recover()
            elapsed = time.perf_counter() - started
            runtime.close()
        completed = sum(1 for row in report.runs if row["to"] == "completed")
        assert completed == size, report.to_dict()["counts"]
        figures[str(size)] = {"seconds": round(elapsed, 3), "us_per_run": round(elapsed / size * 1e6, 1)}
        print(f"recover {size:>6} unfinished runs: {elapsed:7.2f} s  ({figures[str(size)]['us_per_run']} us per run)")
    return figures


if __name__ == "__main__":
    run(quick=False)
