"""Journal figures: durable appends per second (1 writer; 8 concurrent writers sharing
fsyncs, as threads and as tasks of one event loop), and verification throughput with its
peak memory: ``python -m bench.journal``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tracelock.storage.directory import DirectoryStore

_VERIFY_CHILD = """
import json, resource, sys, time
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_store
store = DirectoryStore(sys.argv[1], read_only=True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
report = verify_store(store)
elapsed = time.perf_counter() - started
assert report.ok, report.issue
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"entries": report.entries, "seconds": elapsed, "rss_before_kb": before, "rss_peak_kb": peak}))
"""


def _durable_appends(directory: Path, writers: int, per_writer: int) -> dict[str, Any]:
    store = DirectoryStore(directory / f"appends-{writers}")
    barrier = threading.Barrier(writers + 1)

    def work(number: int) -> None:
        barrier.wait()
        for step in range(per_writer):
            store.append(f"w{number}-{step // 10}", "effect", payload={"writer": number, "step": step})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    syncs_before = store.sync_count
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    total = writers * per_writer
    syncs = store.sync_count - syncs_before
    store.close()
    return {
        "writers": writers,
        "appends": total,
        "appends_per_s": round(total / elapsed),
        "fsyncs": syncs,
        "appends_per_fsync": round(total / max(syncs, 1), 1),
    }


def _durable_appends_async(directory: Path, writers: int, per_writer: int) -> dict[str, Any]:
    """The same appends from ``writers`` coroutines on one event loop (``append_async``)."""
    store = DirectoryStore(directory / f"appends-async-{writers}")

    async def work(number: int) -> None:
        for step in range(per_writer):
            await store.append_async(f"w{number}-{step // 10}", "effect", payload={"writer": number, "step": step})

    async def main() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(work(number) for number in range(writers)))
        return time.perf_counter() - started

    syncs_before = store.sync_count
    elapsed = asyncio.run(main())
    total = writers * per_writer
    syncs = store.sync_count - syncs_before
    store.close()
    return {
        "writers": writers,
        "appends": total,
        "appends_per_s": round(total / elapsed),
        "fsyncs": syncs,
        "appends_per_fsync": round(total / max(syncs, 1), 1),
    }


def _build_journal(path: Path, entries: int) -> None:
    """Runs of five entries; the LLM-like payload repeats, inputs and outputs do not."""
    store = DirectoryStore(path)
    shared = {"content": "a long, repeated model answer " * 20}
    runs = entries // 5
    for number in range(runs):
        run = f"r{number}"
        store.append(run, "run.start", payload={"input": number}, meta={"status": "running"}, durable=False)
        store.append(run, "effect", payload=shared, durable=False)
        store.append(run, "effect", payload={"step": 2, "result": number % 97}, durable=False)
        store.append(run, "effect", payload={"step": 3, "result": "ok"}, durable=False)
        store.append(run, "run.end", payload={"output": number}, meta={"status": "completed"}, durable=False)
    store.close()


def _verify(path: Path) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, "-c", _VERIFY_CHILD, str(path)], check=True, capture_output=True, text=True
    ).stdout
    measured: dict[str, Any] = json.loads(output)
    measured["entries_per_s"] = round(measured["entries"] / measured["seconds"])
    measured["peak_growth_mb"] = round((measured["rss_peak_kb"] - measured["rss_before_kb"]) / 1024, 1)
    return measured


def run(quick: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        directory = Path(tmp)
        figures["one_writer"] = _durable_appends(directory, 1, 300 if quick else 2000)
        figures["eight_writers"] = _durable_appends(directory, 8, 300 if quick else 2500)
        figures["eight_tasks"] = _durable_appends_async(directory, 8, 300 if quick else 2500)
        sizes = [20_000, 100_000] if quick else [100_000, 1_000_000]
        figures["verify"] = {}
        for size in sizes:
            journal = directory / f"verify-{size}"
            _build_journal(journal, size)
            figures["verify"][str(size)] = _verify(journal)
    for key, what in (("one_writer", "writer"), ("eight_writers", "threads"), ("eight_tasks", "async tasks")):
        f = figures[key]
        print(
            f"durable appends, {f['writers']} {what}: {f['appends_per_s']:>7}/s  "
            f"({f['appends_per_fsync']} appends per fsync)"
        )
    for size, f in figures["verify"].items():
        print(
            f"verify {int(size):>9} entries: {f['entries_per_s']:>8} entries/s  "
            f"peak RSS {f['rss_peak_kb'] // 1024} MB (growth {f['peak_growth_mb']} MB)"
        )
    return figures


if __name__ == "__main__":
    run(quick=False)
