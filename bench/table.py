"""Every measure of the speed-and-scaling table in one run, side by side, each figure a range
over passes: ``python -m bench.table [--quick] [--passes N] [--json] [--only SECTION ...]``,
from the bench environment (``.venv-bench``: DBOS, LangGraph and psycopg; ``make bench`` runs
it). Prints ONE table, *measure | figure | target | met/missed*, and returns (``--json``:
prints) the figures it rests on.

Sections, in the order they run (each reuses the benchmark that already measures it):

- ``bound``: ``bench.bound`` (the runtime, the bound and the sync floor interleaved round by
  round): the 3-effect run's p50 and the bound's, each over twice the floor probed in the
  same pass;
- ``cpu``: CPU per run of the runtime and the bound in a child process whose ``os.fdatasync``
  and ``os.fsync`` are no-ops (``bench.table_measures.cpu_child``);
- ``syscalls``: system calls per run of the runtime and the bound (``strace -c -f``, else
  ``/proc/self/io``'s read and write counts: the table says which);
- ``peers``: tracelock, DBOS on SQLite and LangGraph + SqliteSaver, each in a process of its
  own, interleaved (``bench.peers.harness``): p50 ratios per pass;
- ``store``: one directory store grown to 1k, 10k (and, in a full pass, 100k) runs: replay
  p50 on the recording handle and on a freshly opened one, the journal files' apparent and
  allocated bytes per run, the index's;
- ``threads``: runs/s at 1, 8, 64 threads on one runtime in one process;
- ``processes``: runs/s at 1, 2, 4, 8 processes on one directory store;
- ``postgres``: a throwaway PostgreSQL server (``bench.postgres``): the commit floor, commits
  per run on the quiet server, then tracelock, DBOS and LangGraph at 1, 4, 16 processes;
- ``conversation``: a chat agent whose every LLM request repeats the whole history, store
  bytes per conversation of 10, 50, 100 turns.

A section that fails (a peer not installed, no PostgreSQL) leaves its rows *not measured*
and the others still run. A row is *met* only when every pass reaches its target, *missed*
when one does not, *n/a* when it could not be measured.

Time on a shared 2-core machine: ``--quick`` about 7 minutes (PostgreSQL's 3 x 21 worker
processes take half of it); a full pass (5-10x the runs, a store of 100k runs) about 50
minutes (measured: the 100k-run store alone takes 14; estimated: PostgreSQL ~12, the peers
~10, the processes ~5).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import table_measures as measures
from bench.table_measures import log, scratch

PASSES = 5
SECTIONS = ("bound", "cpu", "syscalls", "peers", "store", "threads", "processes", "postgres", "conversation")
THREADS = [1, 8, 64]
PROCESSES = [1, 2, 4, 8]
PG_PROCESSES = (1, 4, 16)
TURNS = [10, 50, 100]


def settings(quick: bool) -> dict[str, Any]:
    """Runs per section: a quick pass, or a full one."""
    if quick:
        return {
            "bound_runs": 500, "cpu_runs_per_pass": 300, "syscall_runs": 200, "peer_runs": 500,
            "store_checkpoints": [1_000, 10_000], "replay_sample": 300, "pool_runs_per_pass": 300,
            "pg_runs": 320, "pg_commit_runs": 200, "conversation_steps": 2_000,
        }
    return {
        "bound_runs": 5_000, "cpu_runs_per_pass": 2_000, "syscall_runs": 1_000, "peer_runs": 5_000,
        "store_checkpoints": [1_000, 10_000, 100_000], "replay_sample": 1_000, "pool_runs_per_pass": 2_000,
        "pg_runs": 1_600, "pg_commit_runs": 1_000, "conversation_steps": 10_000,
    }


# -- the sections -----------------------------------------------------------------------------
def section_bound(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    from bench import bound

    return bound.run(quick, runs=config["bound_runs"], passes=passes, show=False)


def section_cpu(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    return measures.run_child(["cpu", str(config["cpu_runs_per_pass"]), str(passes)])


def section_syscalls(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    return {form: measures.syscalls(form, 50, config["syscall_runs"]) for form in ("runtime", "bound")}


def section_peers(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    from bench.peers.harness import load_all, pass_p50s, time_systems

    runs = config["peer_runs"]
    systems, unavailable = load_all(["tracelock", "dbos", "langgraph"])
    with scratch("tracelock-table-peers-") as root:
        samples, _, failed = time_systems(systems, runs, max(10, runs // 100), 20, root)
    out: dict[str, Any] = {"runs": runs, "unavailable": unavailable, "failed": failed}
    for key, own in samples.items():
        if key in systems and key not in failed:
            out[key] = {"p50_us_by_pass": pass_p50s(own, runs, passes)}
    return out


def section_store(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    checkpoints = config["store_checkpoints"]
    return measures.growing_store(checkpoints, {checkpoints[0], checkpoints[-1]}, config["replay_sample"], passes)


def section_threads(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    return measures.threads(THREADS, config["pool_runs_per_pass"], passes)


def section_processes(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    return measures.processes(PROCESSES, config["pool_runs_per_pass"], passes)


def section_postgres(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    from bench import postgres

    out: dict[str, Any] = {"cells": {}}
    with postgres.server() as pg:
        out["server"] = pg.version()
        out["commit_floor"] = pg.commit_floor()
        out["commits"] = measures.postgres_commits(pg, config["pg_commit_runs"])
        for count in PG_PROCESSES:
            log(f"table: PostgreSQL, {count} process(es) per system")
            out["cells"][str(count)] = postgres.measure(pg, count, config["pg_runs"], passes, f"table{count}")
    return out


def section_conversation(quick: bool, passes: int, config: dict[str, Any]) -> dict[str, Any]:
    return measures.conversation(TURNS, config["conversation_steps"])


RUNNERS: dict[str, Callable[[bool, int, dict[str, Any]], dict[str, Any]]] = {
    "bound": section_bound,
    "cpu": section_cpu,
    "syscalls": section_syscalls,
    "peers": section_peers,
    "store": section_store,
    "threads": section_threads,
    "processes": section_processes,
    "postgres": section_postgres,
    "conversation": section_conversation,
}


# -- the rows -----------------------------------------------------------------------------------
class NotMeasured(Exception):
    """A row's figures are missing (its section failed or was not run)."""


def span(values: list[float], unit: str = "", digits: int = 2) -> str:
    """``low-high`` (or one value when they agree) with ``unit``."""
    if not values:
        raise NotMeasured("no passes")
    low, high = f"{min(values):,.{digits}f}", f"{max(values):,.{digits}f}"
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Pass-by-pass ratios."""
    return [mine / theirs for mine, theirs in zip(numerators, denominators, strict=False) if theirs]


def growth_exponent(small: float, large: float, scale: float) -> float:
    """The ``k`` of ``size ~ length ** k`` between two lengths ``scale`` apart."""
    return math.log(max(large, 1.0) / max(small, 1.0)) / math.log(scale)


def _need(figures: dict[str, Any], section: str) -> dict[str, Any]:
    found = figures.get(section)
    if not isinstance(found, dict) or "error" in found:
        raise NotMeasured(found["error"] if isinstance(found, dict) else "section not run")
    return found


def row_run_vs_floor(f: dict[str, Any]) -> tuple[str, bool | None]:
    bound = _need(f, "bound")
    values = bound["runtime"]["p50_vs_two_floors_by_pass"]
    floor = span(bound["sync_floor_p50_us_by_pass"], " µs", 0)
    runs = span(bound["runtime"]["p50_us_by_pass"], " µs", 0)
    return f"{span(values, 'x')} (p50 {runs}; sync floor {floor})", max(values) <= 1.5


def row_bound_vs_floor(f: dict[str, Any]) -> tuple[str, bool | None]:
    bound = _need(f, "bound")
    values = bound["bound"]["p50_vs_two_floors_by_pass"]
    batched = bound["bound_batched"]["p50_vs_two_floors_by_pass"]
    return f"{span(values, 'x')} (its batched form: {span(batched, 'x')})", None


def row_cpu(f: dict[str, Any]) -> tuple[str, bool | None]:
    cpu = _need(f, "cpu")["cpu_us_by_pass"]
    figure = f"{span(cpu['runtime'], ' µs', 0)} (bound: {span(cpu['bound'], ' µs', 0)}); os.fdatasync and os.fsync stubbed in a child process"
    return figure, max(cpu["runtime"]) <= 120


def row_syscalls(f: dict[str, Any]) -> tuple[str, bool | None]:
    counted = _need(f, "syscalls")
    own, bound = counted["runtime"], counted["bound"]
    calls = ", ".join(f"{name} {value:g}" for name, value in own["by_call"].items())
    figure = f"{own['per_run']:g} ({calls}; bound: {bound['per_run']:g}); counted: {own['how']}"
    return figure, own["per_run"] <= 8


def _peer_row(f: dict[str, Any], peer: str, target: float) -> tuple[str, bool | None]:
    peers = _need(f, "peers")
    for key in ("tracelock", peer):
        if key not in peers:
            raise NotMeasured(peers["unavailable"].get(key) or peers["failed"].get(key) or f"{key} not measured")
    values = ratios(peers[peer]["p50_us_by_pass"], peers["tracelock"]["p50_us_by_pass"])
    figure = f"{span(values, 'x', 1)} (tracelock p50 {span(peers['tracelock']['p50_us_by_pass'], ' µs', 0)})"
    return figure, min(values) >= target


def row_vs_dbos(f: dict[str, Any]) -> tuple[str, bool | None]:
    return _peer_row(f, "dbos", 25)


def row_vs_langgraph(f: dict[str, Any]) -> tuple[str, bool | None]:
    return _peer_row(f, "langgraph", 12)


def _replay_points(store: dict[str, Any]) -> list[str]:
    return [size for size, point in store.items() if "replay_fresh_us_by_pass" in point]


def row_replay(f: dict[str, Any]) -> tuple[str, bool | None]:
    store = _need(f, "store")
    parts, worst = [], 0.0
    for size in _replay_points(store):
        point = store[size]
        recording, fresh = point["replay_recording_us_by_pass"], point["replay_fresh_us_by_pass"]
        parts.append(f"{int(size):,} runs: {span(recording, ' µs', 0)} recording handle, {span(fresh, ' µs', 0)} fresh open")
        worst = max(worst, *recording, *fresh)
    return "; ".join(parts), worst < 100


def row_threads(f: dict[str, Any]) -> tuple[str, bool | None]:
    threads = _need(f, "threads")
    rates, busy = threads["runs_per_s_by_pass"], threads["cores_busy_by_pass"]
    figure = " → ".join(span(rates[str(count)], "", 0) for count in THREADS)
    figure += f" (CPU cores busy: {' → '.join(span(busy[str(count)], '', 2) for count in THREADS)})"
    medians = [statistics.median(rates[str(count)]) for count in THREADS]
    grows = all(later >= 0.95 * earlier for earlier, later in itertools.pairwise(medians)) and medians[1] > medians[0]
    return figure, grows


def row_processes(f: dict[str, Any]) -> tuple[str, bool | None]:
    rates = _need(f, "processes")["runs_per_s_by_pass"]
    figure = " → ".join(span(rates[str(count)], "", 0) for count in PROCESSES)
    growth = ratios(rates[str(PROCESSES[-1])], rates["1"])
    return f"{figure} runs/s at {' → '.join(map(str, PROCESSES))} (8 ÷ 1: {span(growth, 'x')})", min(growth) >= 1.5


def short(message: str) -> str:
    """A failure's last line (a worker's traceback ends with the exception)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else message


def _cell(f: dict[str, Any], count: int, system: str) -> dict[str, Any]:
    cell = _need(f, "postgres")["cells"].get(str(count), {}).get(system, {})
    if "by_round" not in cell:
        raise NotMeasured(f"{system}: {short(cell.get('failed', f'not measured at {count}'))}")
    by_round: dict[str, Any] = cell
    return by_round


def _by_round(f: dict[str, Any], count: int, system: str, figure: str) -> list[float]:
    return [point[figure] for point in _cell(f, count, system)["by_round"]]


def row_pg_p50(f: dict[str, Any]) -> tuple[str, bool | None]:
    own = _by_round(f, 1, "tracelock", "p50_us")
    values = ratios(_by_round(f, 1, "dbos", "p50_us"), own)
    floor = _need(f, "postgres")["commit_floor"]["p50_us"]
    return f"{span(values, 'x')} (tracelock p50 {span(own, ' µs', 0)}; commit floor {floor:.0f} µs)", min(values) >= 10


def row_pg_growth(f: dict[str, Any]) -> tuple[str, bool | None]:
    parts, own_growth = [], []
    for system in ("tracelock", "dbos", "langgraph"):
        try:
            rates = [_by_round(f, count, system, "runs_per_s") for count in PG_PROCESSES]
        except NotMeasured as missing:
            if system == "tracelock":
                raise
            parts.append(str(missing))
            continue
        growth = ratios(rates[-1], rates[0])
        if system == "tracelock":
            own_growth = growth
            parts.append(f"{' → '.join(span(values, '', 0) for values in rates)} runs/s, {span(growth, 'x', 1)}")
        else:
            parts.append(f"{system} {span(growth, 'x', 1)}")
    return "; ".join(parts), min(own_growth) >= 4


def row_pg_vs_peers(f: dict[str, Any]) -> tuple[str, bool | None]:
    """Met only when every ratio was measured and reached; missed when a measured one fell
    short; otherwise not judged."""
    parts, missed, unmeasured = [], False, []
    for count in PG_PROCESSES:
        own = _by_round(f, count, "tracelock", "runs_per_s")
        shown = []
        for peer in ("dbos", "langgraph"):
            try:
                values = ratios(own, _by_round(f, count, peer, "runs_per_s"))
            except NotMeasured as missing:
                unmeasured.append(str(missing))
                continue
            shown.append(f"{span(values, 'x', 1)} {peer}")
            missed = missed or min(values) < 3
        parts.append(f"{count}: {', '.join(shown) or '-'}")
    if unmeasured:
        parts.append(f"not measured: {unmeasured[0]}")
    return "; ".join(parts), False if missed else (None if unmeasured else True)


def row_pg_commits(f: dict[str, Any]) -> tuple[str, bool | None]:
    commits = _need(f, "postgres")["commits"]
    figure = (
        f"{commits['waited_per_run']:g} waited for their WAL flush (the store's count); "
        f"{commits['write_commits_per_run']:g} write commits (transaction ids assigned, the flush waits' own "
        f"included); {commits['all_commits_per_run']:g} commits in all (pg_stat_database.xact_commit, read-only ones too)"
    )
    return figure, commits["waited_per_run"] <= 2


def _size_points(store: dict[str, Any]) -> list[str]:
    return list(store)[-2:]


def row_journal(f: dict[str, Any]) -> tuple[str, bool | None]:
    store = _need(f, "store")
    parts, ok = [], True
    for size in _size_points(store):
        point, runs = store[size], int(size)
        sizes, payloads = point["sizes"], point["payload_bytes_per_run"]
        apparent, allocated = sizes["journal_apparent"] / runs, sizes["journal_allocated"] / runs
        parts.append(
            f"{runs:,} runs: {apparent:,.0f} B/run apparent, {allocated:,.0f} B/run allocated "
            f"(live journal*.log {sizes['live_apparent'] / 2**20:,.1f} MB apparent; unique payloads {payloads:,} B/run)"
        )
        ok = ok and apparent - payloads < 1024 and allocated - payloads < 1024
    return "; ".join(parts), ok


def row_index(f: dict[str, Any]) -> tuple[str, bool | None]:
    store = _need(f, "store")
    points = _size_points(store)
    per_run = {size: store[size]["sizes"]["index_allocated"] / int(size) for size in points}
    figure = ", ".join(f"{per_run[size]:,.0f} B/run at {int(size):,} runs" for size in points)
    return figure, per_run[points[-1]] < 709 / 2


def row_conversation(f: dict[str, Any]) -> tuple[str, bool | None]:
    chat = _need(f, "conversation")
    first, last = str(TURNS[0]), str(TURNS[-1])
    sizes = ", ".join(
        f"{turns}: {chat[str(turns)]['total_apparent'] / 1024:,.1f} KB apparent / {chat[str(turns)]['total_allocated'] / 1024:,.1f} KB allocated"
        for turns in TURNS
    )
    scale = TURNS[-1] / TURNS[0]
    exponents = [growth_exponent(chat[first][part], chat[last][part], scale) for part in ("total_apparent", "total_allocated")]
    figure = f"per conversation, by turns: {sizes}; growth exponent {exponents[0]:.2f} apparent, {exponents[1]:.2f} allocated (1 linear, 2 quadratic)"
    return figure, max(exponents) <= 1.2


#: (measure, target, the row's figure and verdict).
ROWS: list[tuple[str, str, Callable[[dict[str, Any]], tuple[str, bool | None]]]] = [
    ("3-effect run (default settings) p50 ÷ its two syncs", "≤ 1.5x", row_run_vs_floor),
    ("bench.bound ÷ its two syncs", "-", row_bound_vs_floor),
    ("CPU per run, syncs stubbed", "≤ 120 µs", row_cpu),
    ("system calls per run", "the 2 durable writes and little else (≤ 8)", row_syscalls),
    ("vs DBOS on SQLite, p50", "≥ 25x in every pass", row_vs_dbos),
    ("vs LangGraph + SqliteSaver (sync), p50", "≥ 12x in every pass", row_vs_langgraph),
    ("replay p50, small and large store", "< 100 µs at both", row_replay),
    ("runs/s, 1 → 8 → 64 threads in one process", "grows until the CPU is saturated", row_threads),
    ("runs/s, processes on one directory store", "8 processes ≥ 1.5x one", row_processes),
    ("PostgreSQL p50 vs DBOS on PostgreSQL, 1 process", "≥ 10x", row_pg_p50),
    ("PostgreSQL runs/s, 1 → 4 → 16 processes", "growth ≥ 4x", row_pg_growth),
    ("PostgreSQL runs/s vs DBOS, LangGraph at 1, 4, 16", "≥ 3x at every count", row_pg_vs_peers),
    ("PostgreSQL commits waited for per run", "2", row_pg_commits),
    ("journal files, bytes per run", "apparent and allocated < 1 KB/run beyond unique payloads", row_journal),
    ("index.sqlite bytes per run", "< 355 B/run (half of 709)", row_index),
    ("conversation of 10, 50, 100 turns (whole history per request)", "linear (exponent ≤ 1.2)", row_conversation),
]


def rows(figures: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for measure, target, compute in ROWS:
        try:
            figure, ok = compute(figures)
            verdict = "-" if target == "-" else "n/a" if ok is None else "met" if ok else "missed"
        except (NotMeasured, KeyError, ValueError) as missing:
            figure, verdict = f"not measured: {short(str(missing)) or type(missing).__name__}", "n/a"
        out.append({"measure": measure, "figure": figure, "target": target, "verdict": verdict})
    return out


def render(table: list[dict[str, str]], header: str) -> str:
    lines = [header, "", "| measure | figure (range over passes) | target | met? |", "|---|---|---|---|"]
    for row in table:
        cells = [row[key].replace("|", "\\|") for key in ("measure", "figure", "target", "verdict")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the run -------------------------------------------------------------------------------------
def run(quick: bool, *, passes: int = PASSES, only: list[str] | None = None, show: bool = True) -> dict[str, Any]:
    """Every section (or ``only`` those), then the table; returns the figures and the rows."""
    config = settings(quick)
    figures: dict[str, Any] = {"quick": quick, "passes": passes, "settings": config, "seconds": {}}
    started = time.perf_counter()
    for name in SECTIONS:
        if only and name not in only:
            continue
        log(f"table: {name} ({time.perf_counter() - started:.0f} s so far)")
        begun = time.perf_counter()
        try:
            figures[name] = RUNNERS[name](quick, passes, config)
        except Exception as exc:  # a section that fails leaves its rows unmeasured
            figures[name] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"table: {name} failed: {traceback.format_exc()}")
        figures["seconds"][name] = round(time.perf_counter() - begun, 1)
    figures["seconds"]["total"] = round(time.perf_counter() - started, 1)
    figures["rows"] = rows(figures)
    if show:
        mode = "quick pass" if quick else "full pass"
        header = (
            f"`python -m bench.table{' --quick' if quick else ''}` ({mode}, {passes} passes, "
            f"{figures['seconds']['total']:.0f} s): each figure is its range over the passes of this one run"
        )
        print(render(figures["rows"], header), flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (about 7 minutes)")
    parser.add_argument("--passes", type=int, default=PASSES, help="passes each range is taken over")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run these sections only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    parser.add_argument("--write", type=Path, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    figures = run(args.quick, passes=args.passes, only=args.only)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
