"""Many runs in flight in one process: tracelock's ``arun`` against tracelock on threads, DBOS
async workflows and LangGraph's ``ainvoke``, at 1 to 1,024 concurrent runs.

``python -m bench.concurrency [--quick] [--levels 1 8 64 256 1024] [--systems ...]
[--no-write] [--json]``, from the bench environment (``.venv-bench``: DBOS and LangGraph).

The workload is the README's (``bench.workload``: one LLM call, the read-only
``search_orders``, the irreversible ``send_update``, unique inputs) with an LLM that takes
50 ms, written for each system the way its async users would (``bench.concurrency_systems``).
For each concurrency N, each system runs in a fresh process of its own
(``bench.concurrency_child``: a fresh store in a temporary directory, a few warm-up runs,
then the timed runs with N in flight), one system after the other, their order rotating from
one level to the next; the sync counter of ``bench/peers/synccount`` is preloaded into every
child, and the sync floor (``bench.syncs.probe``) is probed between the levels.

Per system and N: runs per second, p50/p99 run latency, syncs per run, the peak RSS growth
over the timed runs divided by N (memory per in-flight run), the event loop's largest lag,
and runs per CPU-second. The bounds: the latency bound N / 50 ms, and the CPU bound, the runs
per CPU-second of tracelock ``arun``'s process. Each target of :data:`TARGETS_TEXT` is
printed against its figure, PASS or MISS.

A quick pass (``--quick``, about 2 minutes) writes ``build/bench/concurrency.json`` and
``.md``; a full pass (about 10 minutes) writes ``bench/results/concurrency.json`` and
``.md`` and its section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.concurrency_systems import LLM_LATENCY_S, SYSTEMS
from bench.stats import percentile
from bench.syncs import BUILD, counter_library, probe

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "concurrency.json"
QUICK_RESULTS = BUILD / "concurrency.json"
LEVELS = (1, 8, 64, 256, 1024)
#: Timed runs per level: enough for several runs per worker where the slowest peer allows.
RUNS = {1: 100, 8: 400, 64: 1024, 256: 4096, 1024: 8192}
QUICK_RUNS = {1: 20, 8: 80, 64: 256, 256: 512, 1024: 1024}
WARMUP = 32
QUICK_WARMUP = 16
CHILD_TIMEOUT_S = 900.0
#: The system the targets are about, and the peers it is compared with.
SUBJECT = "tracelock-arun"
PEERS = ("dbos", "langgraph")
SYNCS_FROM = 64
HEADING = "## Many runs in flight in one process (`python -m bench.concurrency`)"
TARGETS_TEXT = (
    "≥ 80% of min(latency bound, CPU bound) at 1,024; ≥ 5x DBOS and ≥ 5x LangGraph runs/s at "
    "every concurrency; ≤ 0.3 syncs per run from 64 up; < 20 KB per in-flight run; loop lag < 5 ms"
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- running the children -----------------------------------------------------------------------
def child_env(preload: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if preload is not None:
        env["LD_PRELOAD"] = os.pathsep.join(filter(None, [str(preload), env.get("LD_PRELOAD", "")]))
    return env


def run_child(key: str, level: int, runs: int, warmup: int, root: Path, preload: Path | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.concurrency_child", key, str(level), str(runs), str(warmup), str(root)]
    try:
        done = subprocess.run(command, cwd=REPO, env=child_env(preload), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {CHILD_TIMEOUT_S:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return {"error": f"the child exited ({done.returncode}) without a result: {tail}"}


def cell(raw: dict[str, Any], level: int) -> dict[str, Any]:
    """The figures of one system at one level, from its child's raw measurements."""
    if "error" in raw:
        return {"error": raw["error"].strip().splitlines()[0][:300]}
    latencies = raw["latencies_s"]
    runs = raw["runs"]
    syncs = raw["syncs"]
    # The runs' own CPU time: the process's, less what the heartbeats cost (see the child).
    cpu_s = max(1e-9, raw["cpu_s"] - raw["heartbeat_cpu_s"])
    return {
        "runs": runs,
        "runs_per_s": round(runs / raw["wall_s"], 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1e3, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 1),
        "mean_ms": round(statistics.fmean(latencies) * 1e3, 1),
        "syncs_per_run": None if syncs is None else round(syncs / runs, 3),
        "kb_per_in_flight_run": round(raw["traced_peak_bytes"] / level / 1024, 1),
        # The heap held while most runs of the wave waited on their LLM call, per waiting run.
        "kb_held_per_waiting_run": round(raw["held_bytes"] / raw["held_runs"] / 1024, 1) if raw.get("held_runs") else None,
        "held_runs": raw.get("held_runs"),
        "rss_kb_per_in_flight_run": round(raw["rss_growth_bytes"] / level / 1024, 1),
        "rss_growth_mb": round(raw["rss_growth_bytes"] / 2**20, 1),
        "lag_max_ms": None if raw["lag_max_s"] is None else round(raw["lag_max_s"] * 1e3, 2),
        "lag_p99_ms": None if raw["lag_p99_s"] is None else round(raw["lag_p99_s"] * 1e3, 2),
        "lag_loop": raw["lag_loop"],
        "cpu_us_per_run": round(cpu_s / runs * 1e6),
        "heartbeat_cpu_share": round(raw["heartbeat_cpu_s"] / raw["cpu_s"], 3) if raw["cpu_s"] else None,
        "runs_per_cpu_s": round(runs / cpu_s, 1),
        "latency_bound": round(level / LLM_LATENCY_S, 1),
    }


def versions(keys: list[str]) -> dict[str, str]:
    result = {}
    for key in keys:
        parts = []
        for name in SYSTEMS[key].distributions:
            try:
                parts.append(f"{name} {importlib.metadata.version(name)}")
            except importlib.metadata.PackageNotFoundError:
                parts.append(f"{name} (not installed)")
        result[key] = ", ".join(parts)
    return result


def measure(keys: list[str], levels: list[int], quick: bool) -> dict[str, Any]:
    preload, why = counter_library()
    if preload is None:
        log(f"concurrency: syncs will not be counted: {why}")
    runs_for = QUICK_RUNS if quick else RUNS
    warmup = QUICK_WARMUP if quick else WARMUP
    cells: dict[str, dict[str, Any]] = {key: {} for key in keys}
    floor: list[float] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tracelock-concurrency-", dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        scratch = Path(tmp)
        for index, level in enumerate(levels):
            runs = runs_for.get(level, max(4 * level, 100))
            shift = index % len(keys)
            for key in keys[shift:] + keys[:shift]:
                root = Path(tempfile.mkdtemp(prefix=f"{key}-{level}-", dir=scratch))
                raw = run_child(key, level, runs, warmup, root, preload)
                cells[key][str(level)] = cell(raw, level)
                shown = cells[key][str(level)]
                if "error" in shown:
                    log(f"concurrency: {key} at {level}: failed: {shown['error']}")
                else:
                    log(
                        f"concurrency: {key} at {level}: {shown['runs_per_s']} runs/s, p50 {shown['p50_ms']} ms, "
                        f"p99 {shown['p99_ms']} ms, {shown['syncs_per_run']} syncs/run, "
                        f"{shown['kb_per_in_flight_run']} KB/run, lag {shown['lag_max_ms']} ms "
                        f"({time.perf_counter() - started:.0f} s)"
                    )
            floor += probe(scratch, 20)
    return {
        "quick": quick,
        "levels": levels,
        "runs": {str(level): runs_for.get(level, max(4 * level, 100)) for level in levels},
        "warmup": warmup,
        "llm_latency_ms": LLM_LATENCY_S * 1e3,
        "sync_floor_p50_us": round(percentile(floor, 0.5) * 1e6, 1) if floor else None,
        "syncs_counted": preload is not None,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": f"{platform.system()} {platform.machine()}"},
        "versions": versions(keys),
        "titles": {key: SYSTEMS[key].title for key in keys},
        "how": {key: SYSTEMS[key].how for key in keys},
        "systems": cells,
        "seconds": round(time.perf_counter() - started, 1),
    }


# -- targets ------------------------------------------------------------------------------------
def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def targets(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target against its figure: ``{"target", "level", "figure", "verdict"}`` with the
    verdict PASS, MISS, or n/a when the figure could not be measured (a failed system)."""
    rows: list[dict[str, Any]] = []
    subject: dict[str, Any] = figures["systems"].get(SUBJECT, {})

    def add(target: str, level: int | None, figure: str, ok: bool | None) -> None:
        rows.append({"target": target, "level": level, "figure": figure, "verdict": _verdict(ok)})

    for level in figures["levels"]:
        own = subject.get(str(level), {"error": "not run"})
        measured = "error" not in own
        if level == max(figures["levels"]):
            if measured:
                bound = min(own["latency_bound"], own["runs_per_cpu_s"])
                share = own["runs_per_s"] / bound
                figure = (
                    f"{own['runs_per_s']:,.0f} runs/s = {share:.0%} of {bound:,.0f} (latency bound "
                    f"{own['latency_bound']:,.0f}, CPU bound {own['runs_per_cpu_s']:,.0f})"
                )
                add("≥ 80% of min(latency bound, CPU bound)", level, figure, share >= 0.8)
            else:
                add("≥ 80% of min(latency bound, CPU bound)", level, "not measured", None)
        for peer in PEERS:
            theirs = figures["systems"].get(peer, {}).get(str(level), {"error": "not run"})
            name = figures["titles"].get(peer, peer).split(" ")[0]
            if measured and "error" not in theirs and theirs["runs_per_s"]:
                ratio = own["runs_per_s"] / theirs["runs_per_s"]
                figure = f"{ratio:.1f}x ({own['runs_per_s']:,.0f} vs {theirs['runs_per_s']:,.0f} runs/s)"
                add(f"≥ 5x {name} runs/s", level, figure, ratio >= 5)
            else:
                add(f"≥ 5x {name} runs/s", level, "not measured", None)
        if level >= SYNCS_FROM:
            syncs = own.get("syncs_per_run") if measured else None
            add("≤ 0.3 syncs per run", level, "not measured" if syncs is None else f"{syncs:.3f}", None if syncs is None else syncs <= 0.3)
        memory = own.get("kb_held_per_waiting_run") if measured else None
        add(
            "< 20 KB per in-flight run",
            level,
            "not measured" if memory is None else f"{memory:.1f} KB held by each of {own['held_runs']:,} runs waiting at once (wave peak ÷ N: {own['kb_per_in_flight_run']:.1f} KB)",
            None if memory is None else memory < 20,
        )
        lag = own.get("lag_max_ms") if measured else None
        add("loop lag < 5 ms", level, "not measured" if lag is None else f"{lag:.2f} ms (max)", None if lag is None else lag < 5)
    return rows


# -- report -------------------------------------------------------------------------------------
def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(figures: dict[str, Any]) -> str:
    keys = list(figures["systems"])
    titles = figures["titles"]
    per_level = ", ".join(f"{level:,}: {figures['runs'][str(level)]:,}" for level in figures["levels"])
    lines = [
        f"`python -m bench.concurrency{' --quick' if figures['quick'] else ''}` (part of `make bench`), "
        f"{'a quick pass' if figures['quick'] else 'a full pass'}: "
        f"{per_level} timed runs "
        f"per concurrency and system (after {figures['warmup']} warm-up runs), an LLM latency of "
        f"{figures['llm_latency_ms']:.0f} ms, {figures['machine']['cpus']} CPUs, Python "
        f"{figures['machine']['python']}; sync floor (small overwrite + `fdatasync`) p50 "
        f"{_number(figures['sync_floor_p50_us'])} µs. Syncs "
        f"{'counted by the preloaded `synccount`' if figures['syncs_counted'] else 'not counted (no sync counter)'}.",
        "",
        "| N | system | runs/s | p50 | p99 | syncs/run | KB per in-flight run: held, wave peak (RSS) | loop lag max (p99) | CPU µs/run |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in figures["levels"]:
        for key in keys:
            row = figures["systems"][key].get(str(level), {"error": "not run"})
            if "error" in row:
                lines.append(f"| {level:,} | {titles[key]} | failed: {row['error'].replace('|', '/')} | | | | | | |")
                continue
            lag = "-" if row["lag_max_ms"] is None else f"{row['lag_max_ms']:.1f} ({row['lag_p99_ms']:.1f}) ms"
            if key == "tracelock-threads":
                lag += " (side thread)"
            syncs = "-" if row["syncs_per_run"] is None else f"{row['syncs_per_run']:.2f}"
            lines.append(
                f"| {level:,} | {titles[key]} | {row['runs_per_s']:,.0f} | {row['p50_ms']:.1f} ms | "
                f"{row['p99_ms']:.1f} ms | {syncs} | {_number(row.get('kb_held_per_waiting_run'), 1)}, {row['kb_per_in_flight_run']:.1f} ({row['rss_kb_per_in_flight_run']:,.0f}) | {lag} | {row['cpu_us_per_run']:,} |"
            )
    lines += [
        "",
        f"Latency bound: N / {figures['llm_latency_ms']:.0f} ms runs/s. CPU bound: runs per CPU-second of the process "
        "(`time.process_time`, every thread), less the heartbeats' CPU time (measured on an idle loop before the "
        "timed runs). KB per in-flight run, over one more wave of N runs started at once under `tracemalloc` "
        "(the Python heap: a thread's stack is not in it), above the heap's size before: *held*, the heap when "
        "most of the wave's runs waited on their LLM call at once, divided by how many did (what a run in "
        "flight holds; the target is judged on it); *wave peak*, the heap's peak over the wave divided by N "
        "(with what the runs starting and ending around them allocate meanwhile); in brackets, "
        "the peak RSS growth over the timed runs divided by N, which also holds what the completed runs left "
        "behind (caches, the allocator's free lists). Loop lag: how late a 1 ms sleep on the runs' loop wakes "
        "(for threads: on a loop in a side thread).",
    ]
    lines += ["", f"Targets ({TARGETS_TEXT}), for {titles.get(SUBJECT, SUBJECT)}:", ""]
    lines += ["| target | N | figure | |", "|---|---:|---|---|"]
    for row in targets(figures):
        verdict = {"PASS": "PASS", "MISS": "**MISS**"}.get(row["verdict"], row["verdict"])
        lines.append(f"| {row['target']} | {_number(row['level'])} | {row['figure']} | {verdict} |")
    lines += ["", "Systems:", ""]
    for key in keys:
        lines.append(f"- {titles[key]} ({figures['versions'][key]}): {figures['how'][key]}.")
    return "\n".join(lines) + "\n"


def write(figures: dict[str, Any], markdown: str) -> Path:
    results = QUICK_RESULTS if figures["quick"] else RESULTS
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    results.with_suffix(".md").write_text(markdown)
    if not figures["quick"]:
        from bench import report

        report.write_section("concurrency", markdown, HEADING)
    return results


def run(quick: bool, levels: list[int] | None = None, keys: list[str] | None = None, write_out: bool = True) -> dict[str, Any]:
    figures = measure(keys or list(SYSTEMS), levels or list(LEVELS), quick)
    markdown = render(figures)
    print(markdown, flush=True)
    if write_out:
        log(f"concurrency: figures in {write(figures, markdown)}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs per level (about 2 minutes)")
    parser.add_argument("--levels", type=int, nargs="+", help=f"concurrencies (default {' '.join(map(str, LEVELS))})")
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), help="these systems only")
    parser.add_argument("--no-write", action="store_true", help="print the report, write no file")
    parser.add_argument("--json", action="store_true", help="print all figures as JSON at the end")
    args = parser.parse_args(argv)
    keys = [key for key in SYSTEMS if args.systems is None or key in args.systems]
    figures = run(args.quick, args.levels, keys, write_out=not args.no_write)
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
