"""One system at one concurrency, in a process of its own:
``python -m bench.concurrency_child SYSTEM CONCURRENCY RUNS WARMUP ROOT``.

Opens the system on a fresh store in ``ROOT``, makes ``WARMUP`` runs (at most 8 at a time,
numbered past the timed ones), then ``RUNS`` timed runs with ``CONCURRENCY`` of them in flight:
that many workers (coroutines on one event loop, or threads for a threaded system) each
taking the next run number and running it, back to back, until none is left. Measured over
the timed runs only:

- wall time (runs per second), each run's latency, the process's CPU time
  (``time.process_time``: every thread of it), and what the heartbeats (below) cost of it:
  their count times one heartbeat's CPU time on an idle loop, measured just before;
- syncs (``fsync``/``fdatasync``/... calls, when ``bench/peers/synccount`` is preloaded);
- the peak RSS above the peak the warm-up reached (``ru_maxrss``), which the report divides
  by the concurrency (it also holds what the completed runs left behind: caches, the
  allocator's free lists);
- then, after the timed runs, one more wave of exactly ``CONCURRENCY`` runs, all started at
  once, under ``tracemalloc``: the peak of the Python heap over that wave above its level
  before it, which the report divides by the concurrency: memory per in-flight run (the
  Python heap only: not a thread's stack, nor what a C library allocates itself);
- the event loop's lag: a heartbeat coroutine on the same loop sleeps 1 ms over and over and
  records how late it wakes. A threaded system has no loop of its own: its heartbeat runs on a
  loop in a side thread (what an asyncio part of the same process would see).

Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import sys
import threading
import time
import traceback
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from bench import workload
from bench.concurrency_systems import SYSTEMS, WAITING, AsyncSystem, ThreadedSystem
from bench.syncs import preloaded_count

HEARTBEAT_S = 0.001
WARMUP_CONCURRENCY = 8
CALIBRATION_S = 0.3


class Heartbeat:
    """How late a 1 ms sleep on a loop wakes, over and over, until stopped."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._stop = False

    async def beat(self) -> None:
        clock = time.perf_counter
        while not self._stop:
            before = clock()
            await asyncio.sleep(HEARTBEAT_S)
            self.lags.append(clock() - before - HEARTBEAT_S)

    def stop(self) -> None:
        self._stop = True


async def heartbeat_cpu_s() -> float:
    """The CPU seconds one heartbeat costs on an idle loop: the timed runs' CPU time is
    corrected by what their heartbeats cost, so runs per CPU-second count the runs' own work."""
    heartbeat = Heartbeat()
    beating = asyncio.create_task(heartbeat.beat())
    cpu = time.process_time()
    await asyncio.sleep(CALIBRATION_S)
    cpu = time.process_time() - cpu
    heartbeat.stop()
    await beating
    return cpu / max(1, len(heartbeat.lags))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Meter:
    """What the timed runs cost the process: wall and CPU time, syncs, peak RSS growth."""

    def __enter__(self) -> Self:
        self.rss = peak_rss_bytes()
        self.syncs = preloaded_count()
        self.cpu = time.process_time()
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        after = preloaded_count()
        self.synced = None if self.syncs is None or after is None else after - self.syncs
        self.rss_growth = max(0, peak_rss_bytes() - self.rss)


class Traced:
    """The Python heap (``tracemalloc``) over a block: its peak above its size before, and
    what it held (above that size) when most runs waited on their LLM call at once, with how
    many did (``bench.concurrency_systems.WAITING``)."""

    def __enter__(self) -> Self:
        WAITING.reset()
        tracemalloc.start()
        self.before = tracemalloc.get_traced_memory()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = tracemalloc.get_traced_memory()[1] - self.before
        tracemalloc.stop()
        self.waiting = WAITING.most
        self.held = max(0, WAITING.heap - self.before) if WAITING.most else 0


def _check(number: int, output: Any) -> None:
    expected = workload.plain_python(workload.task(number))
    if output != expected:
        raise AssertionError(f"run {number} returned {output!r}, not {expected!r}")


# -- async systems ------------------------------------------------------------------------------
async def _async_workers(system: AsyncSystem, numbers: Iterator[int], concurrency: int, latencies: list[float]) -> None:
    clock = time.perf_counter

    async def worker() -> None:
        for number in numbers:
            started = clock()
            output = await system.run(number)
            latencies.append(clock() - started)
            if number % 97 == 0:
                _check(number, output)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _measure_async(system: AsyncSystem, root: Path, concurrency: int, runs: int, warmup: int) -> dict[str, Any]:
    await system.open(root)
    try:
        await _async_workers(system, iter(range(runs, runs + warmup)), min(concurrency, WARMUP_CONCURRENCY), [])
        beat_cpu = await heartbeat_cpu_s()
        latencies: list[float] = []
        heartbeat = Heartbeat()
        beating = asyncio.create_task(heartbeat.beat())
        await asyncio.sleep(0.01)
        with Meter() as meter:
            await _async_workers(system, iter(range(runs)), concurrency, latencies)
        heartbeat.stop()
        await beating
        gc.collect()
        with Traced() as traced:
            await _async_workers(system, iter(range(runs + warmup, runs + warmup + concurrency)), concurrency, [])
    finally:
        await system.close()
    return _figures(meter, latencies, heartbeat.lags, beat_cpu, traced, loop="the runs' own loop")


# -- threaded systems ---------------------------------------------------------------------------
def thread_workers(system: ThreadedSystem, numbers: Iterator[int], concurrency: int, latencies: list[float]) -> None:
    lock = threading.Lock()
    failures: list[str] = []
    start = threading.Event()
    clock = time.perf_counter

    def next_number() -> int | None:
        with lock:
            return next(numbers, None)

    def worker() -> None:
        start.wait()
        try:
            while (number := next_number()) is not None:
                started = clock()
                output = system.run(number)
                latencies.append(clock() - started)
                if number % 97 == 0:
                    _check(number, output)
        except Exception as exc:  # reported after the join
            failures.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    start.set()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} worker(s) failed; the first: {failures[0]}")


def _measure_threaded(system: ThreadedSystem, root: Path, concurrency: int, runs: int, warmup: int) -> dict[str, Any]:
    system.open(root)
    try:
        thread_workers(system, iter(range(runs, runs + warmup)), min(concurrency, WARMUP_CONCURRENCY), [])
        beat_cpu = asyncio.run(heartbeat_cpu_s())
        latencies: list[float] = []
        heartbeat = Heartbeat()
        side = threading.Thread(target=asyncio.run, args=(heartbeat.beat(),), daemon=True)
        side.start()
        time.sleep(0.01)
        with Meter() as meter:
            thread_workers(system, iter(range(runs)), concurrency, latencies)
        heartbeat.stop()
        side.join()
        gc.collect()
        with Traced() as traced:
            thread_workers(system, iter(range(runs + warmup, runs + warmup + concurrency)), concurrency, [])
    finally:
        system.close()
    return _figures(meter, latencies, heartbeat.lags, beat_cpu, traced, loop="a loop in a side thread")


def _figures(
    meter: Meter, latencies: list[float], lags: list[float], beat_cpu_s: float, traced: Traced, loop: str
) -> dict[str, Any]:
    ordered = sorted(lags)
    return {
        "runs": len(latencies),
        "wall_s": meter.wall,
        "cpu_s": meter.cpu,
        "heartbeat_cpu_s": beat_cpu_s * len(lags),
        "syncs": meter.synced,
        "rss_growth_bytes": meter.rss_growth,
        "traced_peak_bytes": traced.peak,
        "held_bytes": traced.held,
        "held_runs": traced.waiting,
        "latencies_s": latencies,
        "lag_max_s": ordered[-1] if ordered else None,
        "lag_p99_s": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None,
        "heartbeats": len(lags),
        "lag_loop": loop,
    }


def measure(key: str, concurrency: int, runs: int, warmup: int, root: Path) -> dict[str, Any]:
    system = SYSTEMS[key]()
    if isinstance(system, ThreadedSystem):
        return _measure_threaded(system, root, concurrency, runs, warmup)
    return asyncio.run(_measure_async(system, root, concurrency, runs, warmup))


def main(argv: list[str]) -> int:
    key, concurrency, runs, warmup, root = argv[:5]
    try:
        result = measure(key, int(concurrency), int(runs), int(warmup), Path(root))
    except Exception as exc:  # reported to the harness, which keeps going
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    print("RESULT " + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # some systems leave non-daemon threads behind


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

