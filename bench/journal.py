"""Journal figures: durable appends per second (1 writer; 8 concurrent writers sharing
fsyncs, as threads and as tasks of one event loop), and verification throughput with its
peak memory: ``python -m bench.journal``.

The one-writer figure is measured side by side with the same appends through a handle that
holds the store's writer lock from open to close, the rule before the lock was taken per
commit (so that several processes can write): the cost of taking the lock, and checking
that no other process appended, on every commit."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
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


def _append_figures(writers: int, total: int, elapsed: float, syncs: int) -> dict[str, Any]:
    return {
        "writers": writers,
        "appends": total,
        "appends_per_s": round(total / elapsed),
        "fsyncs": syncs,
        "appends_per_fsync": round(total / max(syncs, 1), 1),
    }


def _durable_appends(directory: Path, writers: int, per_writer: int, *, lock_for_life: bool = False) -> dict[str, Any]:
    name = f"appends-{writers}" + ("-locked-for-life" if lock_for_life else "")
    store = DirectoryStore(directory / name, _hold_for_life=lock_for_life)
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
    syncs = store.sync_count - syncs_before
    store.close()  # timed too: the index rows still pending are work the appends caused
    elapsed = time.perf_counter() - started
    return _append_figures(writers, writers * per_writer, elapsed, syncs)


def _lock_rule_pairs(directory: Path, pairs: int, per_run: int, *, durable: bool) -> dict[str, Any]:
    """One writer's appends per second under the writer lock per commit and held for life,
    in alternating pairs of runs on fresh stores (a slow spell of the disk hits both alike);
    ``durable=False`` measures the CPU path alone, where the lock's cost shows most."""
    rates: dict[str, list[float]] = {"per_commit": [], "for_life": []}
    for number in range(pairs):
        for rule in ("per_commit", "for_life") if number % 2 == 0 else ("for_life", "per_commit"):
            store = DirectoryStore(directory / f"rule-{durable}-{rule}-{number}", _hold_for_life=rule == "for_life")
            started = time.perf_counter()
            for step in range(per_run):
                store.append(f"r{step // 10}", "effect", payload={"step": step}, durable=durable)
            store.close()
            rates[rule].append(per_run / (time.perf_counter() - started))
    per_commit = statistics.median(rates["per_commit"])
    for_life = statistics.median(rates["for_life"])
    # The median of the pairs' ratios: each pair ran back to back, so the machine's drift
    # (other work on it, the disk's slow spells) cancels out of it better than out of the
    # ratio of the two medians.
    ratios = [mine / theirs for mine, theirs in zip(rates["per_commit"], rates["for_life"], strict=True)]
    return {
        "durable": durable,
        "pairs": pairs,
        "per_commit_per_s": round(per_commit),
        "for_life_per_s": round(for_life),
        "ratio": round(statistics.median(ratios), 3),
    }


def _durable_appends_async(directory: Path, writers: int, per_writer: int) -> dict[str, Any]:
    """The same appends from ``writers`` coroutines on one event loop (``append_async``)."""
    store = DirectoryStore(directory / f"appends-async-{writers}")

    async def work(number: int) -> None:
        for step in range(per_writer):
            await store.append_async(f"w{number}-{step // 10}", "effect", payload={"writer": number, "step": step})

    async def main() -> None:
        await asyncio.gather(*(work(number) for number in range(writers)))

    syncs_before = store.sync_count
    started = time.perf_counter()
    asyncio.run(main())
    syncs = store.sync_count - syncs_before
    store.close()  # timed too, as with threads
    elapsed = time.perf_counter() - started
    return _append_figures(writers, writers * per_writer, elapsed, syncs)


def _build_journal(path: Path, entries: int) -> None:
    """Runs of five entries shaped as the runtime writes them (a start naming its agent, three
    numbered steps, an end), so that verification checks each run's steps as well; the
    LLM-like payload repeats, inputs and outputs do not."""
    store = DirectoryStore(path)
    shared = {"step": 0, "content": "a long, repeated model answer " * 20}
    runs = entries // 5
    for number in range(runs):
        run = f"r{number}"
        store.append(run, "run.start", payload={"input": number}, meta={"agent": "bench", "status": "running"}, durable=False)
        store.append(run, "effect", payload=shared, durable=False)
        store.append(run, "effect", payload={"step": 1, "result": number % 97}, durable=False)
        store.append(run, "effect", payload={"step": 2, "result": "ok"}, durable=False)
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


def _fsync_probe(directory: Path, count: int = 300) -> float:
    """Median µs of one small overwrite + fdatasync in a file whose blocks exist: the floor
    under every durable append on this disk, measured in the same pass (it varies)."""
    path = directory / "probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, bytes(1 << 20))
        os.fsync(fd)
        samples = []
        for number in range(count):
            started = time.perf_counter()
            os.pwrite(fd, b"x" * 300, number * 300)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return round(statistics.median(samples) * 1e6, 1)


def _cpu_probe() -> float:
    """Milliseconds for a fixed pure-Python loop: how fast this machine runs Python during
    the pass (it drifts by a third over a day here), to read the other figures against."""
    started = time.perf_counter()
    total = 0
    for number in range(1_000_000):
        total += number
    return round((time.perf_counter() - started) * 1000, 1)


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median throughput, with the range seen over all rounds."""
    ordered = sorted(rounds, key=lambda f: f["appends_per_s"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["range_per_s"] = [ordered[0]["appends_per_s"], ordered[-1]["appends_per_s"]]
    return chosen


def run(quick: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        directory = Path(tmp)
        measured: dict[str, list[dict[str, Any]]] = {
            "one_writer": [], "one_writer_lock_for_life": [], "eight_writers": [], "eight_tasks": []
        }
        probes = []
        cpu_probes = []
        for number in range(rounds):  # interleaved, so a slow spell of the disk hits all alike
            here = directory / f"round-{number}"
            here.mkdir()
            probes.append(_fsync_probe(here))
            cpu_probes.append(_cpu_probe())
            measured["one_writer"].append(_durable_appends(here, 1, 300 if quick else 2000))
            measured["one_writer_lock_for_life"].append(
                _durable_appends(here, 1, 300 if quick else 2000, lock_for_life=True)
            )
            measured["eight_writers"].append(_durable_appends(here, 8, 300 if quick else 2500))
            measured["eight_tasks"].append(_durable_appends_async(here, 8, 300 if quick else 2500))
        for key, results in measured.items():
            figures[key] = _median_round(results)
        # How the shared sync scales with more concurrent tasks (one round each).
        figures["more_tasks"] = [
            _durable_appends_async(directory / "round-0", tasks, (300 if quick else 20_000) // tasks)
            for tasks in (16, 32, 64)
        ]
        figures["writer_lock"] = [
            _lock_rule_pairs(directory, 6 if quick else 14, 300 if quick else 1000, durable=True),
            _lock_rule_pairs(directory, 6 if quick else 14, 2000 if quick else 20_000, durable=False),
        ]
        figures["fdatasync_us"] = sorted(probes)[len(probes) // 2]
        figures["python_loop_1m_ms"] = sorted(cpu_probes)[len(cpu_probes) // 2]
        sizes = [20_000, 100_000] if quick else [100_000, 1_000_000]
        figures["verify"] = {}
        for size in sizes:
            journal = directory / f"verify-{size}"
            _build_journal(journal, size)
            figures["verify"][str(size)] = _verify(journal)
    print(f"one fdatasync (overwrite, median): {figures['fdatasync_us']} us")
    print(f"machine speed: a 1M-step Python loop takes {figures['python_loop_1m_ms']} ms (median)")
    for key, what in (
        ("one_writer", "writer"),
        ("one_writer_lock_for_life", "writer, lock held for life (before)"),
        ("eight_writers", "threads"),
        ("eight_tasks", "async tasks"),
    ):
        f = figures[key]
        low, high = f["range_per_s"]
        print(
            f"durable appends, {f['writers']} {what}: {f['appends_per_s']:>7}/s  "
            f"({f['appends_per_fsync']} appends per fsync; {low}-{high}/s over {rounds} rounds)"
        )
    for f in figures["writer_lock"]:
        print(
            f"one writer, {'durable' if f['durable'] else 'non-durable'} appends: writer lock per commit "
            f"{f['per_commit_per_s']}/s, held for life {f['for_life_per_s']}/s: {f['ratio']:.3f}x "
            f"(median of {f['pairs']} alternating runs each)"
        )
    for f in figures["more_tasks"]:
        print(
            f"durable appends, {f['writers']} async tasks: {f['appends_per_s']:>7}/s  "
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
