"""Queued runs through worker processes: tracelock's run queue against DBOS queues, on one
PostgreSQL server.

``python -m bench.queue [--quick] [--runs N] [--workers 1 4 16] [--systems tracelock dbos]
[--json] [--no-write]``. DBOS needs the bench environment (``dbos``; see
docs/performance.md); a system that cannot start is reported as failed, the other still runs.
It starts a throwaway PostgreSQL cluster (``bench.postgres.server``: ``fsync`` and
``synchronous_commit`` on) and removes it at the end.

The workload is ``bench.workload``'s 3-effect agent (an LLM stand-in, a read-only tool, an
irreversible tool). For each worker count W and each system, in a fresh database, W worker
processes are started and warmed up; then the driver (this process) submits the cell's runs
at once, one committed enqueue each, and waits until every run has ended:

- tracelock: ``Runtime.submit`` from the driver; each worker is ``tracelock worker``'s
  ``Worker`` with concurrency ``--concurrency`` (default 8), woken by ``NOTIFY``;
- DBOS: ``DBOSClient.enqueue`` from the driver; each worker launches DBOS with the queue
  registered with ``worker_concurrency`` = the same concurrency and
  ``polling_interval_sec=0.1`` (DBOS's default is 1 s; 0.1 s favours DBOS).

Two phases per cell. **Steady load**: runs submitted one every 25 ms (40 per second, below
every system's capacity); p50/p99 of one run's time from its submit to its end measure the
pick-up and the run, not a backlog. **Burst**: the cell's runs submitted at once; runs per
second are the runs divided by the time from the first submit to the last run's end (the
burst's own p50/p99 are reported too, but they mostly measure the backlog). A run's end
is as the system records it: the run's ``run.end`` timestamp, DBOS's ``updated_at``; both in
milliseconds of this machine's clock.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import workload
from bench.postgres import Server, server
from bench.stats import summary_us

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "queue.json"
SYSTEMS = ("tracelock", "dbos")
WORKER_COUNTS = (1, 4, 16)
QUEUE = "bench"
WARMUP = 8


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _now_ms() -> float:
    return time.time() * 1000


# -- the worker processes ---------------------------------------------------------------------
def _tracelock_worker(url: str, index: int, concurrency: int, stop: threading.Event) -> None:
    from tracelock.runtime.queue import Worker
    from tracelock.runtime.runtime import Runtime

    with Runtime(url, workload.POLICY, toolkits=(workload.kit,)) as runtime:
        worker = Worker(runtime, queues=[QUEUE], concurrency=concurrency, worker_id=f"bench-{index}")
        threading.Thread(target=lambda: (stop.wait(), worker.stop()), daemon=True).start()
        print("ready", flush=True)
        worker.run()


def _dbos_worker(url: str, index: int, concurrency: int, stop: threading.Event) -> None:
    os.environ["DBOS__VMID"] = f"bench-queue-{index}"
    from dbos import DBOS

    workload.dbos_workflow()
    DBOS(config={"name": "bench-queue", "system_database_url": url, "log_level": "ERROR"})
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.1)
    print("ready", flush=True)
    stop.wait()
    DBOS.destroy()


WORKERS = {"tracelock": _tracelock_worker, "dbos": _dbos_worker}


def child(system: str, url: str, index: int, concurrency: int) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    WORKERS[system](url, index, concurrency, stop)


# -- the driver -------------------------------------------------------------------------------
class _Driver:
    """Submits and watches one system's runs from this process."""

    def __init__(self, system: str, url: str) -> None:
        self.system = system
        self.url = url
        import psycopg

        self.watch = psycopg.connect(url, autocommit=True)
        if system == "tracelock":
            from tracelock.runtime.runtime import Runtime

            self.runtime: Any = Runtime(url, workload.POLICY, toolkits=(workload.kit,))
        else:
            from dbos import DBOSClient

            self.client: Any = DBOSClient(system_database_url=url)

    def submit(self, number: int) -> str:
        task = workload.task(number)
        if self.system == "tracelock":
            return str(self.runtime.submit(workload.agent, task, queue=QUEUE).run_id)
        handle = self.client.enqueue({"queue_name": QUEUE, "workflow_name": "agent_workflow"}, task)
        return str(handle.get_workflow_id())

    def ended(self, ids: list[str]) -> dict[str, int]:
        """End times (ms) of those of ``ids`` that have ended."""
        if self.system == "tracelock":
            rows = self.watch.execute(
                "SELECT run, updated_ts, status FROM tracelock_runs WHERE run = ANY(%s) "
                "AND status IN ('completed', 'failed', 'aborted')",
                (ids,),
            ).fetchall()
        else:
            rows = self.watch.execute(
                "SELECT workflow_uuid, updated_at, status FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s) "
                "AND status IN ('SUCCESS', 'ERROR')",
                (ids,),
            ).fetchall()
        failed = [row for row in rows if row[2] not in ("completed", "SUCCESS")]
        if failed:
            raise RuntimeError(f"{self.system}: run {failed[0][0]} ended {failed[0][2]}")
        return {str(run): int(ts) for run, ts, _ in rows}

    def wait(self, ids: list[str], timeout: float = 900) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        done: dict[str, int] = {}
        while len(done) < len(ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.system}: {len(ids) - len(done)} runs had not ended after {timeout:g} s")
            done.update(self.ended([run for run in ids if run not in done]))
            time.sleep(0.02)
        return done

    def close(self) -> None:
        self.watch.close()
        if self.system == "tracelock":
            self.runtime.close()
        else:
            self.client.destroy()


def _start(system: str, url: str, workers: int, concurrency: int) -> list[subprocess.Popen[str]]:
    started = []
    for index in range(workers):
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.queue", "--child", system, url, str(index), str(concurrency)],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
        )
    for process in started:
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != "ready":
            _stop(started)
            _, err = process.communicate(timeout=30)
            raise RuntimeError(f"{system} worker did not start: {err.strip()[-600:]}")
    return started


def _stop(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure(
    pg: Server, system: str, workers: int, runs: int, concurrency: int, steady: int = 200, rate: float = 40.0
) -> dict[str, Any]:
    url = pg.create_database(f"q_{system}_{workers}")
    if system == "dbos":
        # The system tables exist before the workers start (as `dbos migrate` would make them).
        from dbos import DBOSClient

        DBOSClient(system_database_url=url).destroy()
    processes = _start(system, url, workers, concurrency)
    driver = _Driver(system, url)
    try:
        driver.wait([driver.submit(10_000_000 + number) for number in range(WARMUP * workers)])
        # Steady load: one submit every 1/rate s, below every system's capacity; the time
        # from submit to end is then the pick-up and the run, not a backlog.
        paced: dict[str, float] = {}
        start = time.monotonic()
        for number in range(steady):
            delay = start + number / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            at = _now_ms()
            paced[driver.submit(20_000_000 + number)] = at
        paced_end = driver.wait(list(paced))
        # A burst: every run submitted at once; runs per second from the first submit to
        # the last end.
        submitted: dict[str, float] = {}
        began = time.monotonic()
        for number in range(runs):
            at = _now_ms()
            submitted[driver.submit(number)] = at
        submit_s = time.monotonic() - began
        ended = driver.wait(list(submitted))
    finally:
        driver.close()
        _stop(processes)
    first = min(submitted.values())
    last = max(ended.values())
    stats = summary_us([(paced_end[run] - at) / 1000 for run, at in paced.items()])
    burst = summary_us([(ended[run] - at) / 1000 for run, at in submitted.items()])
    stats["burst_p50_us"], stats["burst_p99_us"] = burst["p50_us"], burst["p99_us"]
    stats["runs_per_s"] = round(runs / max((last - first) / 1000, 1e-3), 1)
    stats["submits_per_s"] = round(runs / max(submit_s, 1e-3), 1)
    return stats


def run(
    quick: bool,
    *,
    runs: int | None = None,
    worker_counts: tuple[int, ...] = WORKER_COUNTS,
    systems: tuple[str, ...] = SYSTEMS,
    concurrency: int = 8,
) -> dict[str, Any]:
    """The figures as a JSON-ready dict (and a readable table on stdout)."""
    runs = runs or (300 if quick else 2000)
    figures: dict[str, Any] = {"runs_per_cell": runs, "concurrency_per_worker": concurrency, "cells": {}}
    with server() as pg:
        figures["server"] = pg.version()
        figures["machine"] = {"cores": os.cpu_count()}
        for workers in worker_counts:
            cell: dict[str, Any] = {}
            for system in systems:
                log(f"queue: {system}, {workers} worker(s), {runs} runs")
                try:
                    cell[system] = measure(pg, system, workers, runs, concurrency, steady=100 if quick else 300)
                except Exception as exc:  # a peer that cannot run is reported, not fatal
                    cell[system] = {"failed": f"{type(exc).__name__}: {exc}"}
            base, other = cell.get("tracelock", {}), cell.get("dbos", {})
            if "p50_us" in base and "p50_us" in other:
                cell["vs_dbos"] = {
                    "runs_per_s_ratio": round(base["runs_per_s"] / other["runs_per_s"], 2),
                    "p99_ratio": round(other["p99_us"] / base["p99_us"], 2),
                }
            figures["cells"][str(workers)] = cell
    print(render(figures), flush=True)
    return figures


def render(figures: dict[str, Any]) -> str:
    lines = [
        "| workers | system | runs/s (burst) | p50 submit to end (steady) | p99 submit to end (steady) | burst p50 / p99 | tracelock's runs/s ratio | DBOS p99 / tracelock p99 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for workers, cell in figures["cells"].items():
        for system in SYSTEMS:
            stats = cell.get(system)
            if stats is None:
                continue
            if "failed" in stats:
                lines.append(f"| {workers} | {system} | failed: {stats['failed'][:80]} | | | | | |")
                continue
            versus = cell.get("vs_dbos", {}) if system == "dbos" else {}
            lines.append(
                f"| {workers} | {system} | {stats['runs_per_s']:.0f} | {stats['p50_us'] / 1000:.1f} ms "
                f"| {stats['p99_us'] / 1000:.1f} ms | {stats['burst_p50_us'] / 1000:.0f} / {stats['burst_p99_us'] / 1000:.0f} ms "
                f"| {versus.get('runs_per_s_ratio', '')} | {versus.get('p99_ratio', '')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["--child"]:
        system, url, index, concurrency = args_list[1:5]
        child(system, url, int(index), int(concurrency))
        sys.stdout.flush()
        os._exit(0)  # some systems leave non-daemon threads behind
    parser = argparse.ArgumentParser(prog="python -m bench.queue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 runs per cell instead of 2,000")
    parser.add_argument("--runs", type=int, help="runs per system and worker count")
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKER_COUNTS), help="worker process counts")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS, help="systems to measure")
    parser.add_argument("--concurrency", type=int, default=8, help="runs in flight per worker process")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(REPO)}")
    args = parser.parse_args(args_list)
    figures = run(
        args.quick, runs=args.runs, worker_counts=tuple(args.workers), systems=tuple(args.systems), concurrency=args.concurrency
    )
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
