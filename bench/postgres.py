"""Many writers on one PostgreSQL server: tracelock against DBOS and LangGraph, side by side.

``python -m bench.postgres [--quick] [--runs N] [--processes 1 4 16] [--json]``, from the
bench environment (it needs ``dbos``, ``langgraph`` and ``langgraph-checkpoint-postgres``;
see docs/performance.md). It starts a throwaway PostgreSQL cluster (``initdb`` in a temporary
directory, the server on a Unix socket there, ``fsync`` and ``synchronous_commit`` on, as
the ``postgres`` system user when run as root) and removes it at the end.

The workload is ``bench.workload``'s 3-effect agent: an LLM call (the deterministic
stand-in), a read-only tool (``search_orders``) and an irreversible tool (``send_update``),
each system with its default settings in its production set-up on PostgreSQL:

- tracelock: ``Runtime("postgresql://...")`` (durability ``auto``: the irreversible effect's
  intent is durable before it runs, the run's end before ``run()`` returns);
- DBOS: ``DBOS(config={"system_database_url": "postgresql://..."})``, one workflow with one
  ``@DBOS.step`` per effect;
- LangGraph: a three-node graph compiled with ``PostgresSaver``, invoked with
  ``durability="sync"`` (each step's checkpoint committed before the next step).

For each process count P (1, 4, 16), every system gets a fresh database and P worker
processes, all started at once and warmed up. Then, in each of 10 rounds, the systems take
turns (the order rotating from round to round, so that the machine's changing load falls
on all alike): a system's P workers each run their share of the round's runs one after
the other while the others' workers wait. Reported per system and process count: p50 and
p99 of one run's latency (all workers' samples pooled) and runs per second (the runs
divided by the time from a round's start to its last worker's end, summed over rounds),
both also per round (``by_round``), and tracelock's ratios to each peer.

After the cells, tracelock's replay on PostgreSQL: runs recorded into a fresh database, then
replayed in a shuffled order by a fresh runtime in the harness's process (one reads a run's
entries and its payloads in two queries, and the provenance its start names in a third):
p50 and p99 of one replay.

The server's commit floor is measured in the same run, before each process count: the p50
of one minimal synchronous commit (a one-row ``INSERT`` in autocommit, from one session, so
one WAL flush). Each system's *write transactions per run* are the transaction ids the
server assigned during that system's turns (``pg_current_snapshot()``'s ``xmax`` read
before and after each turn, by the harness, whose reads take no id), divided by the turn's
runs (savepoints take ids too, so for a system that uses them this counts a little high).
*Commits waited per run* are the commits a run waited for the WAL flush of: for the peers,
whose sessions commit with ``synchronous_commit`` on, their write transactions; for
tracelock, the store's own count (``PostgresStore.flush_waits``: its append transactions
commit without waiting, and a durable append then waits for the flush in a transaction of
its own, so it has more write transactions than waited commits; a tracelock without that
count waited for every append transaction, ``transactions``). *p50 ÷ (waited × floor)* is
the p50 over what those commits would cost alone, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import workload
from bench.stats import percentile, summary_us

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "postgres.json"
SYSTEMS = ("tracelock", "dbos", "langgraph")
PROCESS_COUNTS = (1, 4, 16)
WARMUP = 10
CHILD_TIMEOUT_S = 900.0
FLOOR_PROBES = 500


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the throwaway server ---------------------------------------------------------------------
class Server:
    """A PostgreSQL cluster in a temporary directory, reachable on its Unix socket only."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.base = Path(tempfile.mkdtemp(prefix="tlbench-pg-"))
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.base, account.pw_uid, account.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = self.base / "data"
        self.socket = self.base / "sock"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, *args], capture_output=True, text=True, check=False)

    def start(self) -> None:
        self._run("mkdir", str(self.socket))
        init = self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "bench", "-E", "UTF8",
            "--locale=C", "--auth-local=trust", "--auth-host=reject",
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
        options = " ".join(
            [
                "-c listen_addresses=''",
                f"-c unix_socket_directories={self.socket}",
                "-c fsync=on",
                "-c synchronous_commit=on",
                "-c full_page_writes=on",
                "-c max_connections=300",
                "-c shared_buffers=128MB",
            ]
        )
        log_file = self.base / "server.log"
        self._run("touch", str(log_file))
        started = self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(log_file), "-w", "-t", "60", "start"
        )
        if started.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}")

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql://bench@/{database}?host={self.socket}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def next_xid(self) -> int:
        """The next transaction id the server will assign (reading it assigns none)."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
        assert row is not None
        return int(row[0])

    def commit_floor(self, probes: int = FLOOR_PROBES) -> dict[str, float]:
        """p50/p99 of one minimal synchronous commit (one WAL flush) on this server."""
        import psycopg

        url = self.create_database(f"floor_{time.monotonic_ns()}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE probe (id bigserial PRIMARY KEY, n int)")
            samples = []
            for n in range(probes):
                before = time.perf_counter()
                conn.execute("INSERT INTO probe (n) VALUES (%s)", (n,))
                samples.append(time.perf_counter() - before)
        return summary_us(samples)

    def version(self) -> str:
        out = self._run(str(self.bindir / "postgres"), "--version")
        return out.stdout.strip()


def _bindir() -> Path:
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    raise RuntimeError("PostgreSQL's initdb and pg_ctl were not found: install Debian's postgresql package")


@contextmanager
def server() -> Iterator[Server]:
    handle = Server()
    try:
        handle.start()
        yield handle
    finally:
        handle.stop()


# -- the systems, each in a worker process ----------------------------------------------------
#: What a worker's system opens: one run, the close, and the count of commits it waited
#: for so far (None: every write transaction waits, counted by the server).
Opened = tuple[Callable[[int], Any], Callable[[], None], Callable[[], int] | None]


def _tracelock(url: str, worker: int, setup: bool) -> Opened:
    from tracelock.runtime.runtime import Runtime

    runtime = Runtime(url, workload.POLICY, toolkits=(workload.kit,))
    store: Any = runtime.store

    def run(number: int) -> Any:
        result = runtime.run(workload.agent, workload.task(number))
        if not result.ok:
            raise RuntimeError(f"tracelock run failed: {result.code} {result.error}")
        return result.output

    def waited() -> int:
        # A tracelock without the count waited for the flush of every append transaction;
        # a directory store (bench.table's processes reuse this opener) counts neither.
        count = getattr(store, "flush_waits", None)
        return int(getattr(store, "transactions", 0) if count is None else count)

    return run, runtime.close, waited


def _dbos(url: str, worker: int, setup: bool) -> Opened:
    os.environ["DBOS__VMID"] = f"bench-worker-{worker}"  # one executor id per process
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    agent_workflow = workload.dbos_workflow()

    config: DBOSConfig = {"name": "bench-postgres", "system_database_url": url, "log_level": "ERROR"}
    DBOS(config=config)
    DBOS.launch()

    def run(number: int) -> Any:
        with SetWorkflowID(f"w{worker}-{number}"):
            return agent_workflow(workload.task(number))

    return run, DBOS.destroy, None


def _langgraph(url: str, worker: int, setup: bool) -> Opened:
    from typing import TypedDict

    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg.rows import dict_row

    class State(TypedDict, total=False):
        ask: str
        customer: str
        plan: dict[str, Any]
        orders: list[dict[str, Any]]
        update: dict[str, Any]

    def plan_node(state: State) -> State:
        return {"plan": workload.llm_stand_in({"model": "stand-in", "prompt": state["ask"], "max_tokens": 64})}

    def search_node(state: State) -> State:
        return {"orders": workload.search_orders(state["ask"])}

    def update_node(state: State) -> State:
        return {"update": workload.send_update(state["customer"], state["plan"]["content"])}

    # What PostgresSaver.from_conn_string opens, kept open for the worker's life.
    conn = psycopg.Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)
    if setup:
        saver.setup()
    graph = StateGraph(State)
    graph.add_node("plan", plan_node)
    graph.add_node("search", search_node)
    graph.add_node("update", update_node)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "search")
    graph.add_edge("search", "update")
    graph.add_edge("update", END)
    compiled: Any = graph.compile(checkpointer=saver)

    def run(number: int) -> Any:
        config = {"configurable": {"thread_id": f"w{worker}-{number}"}}
        state = compiled.invoke(workload.task(number), config, durability="sync")
        return {"plan": state["plan"]["content"], "orders": state["orders"], "update": state["update"]}

    return run, conn.close, None


OPENERS: dict[str, Callable[[str, int, bool], Opened]] = {
    "tracelock": _tracelock,
    "dbos": _dbos,
    "langgraph": _langgraph,
}


def child(system: str, url: str, worker: int, rounds: int, each: int, warmup: int) -> None:
    """One worker: open the system, warm up, print READY; then, for each round, wait for a
    ``go`` line on stdin, time ``each`` sequential runs and print them (with the commits
    they waited for, when the system counts them) as one JSON line. ``warmup`` < 0 is the
    setup pass: create the schema once, before any worker starts."""
    run, close, waited = OPENERS[system](url, worker, warmup < 0)
    if warmup < 0:
        close()
        print("READY", flush=True)
        return
    base = 1_000_000 * (worker + 1)
    number = 0
    for number in range(warmup):
        run(base + number)
    print("READY", flush=True)
    clock = time.perf_counter
    for _ in range(rounds):
        if sys.stdin.readline().strip() != "go":
            break
        samples = []
        waited_before = waited() if waited is not None else 0
        started = time.monotonic()
        for _ in range(each):
            number += 1
            before = clock()
            run(base + number)
            samples.append(clock() - before)
        ended = time.monotonic()
        line: dict[str, Any] = {"samples": samples, "started": started, "ended": ended}
        if waited is not None:
            line["waited"] = waited() - waited_before
        print(json.dumps(line), flush=True)
    close()


# -- the measurement --------------------------------------------------------------------------
def spawn_worker(args: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    # stderr to a file: a pipe nobody reads while the worker runs could fill and stall it.
    errors = tempfile.TemporaryFile("w+")  # noqa: SIM115  (closed with the process, at exit)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.postgres", "--child", *args],
        cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
    )
    _errors[process.pid] = errors
    return process


_errors: dict[int, Any] = {}


def worker_line(process: subprocess.Popen[str], what: str) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        process.communicate(timeout=CHILD_TIMEOUT_S)
        errors = _errors[process.pid]
        errors.seek(0)
        raise RuntimeError(f"{what} failed: {errors.read().strip()[-2000:]}")
    return line.strip()


def turn(workers: list[subprocess.Popen[str]], what: str) -> list[dict[str, Any]]:
    """One turn of a group of workers: each runs its share of the round at once; their
    answers (``samples``, ``started``, ``ended``)."""
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    return [json.loads(worker_line(worker, what)) for worker in workers]


def measure(pg: Server, processes: int, runs: int, rounds: int, tag: str) -> dict[str, Any]:
    """Every system's P workers started at once (each on its own fresh database), then
    ``rounds`` rounds in which each system's workers run in turn (the order rotating), so
    that the machine's changing load falls on every system alike."""
    each = max(1, runs // (processes * rounds))
    workers: dict[str, list[subprocess.Popen[str]]] = {}
    failed: dict[str, str] = {}
    for system in SYSTEMS:
        url = pg.create_database(f"{system}_{tag}")
        try:
            setup = spawn_worker([system, url, "0", "0", "0", "-1"])
            if worker_line(setup, f"{system} setup") != "READY":
                raise RuntimeError(f"{system} setup said something else")
            setup.communicate(timeout=CHILD_TIMEOUT_S)
            workers[system] = [
                spawn_worker([system, url, str(worker), str(rounds), str(each), str(WARMUP)]) for worker in range(processes)
            ]
        except Exception as exc:  # a peer that fails is reported, not fatal
            failed[system] = f"{type(exc).__name__}: {exc}"
    for system, started in list(workers.items()):
        try:
            for worker in started:
                if worker_line(worker, f"{system} worker") != "READY":
                    raise RuntimeError(f"{system} worker said something else")
        except Exception as exc:
            failed[system] = f"{type(exc).__name__}: {exc}"
            for worker in workers.pop(system):
                worker.kill()
    samples: dict[str, list[float]] = {system: [] for system in workers}
    wall: dict[str, float] = dict.fromkeys(workers, 0.0)
    xids: dict[str, int] = dict.fromkeys(workers, 0)
    waits: dict[str, int] = dict.fromkeys(workers, 0)
    by_round: dict[str, list[dict[str, float]]] = {system: [] for system in workers}
    try:
        for round_number in range(rounds):
            active = [system for system in SYSTEMS if system in workers and system not in failed]
            shift = round_number % max(1, len(active))
            for system in active[shift:] + active[:shift]:
                try:
                    first_xid = pg.next_xid()
                    results = turn(workers[system], f"{system} worker")
                    xids[system] += pg.next_xid() - first_xid
                    waits[system] += sum(int(result.get("waited", 0)) for result in results)
                except Exception as exc:
                    failed[system] = f"{type(exc).__name__}: {exc}"
                    log(f"postgres: {system} failed: {failed[system]}")
                    continue
                own = [sample for result in results for sample in result["samples"]]
                seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
                samples[system] += own
                wall[system] += seconds
                by_round[system].append({"p50_us": round(percentile(own, 0.5) * 1e6, 1), "runs_per_s": round(len(own) / seconds, 1)})
    finally:
        for started in workers.values():
            for worker in started:
                if worker.poll() is None:
                    worker.kill()
                worker.communicate()
    cell: dict[str, Any] = {}
    for system in SYSTEMS:
        if system in failed:
            cell[system] = {"failed": failed[system]}
            continue
        stats: dict[str, Any] = dict(summary_us(samples[system]))
        stats["runs"] = len(samples[system])
        stats["runs_per_s"] = round(len(samples[system]) / wall[system], 1)
        stats["writes_per_run"] = round(xids[system] / len(samples[system]), 2)
        counted = system == "tracelock"  # the peers' write transactions each wait
        stats["waited_per_run"] = round((waits[system] if counted else xids[system]) / len(samples[system]), 2)
        stats["by_round"] = by_round[system]
        cell[system] = stats
    return cell


def run(
    quick: bool, *, runs: int | None = None, rounds: int = 10, process_counts: tuple[int, ...] = PROCESS_COUNTS
) -> dict[str, Any]:
    """The figures as a JSON-ready dict (and a readable table on stdout)."""
    runs = runs or (320 if quick else 1600)
    figures: dict[str, Any] = {"runs_per_cell": runs, "rounds": rounds, "warmup_per_worker": WARMUP, "cells": {}}
    with server() as pg:
        figures["server"] = pg.version()
        figures["machine"] = {"cores": os.cpu_count()}
        for processes in process_counts:
            log(f"postgres: {processes} process(es) per system, {runs} runs each, {rounds} rounds")
            floor = pg.commit_floor()
            cell = measure(pg, processes, runs, rounds, f"p{processes}")
            cell["commit_floor"] = floor
            for system in SYSTEMS:
                stats = cell.get(system, {})
                if "p50_us" in stats and stats.get("waited_per_run"):
                    stats["p50_over_floor"] = round(stats["p50_us"] / (stats["waited_per_run"] * floor["p50_us"]), 2)
            base = cell.get("tracelock", {})
            for peer in ("dbos", "langgraph"):
                other = cell.get(peer, {})
                if "p50_us" in base and "p50_us" in other:
                    cell[f"vs_{peer}"] = {
                        "p50_speedup": round(other["p50_us"] / base["p50_us"], 2),
                        "runs_per_s_ratio": round(base["runs_per_s"] / other["runs_per_s"], 2),
                    }
            figures["cells"][str(processes)] = cell
        figures["growth"] = growth(figures["cells"])
        figures["tracelock_replay"] = replay(pg, 300 if quick else 1000)
    print(render(figures), flush=True)
    return figures


def growth(cells: dict[str, Any]) -> dict[str, float]:
    """Each system's runs/s at the most processes over its runs/s at the fewest."""
    counts = sorted(cells, key=int)
    if len(counts) < 2:
        return {}
    low, high = cells[counts[0]], cells[counts[-1]]
    return {
        system: round(high[system]["runs_per_s"] / low[system]["runs_per_s"], 2)
        for system in SYSTEMS
        if "runs_per_s" in low.get(system, {}) and "runs_per_s" in high.get(system, {})
    }


def replay(pg: Server, runs: int) -> dict[str, Any]:
    """Replay of recorded runs by a fresh tracelock runtime (shuffled order): wall time each."""
    from tracelock.runtime.runtime import Runtime

    url = pg.create_database("tracelock_replay")
    log(f"postgres: tracelock replay of {runs} recorded runs")
    with Runtime(url, workload.POLICY, toolkits=(workload.kit,)) as runtime:
        run_ids = [runtime.run(workload.agent, workload.task(number)).run_id for number in range(runs)]
    random.Random(runs).shuffle(run_ids)
    samples = []
    with Runtime(url, workload.POLICY, toolkits=(workload.kit,)) as runtime:
        assert runtime.replay(run_ids[0], workload.agent).matched  # the first after opening: not counted
        for run_id in run_ids[1:]:
            started = time.perf_counter()
            matched = runtime.replay(run_id, workload.agent).matched
            samples.append(time.perf_counter() - started)
            if not matched:
                raise RuntimeError(f"tracelock replay of {run_id} did not match")
    return {"runs": len(samples), **summary_us(samples)}


def render(figures: dict[str, Any]) -> str:
    lines = [
        "| processes | system | p50 per run | p99 per run | runs/s | write transactions per run "
        "| commits waited per run | p50 ÷ (waited × floor) | tracelock's p50 speed-up | tracelock's runs/s ratio |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for processes, cell in figures["cells"].items():
        for system in SYSTEMS:
            stats = cell.get(system, {})
            if "failed" in stats:
                lines.append(f"| {processes} | {system} | failed: {stats['failed'][:80]} | | | | | | | |")
                continue
            versus = cell.get(f"vs_{system}", {})
            lines.append(
                f"| {processes} | {system} | {stats['p50_us'] / 1000:.2f} ms | {stats['p99_us'] / 1000:.2f} ms "
                f"| {stats['runs_per_s']:.0f} | {stats.get('writes_per_run', '')} | {stats.get('waited_per_run', '')} "
                f"| {stats.get('p50_over_floor', '')} "
                f"| {versus.get('p50_speedup', '')} | {versus.get('runs_per_s_ratio', '')} |"
            )
    floors = ", ".join(
        f"{processes} process(es): p50 {cell['commit_floor']['p50_us']:.0f} µs" for processes, cell in figures["cells"].items()
        if "commit_floor" in cell
    )
    lines.append("")
    lines.append(f"Commit floor (one minimal synchronous commit, measured before each process count): {floors}.")
    if figures.get("growth"):
        counts = sorted(figures["cells"], key=int)
        grown = ", ".join(f"{system} {ratio}x" for system, ratio in figures["growth"].items())
        lines.append(f"runs/s growth from {counts[0]} to {counts[-1]} process(es): {grown}.")
    replayed = figures.get("tracelock_replay")
    if replayed:
        lines.append(
            f"tracelock replay of a recorded run (fresh runtime, shuffled order, {replayed['runs']} runs): "
            f"p50 {replayed['p50_us'] / 1000:.2f} ms, p99 {replayed['p99_us'] / 1000:.2f} ms."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["--child"]:
        system, url, worker, rounds, each, warmup = args_list[1:7]
        child(system, url, int(worker), int(rounds), int(each), int(warmup))
        sys.stdout.flush()
        os._exit(0)  # some systems leave non-daemon threads behind
    parser = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="320 runs per system and process count instead of 1,600")
    parser.add_argument("--runs", type=int, help="runs per system and process count (split among the processes)")
    parser.add_argument("--processes", type=int, nargs="+", default=list(PROCESS_COUNTS), help="process counts")
    parser.add_argument("--rounds", type=int, default=10, help="rounds the systems take turns in")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(REPO)}")
    args = parser.parse_args(args_list)
    figures = run(args.quick, runs=args.runs, rounds=args.rounds, process_counts=tuple(args.processes))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
