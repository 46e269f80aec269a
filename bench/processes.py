"""Runs per second of N processes sharing one directory store: ``python -m bench.processes``.

Each process opens ``Runtime(store, workload.POLICY, toolkits=(workload.kit,))`` on the same
store directory (the README's workload, default settings), makes a few warm-up runs, waits
for the start signal, then runs the workload back to back for a fixed time. Reported per
process count (``--counts``, default 1, 2, 4, 8), as ranges over ``--passes`` passes:

- runs per second, all processes together, and that over the one-process figure;
- syncs per run: the ``fdatasync``/``fsync`` calls the processes really made
  (``bench/peers/synccount``, preloaded), divided by the runs;
- the sync floor (one small overwrite + ``fdatasync``, ``bench.syncs.probe``), probed in
  the same run before each pass;
- CPU per run (every process's CPU time over the runs).

``--journal-only``: each run's six entries appended straight to the store with the
runtime's durability points, no runtime (the journal's share of a run, where syncs weigh
most).

``--code LABEL=PATH`` (repeatable) runs the processes with ``PYTHONPATH=PATH``: another
checkout of tracelock, to compare two versions round by round on the same machine (each
pass runs every label at every count in turn). By default, the code this file belongs to.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WARMUP_RUNS = 30


def _journal_run(store: Any, run: str, number: int) -> None:
    """The journal's part of one README run, appended straight to the store: the entries
    and durability points the runtime makes (three written at once, the irreversible
    intent durable, its result written, the end durable), no runtime around them."""
    store.append(run, "run.start", payload={"task": f"where is order {number}?"}, meta={"status": "running"}, new_run=True, durable=False)
    store.append(run, "effect", payload={"llm": f"search for the order, then send an update: {number}"}, durable=False)
    store.append(run, "effect", payload={"orders": [{"order": f"A-{number}", "status": "shipped"}]}, durable=False)
    store.append(run, "effect.intent", payload={"send_update": number})
    store.append(run, "effect.result", payload={"message": f"msg-c-{number}"}, durable=False)
    store.append(run, "run.end", payload={"output": number}, meta={"status": "completed"})


def child(store: str, seconds: float, journal_only: bool) -> None:
    """One process: warm up, say READY, wait for GO on stdin, run for ``seconds``, print
    ``RESULT {json}``. Imports the tracelock found on ``PYTHONPATH``."""
    from bench import workload
    from tracelock.runtime.runtime import Runtime
    from tracelock.storage.directory import DirectoryStore

    pid = os.getpid()
    if journal_only:
        with DirectoryStore(store) as handle:
            _timed(lambda number: _journal_run(handle, f"p{pid}-{number}", number), seconds)
        return
    with Runtime(store, workload.POLICY, toolkits=(workload.kit,)) as runtime:
        _timed(lambda number: runtime.run(workload.agent, workload.task(pid * 1_000_000 + number)), seconds)


def _timed(one_run: Callable[[int], object], seconds: float) -> None:
    """Warm up, say READY, wait for GO, then run for ``seconds`` and print the RESULT."""
    for number in range(WARMUP_RUNS):
        one_run(number)
    print("READY", flush=True)
    sys.stdin.readline()
    syncs_before = preloaded_count()
    cpu_before = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds
    runs = 0
    number = WARMUP_RUNS
    while time.perf_counter() < deadline:
        one_run(number)
        number += 1
        runs += 1
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    syncs_after = preloaded_count()
    syncs = None if syncs_before is None or syncs_after is None else syncs_after - syncs_before
    print("RESULT " + json.dumps({"runs": runs, "elapsed": elapsed, "cpu": cpu, "syncs": syncs}), flush=True)


def preloaded_count() -> int | None:
    """Syncs this process made so far, when the sync counter is preloaded (found on
    ``LD_PRELOAD`` by name: the checkout under test may keep it elsewhere), else None."""
    for path in os.environ.get("LD_PRELOAD", "").split(os.pathsep):
        if path.endswith("synccount.so"):
            library = ctypes.CDLL(path)
            library.tl_sync_count.restype = ctypes.c_long
            return int(library.tl_sync_count())
    return None


def one_level(code: Path, processes: int, seconds: float, root: Path, preload: Path | None, journal_only: bool) -> dict[str, Any]:
    """``processes`` children of ``code`` on one fresh store under ``root``."""
    store = root / f"store-{processes}"
    env = dict(os.environ, PYTHONPATH=str(code))
    if preload is not None:
        env["LD_PRELOAD"] = os.pathsep.join(filter(None, [str(preload), env.get("LD_PRELOAD", "")]))
    # The store exists before the children race to open it.
    subprocess.run(
        [sys.executable, "-c", "import sys; from tracelock.storage.directory import DirectoryStore; DirectoryStore(sys.argv[1]).close()", str(store)],
        env=env, check=True,
    )
    children = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(store), str(seconds), "journal" if journal_only else "runtime"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
        )
        for _ in range(processes)
    ]
    try:
        for process in children:
            assert process.stdout is not None
            line = process.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(f"a child failed to start: {line!r}")
        for process in children:
            assert process.stdin is not None
            process.stdin.write("GO\n")
            process.stdin.flush()
        results = []
        for process in children:
            out, _ = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"a child failed (exit {process.returncode})")
            results.append(json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]))
    finally:
        for process in children:
            if process.poll() is None:
                process.kill()
                process.wait()
    shutil.rmtree(store, ignore_errors=True)
    runs = sum(result["runs"] for result in results)
    elapsed = max(result["elapsed"] for result in results)
    counted = [result["syncs"] for result in results]
    syncs = None if None in counted else sum(counted) / runs
    return {
        "runs_per_s": runs / elapsed,
        "syncs_per_run": syncs,
        "cpu_us_per_run": 1e6 * sum(result["cpu"] for result in results) / runs,
    }


def _span(values: list[float], digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:.{digits}f}-{high:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1,2,4,8", help="process counts, comma separated")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per level")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--code", action="append", default=[], metavar="LABEL=PATH", help="tracelock checkout to run (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--journal-only", action="store_true", help="append each run's entries straight to the store, no runtime")
    parser.add_argument("--child", nargs=3, metavar=("STORE", "SECONDS", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], float(args.child[1]), args.child[2] == "journal")
        return 0
    from bench.stats import percentile
    from bench.syncs import counter_library, probe

    counts = [int(part) for part in args.counts.split(",")]
    codes = [tuple(spec.split("=", 1)) for spec in args.code] or [("this", str(REPO))]
    preload, why = counter_library()
    if preload is None:
        print(f"(syncs not counted: {why})", file=sys.stderr)
    figures: dict[str, dict[int, list[dict[str, Any]]]] = {label: {count: [] for count in counts} for label, _ in codes}
    floors: list[float] = []
    root = Path(tempfile.mkdtemp(prefix="tracelock-processes-", dir=REPO / "build" if (REPO / "build").is_dir() else None))
    try:
        for number in range(args.passes):
            floors.append(percentile(probe(root, 300), 0.5))
            for count in counts:
                for label, path in codes:
                    figures[label][count].append(one_level(Path(path), count, args.seconds, root / f"{label}-{number}", preload, args.journal_only))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "sync_floor_us_p50": [1e6 * floor for floor in floors],
        "levels": {
            label: {
                str(count): {
                    "runs_per_s": [level["runs_per_s"] for level in levels],
                    "syncs_per_run": [level["syncs_per_run"] for level in levels],
                    "cpu_us_per_run": [level["cpu_us_per_run"] for level in levels],
                }
                for count, levels in by_count.items()
            }
            for label, by_count in figures.items()
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"sync floor p50: {_span(report['sync_floor_us_p50'])} µs; {args.seconds:g} s per level, {args.passes} passes")
    print(f"{'code':<10} {'processes':>9} {'runs/s':>13} {'x one':>11} {'syncs/run':>11} {'CPU µs/run':>13}")
    for label, by_count in report["levels"].items():
        one = by_count.get("1", {}).get("runs_per_s")
        for count, level in by_count.items():
            rates = level["runs_per_s"]
            ratio = _span([rate / base for rate, base in zip(rates, one, strict=True)], 2) if one else "-"
            syncs = level["syncs_per_run"]
            shown = _span(syncs, 2) if None not in syncs else "-"
            print(f"{label:<10} {count:>9} {_span(rates):>13} {ratio:>11} {shown:>11} {_span(level['cpu_us_per_run']):>13}")
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        # Run as a script by the parent: the checkout under test comes first on the path.
        sys.path[0:1] = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    sys.exit(main())
