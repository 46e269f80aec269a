"""The measures of ``python -m bench.table`` that no other benchmark takes: CPU per run with
the syncs stubbed, system calls per run, replay and file sizes in stores of growing size,
runs per second on threads of one process and on processes sharing one directory store,
PostgreSQL's commits per run, and a long conversation's store growth.

Everything goes through public APIs (``Runtime``, the store's ``entries`` and payloads) and the
file system's sizes, never through a store's internal layout: the journal is every file named
``journal*.log`` or ``*.seg`` under the store's folder, the index every ``index.sqlite*`` file.

The children (``python -m bench.table_measures cpu|syscalls ...``) print one ``RESULT {json}``
line.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import workload
from bench.stats import percentile

REPO = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 1800.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=prefix, dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        yield Path(tmp)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def parse_result(stdout: str, stderr: str, returncode: int) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    raise RuntimeError(f"the child exited ({returncode}) without a result: {tail}")


def run_child(args: list[str], prefix: list[str] | None = None) -> dict[str, Any]:
    command = [*(prefix or []), sys.executable, "-m", "bench.table_measures", *args]
    done = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    return parse_result(done.stdout, done.stderr, done.returncode)


# -- file sizes -----------------------------------------------------------------------------------
JOURNAL = re.compile(r"^journal.*\.log$|\.seg$")


def store_sizes(root: Path) -> dict[str, int]:
    """Apparent (``st_size``) and allocated (``st_blocks * 512``) bytes of the store's journal
    files (every ``journal*.log`` and ``*.seg``; ``live_*``: the ``journal*.log`` alone), its
    index files (``index.sqlite*``) and every file (``total_*``)."""
    sizes = dict.fromkeys(
        ("journal_apparent", "journal_allocated", "live_apparent", "live_allocated", "index_apparent", "index_allocated", "total_apparent", "total_allocated"),
        0,
    )
    for path in root.rglob("*"):
        try:
            status = path.lstat()
        except FileNotFoundError:  # a writer's temporary file, gone
            continue
        if not path.is_file() or path.is_symlink():
            continue
        apparent, allocated = status.st_size, status.st_blocks * 512
        parts = ["total"]
        if JOURNAL.search(path.name):
            parts.append("journal")
            if path.name.startswith("journal"):
                parts.append("live")
        if path.name.startswith("index.sqlite"):
            parts.append("index")
        for part in parts:
            sizes[f"{part}_apparent"] += apparent
            sizes[f"{part}_allocated"] += allocated
    return sizes


def payload_bytes(runtime: Any, run_ids: list[str]) -> int:
    """The bytes of the distinct payloads of ``run_ids`` (as the store returns them)."""
    store = runtime.store
    seen: set[str] = set()
    total = 0
    for run_id in run_ids:
        for entry in store.entries(run_id):
            if entry.payload and entry.payload not in seen:
                seen.add(entry.payload)
                total += len(store.get_payload_bytes(entry.payload))
    return total


# -- CPU per run, syncs stubbed (child) --------------------------------------------------------------
def cpu_child(runs_per_pass: int, passes: int) -> dict[str, Any]:
    """The runtime's and the bound's CPU time per run (``time.process_time``: every thread),
    per pass, with ``os.fdatasync`` and ``os.fsync`` replaced by no-ops in this process (the
    SQLite index's own syncs, if any, are not stubbed)."""
    os.fdatasync = lambda fd: None
    os.fsync = lambda fd: None
    from bench.bound import forms

    chosen = ("runtime", "bound")
    by_pass: dict[str, list[float]] = {form: [] for form in chosen}
    with scratch("tracelock-cpu-") as root, forms(root, runs_per_pass * passes + 200) as calls:
        for number in range(100):
            for form in chosen:
                calls[form](runs_per_pass * passes + 10 + number)
        for index in range(passes):
            order = chosen if index % 2 == 0 else chosen[::-1]
            for form in order:
                call = calls[form]
                started = time.process_time()
                for number in range(index * runs_per_pass, (index + 1) * runs_per_pass):
                    call(number)
                by_pass[form].append(round((time.process_time() - started) / runs_per_pass * 1e6, 1))
    return {"cpu_us_by_pass": by_pass, "runs_per_pass": runs_per_pass}


# -- system calls per run ------------------------------------------------------------------------------
def _proc_io() -> dict[str, int]:
    with open("/proc/self/io") as file:
        return {key: int(value) for key, value in (line.split(": ") for line in file if ": " in line)}


def syscalls_child(form: str, warmup: int, runs: int) -> dict[str, Any]:
    """``warmup`` runs of ``form`` (``runtime`` or ``bound``), then ``runs`` more; the read and
    write system calls of the second part from ``/proc/self/io`` (``syscr``, ``syscw``)."""
    from bench.bound import forms

    with scratch("tracelock-syscalls-") as root, forms(root, warmup + runs + 10) as calls:
        call = calls[form]
        for number in range(warmup):
            call(runs + number)
        before = _proc_io()
        for number in range(runs):
            call(number)
        after = _proc_io()
    return {"syscr": after["syscr"] - before["syscr"], "syscw": after["syscw"] - before["syscw"], "runs": runs}


def _strace_counts(path: Path) -> dict[str, int]:
    """``strace -c`` output: calls by system call."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) < 5 or not fields[3].isdigit() or fields[-1] == "total":
            continue
        counts[fields[-1]] = counts.get(fields[-1], 0) + int(fields[3])
    return counts


def syscalls(form: str, warmup: int, runs: int) -> dict[str, Any]:
    """System calls per run of ``form``: with ``strace`` (every call of every thread, counted
    by ``strace -c -f``) over a child making ``warmup + runs`` runs less one making
    ``warmup`` runs (start-up, imports and closing cancel out), else the read and write calls
    of ``/proc/self/io`` over the last ``runs`` runs alone."""
    strace = shutil.which("strace")
    if strace is None:
        counted = run_child(["syscalls", form, str(warmup), str(runs)])
        return {
            "how": "read and write system calls (/proc/self/io syscr + syscw; strace not installed)",
            "per_run": round((counted["syscr"] + counted["syscw"]) / runs, 1),
            "by_call": {"read-like": round(counted["syscr"] / runs, 1), "write-like": round(counted["syscw"] / runs, 1)},
        }
    totals = []
    with scratch("tracelock-strace-") as root:
        for label, count in (("base", 0), ("runs", runs)):
            output = root / f"{label}.txt"
            run_child(["syscalls", form, str(warmup), str(count)], prefix=[strace, "-f", "-c", "-o", str(output)])
            totals.append(_strace_counts(output))
    base, measured = totals
    by_call = {name: round((measured.get(name, 0) - base.get(name, 0)) / runs, 2) for name in set(base) | set(measured)}
    by_call = {name: value for name, value in sorted(by_call.items(), key=lambda item: -item[1]) if value >= 0.05}
    return {
        "how": "every system call of every thread (strace -c -f), a child of warm-up + N runs less one of warm-up only",
        "per_run": round(sum(by_call.values()), 1),
        "by_call": by_call,
    }


# -- replay and file sizes in stores of growing size ------------------------------------------------
def _replays(runtime: Any, run_ids: list[str], passes: int) -> list[float]:
    """Wall-time p50 (µs) of replaying ``run_ids`` (the first replay is not timed), per pass."""
    assert runtime.replay(run_ids[0], workload.agent).matched
    samples = []
    for run_id in run_ids[1:]:
        started = time.perf_counter()
        report = runtime.replay(run_id, workload.agent)
        samples.append(time.perf_counter() - started)
        if not report.matched:
            raise RuntimeError(f"the replay of {run_id} did not match")
    size = max(1, len(samples) // passes)
    return [round(percentile(samples[start : start + size], 0.5) * 1e6, 1) for start in range(0, size * passes, size)]


def growing_store(checkpoints: list[int], replay_at: set[int], sample: int, passes: int) -> dict[str, Any]:
    """One directory store filled with the workload's runs up to each checkpoint. At each:
    the replay p50 per pass, on the handle that recorded the runs (over runs it recorded
    since the last checkpoint) and on a freshly opened one (over runs spread over the whole
    store, shuffled), when the checkpoint is in ``replay_at``; and the store's file sizes
    after closing, with the distinct payload bytes per run over a sample of runs."""
    from tracelock.runtime.runtime import Runtime

    out: dict[str, Any] = {}
    rng = random.Random(41)
    with scratch("tracelock-growing-") as root:
        store = root / "store"
        runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
        run_ids: list[str] = []
        for checkpoint in checkpoints:
            started = time.perf_counter()
            since = len(run_ids)
            while len(run_ids) < checkpoint:
                result = runtime.run(workload.agent, workload.task(len(run_ids)))
                if not result.ok:
                    raise RuntimeError(f"run failed: {result.code} {result.error}")
                run_ids.append(result.run_id)
            figures: dict[str, Any] = {"record_s": round(time.perf_counter() - started, 1)}
            if checkpoint in replay_at:
                recent = run_ids[since:]
                figures["replay_recording_us_by_pass"] = _replays(runtime, rng.sample(recent, min(sample, len(recent))), passes)
            runtime.close()
            figures["sizes"] = store_sizes(store)
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            picked = rng.sample(run_ids, min(sample, len(run_ids)))
            figures["payload_bytes_per_run"] = round(payload_bytes(runtime, picked[:200]) / len(picked[:200]))
            if checkpoint in replay_at:
                figures["replay_fresh_us_by_pass"] = _replays(runtime, picked, passes)
            out[str(checkpoint)] = figures
            log(f"table: store of {checkpoint} runs measured ({time.perf_counter() - started:.0f} s)")
        runtime.close()
    return out


# -- runs per second on threads of one process -------------------------------------------------
def threads(counts: list[int], runs_per_pass: int, passes: int) -> dict[str, Any]:
    """Runs per second and CPU cores busy (process CPU time over wall time) with N threads
    calling ``Runtime.run`` on one runtime per N (each on a fresh store, in this process),
    the counts taking turns pass by pass (the order rotating)."""
    from bench.concurrency_child import thread_workers
    from bench.concurrency_systems import ThreadedSystem
    from tracelock.runtime.runtime import Runtime

    class Workload(ThreadedSystem):
        def open(self, root: Path) -> None:
            self.runtime = Runtime(root / "store", workload.POLICY, toolkits=(workload.kit,))

        def run(self, number: int) -> Any:
            result = self.runtime.run(workload.agent, workload.task(number))
            if not result.ok:
                raise RuntimeError(f"run failed: {result.code} {result.error}")
            return result.output

        def close(self) -> None:
            self.runtime.close()

    rates: dict[str, list[float]] = {str(count): [] for count in counts}
    busy: dict[str, list[float]] = {str(count): [] for count in counts}
    with scratch("tracelock-threads-") as root:
        systems = {}
        for count in counts:
            systems[count] = Workload()
            (root / str(count)).mkdir()
            systems[count].open(root / str(count))
            thread_workers(systems[count], iter(range(10**7, 10**7 + 50)), min(count, 8), [])
        try:
            for index in range(passes):
                shift = index % len(counts)
                for count in counts[shift:] + counts[:shift]:
                    first = index * runs_per_pass
                    cpu_started, started = time.process_time(), time.perf_counter()
                    thread_workers(systems[count], iter(range(first, first + runs_per_pass)), count, [])
                    wall = time.perf_counter() - started
                    rates[str(count)].append(round(runs_per_pass / wall))
                    busy[str(count)].append(round((time.process_time() - cpu_started) / wall, 2))
        finally:
            for system in systems.values():
                system.close()
    return {"runs_per_s_by_pass": rates, "cores_busy_by_pass": busy, "runs_per_pass": runs_per_pass}


# -- runs per second on processes sharing one directory store -------------------------------------
def processes(counts: list[int], runs_per_pass: int, passes: int) -> dict[str, Any]:
    """Runs per second with N processes on one directory store (one fresh store per N), each
    process a ``bench.postgres`` worker (``Runtime(path)``, warmed up), all started first; in
    each pass every N takes its turn (the order rotating): its N workers each make their
    share of the pass's runs at once. Runs/s: the runs over the time from the first worker's
    start to the last one's end."""
    from bench.postgres import WARMUP, spawn_worker, turn, worker_line

    rates: dict[str, list[float]] = {str(count): [] for count in counts}
    groups: dict[int, list[subprocess.Popen[str]]] = {}
    with scratch("tracelock-processes-") as root:
        try:
            for count in counts:
                store = str(root / f"store-{count}")
                setup = spawn_worker(["tracelock", store, "0", "0", "0", "-1"])
                if worker_line(setup, "setup") != "READY":
                    raise RuntimeError("the setup worker said something else")
                setup.communicate(timeout=CHILD_TIMEOUT_S)
                each = max(1, runs_per_pass // count)
                groups[count] = [spawn_worker(["tracelock", store, str(worker), str(passes), str(each), str(WARMUP)]) for worker in range(count)]
            for workers in groups.values():
                for worker in workers:
                    if worker_line(worker, "worker") != "READY":
                        raise RuntimeError("a worker said something else")
            for index in range(passes):
                shift = index % len(counts)
                for count in counts[shift:] + counts[:shift]:
                    results = turn(groups[count], f"{count} process(es)")
                    runs = sum(len(result["samples"]) for result in results)
                    wall = max(r["ended"] for r in results) - min(r["started"] for r in results)
                    rates[str(count)].append(round(runs / wall))
        finally:
            for workers in groups.values():
                for worker in workers:
                    if worker.poll() is None:
                        worker.kill()
                    worker.communicate()
    return {"runs_per_s_by_pass": rates, "runs_per_pass": runs_per_pass}


# -- PostgreSQL: commits per run --------------------------------------------------------------------
def _commits(pg: Any, database: str) -> int:
    """The database's committed transactions once every session of it has ended (a backend
    reports its counts when it exits)."""
    import psycopg

    deadline = time.monotonic() + 30
    with psycopg.connect(pg.url("postgres"), autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()
            if (row is not None and row[0] == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)).fetchone()
    assert row is not None
    return int(row[0])


def postgres_commits(pg: Any, runs: int) -> dict[str, Any]:
    """Commits per run on PostgreSQL, on an otherwise quiet server: a runtime opened, ``runs``
    runs, closed, less a runtime opened and closed (its set-up's commits). *All commits*: the
    database's ``xact_commit`` (read-only transactions too); *write commits*: transaction ids
    the server assigned (the appends' and the flush waits' own); *waited*: the commits the
    runs waited for the WAL flush of (the store's ``flush_waits``)."""
    from tracelock.runtime.runtime import Runtime

    database = "tracelock_commits"
    url = pg.create_database(database)
    Runtime(url, workload.POLICY, toolkits=(workload.kit,)).close()  # the schema, not counted

    def counted(count: int) -> tuple[int, int, int]:
        commits, xid = _commits(pg, database), pg.next_xid()
        with Runtime(url, workload.POLICY, toolkits=(workload.kit,)) as runtime:
            store: Any = runtime.store
            waits = int(getattr(store, "flush_waits", 0))
            for number in range(count):
                result = runtime.run(workload.agent, workload.task(count * 1_000_000 + number))
                if not result.ok:
                    raise RuntimeError(f"run failed: {result.code} {result.error}")
            waits = int(getattr(store, "flush_waits", 0)) - waits
        xids = pg.next_xid() - xid
        return _commits(pg, database) - commits, xids, waits

    base_commits, base_xids, _ = counted(0)
    all_commits, xids, waits = counted(runs)
    return {
        "runs": runs,
        "waited_per_run": round(waits / runs, 2),
        "all_commits_per_run": round((all_commits - base_commits) / runs, 2),
        "write_commits_per_run": round((xids - base_xids) / runs, 2),
    }


# -- a long conversation ------------------------------------------------------------------------------
FILLER = "please keep the whole conversation in mind when you answer this one"


def conversation_model(request: dict[str, Any]) -> dict[str, Any]:
    """A stand-in model whose every answer is unique: it quotes the last message's number
    and a digest of the whole request it was sent."""
    import hashlib

    last = request["messages"][-1]["content"]
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    return {"content": f"answer to [{last[:24]}] {digest}", "usage": {"input_tokens": len(request["messages"]), "output_tokens": 12}}


def conversation_agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A chat of ``task["turns"]`` turns: each LLM request sends the whole history so far."""
    messages: list[dict[str, Any]] = []
    for turn in range(task["turns"]):
        messages.append({"role": "user", "content": f"{task['topic']} question {turn}: {FILLER}"})
        answer = ctx.llm(model="stand-in", messages=list(messages), max_tokens=256)
        messages.append({"role": "assistant", "content": answer["content"]})
    return {"turns": task["turns"], "last": messages[-1]["content"] if messages else None}


def conversation(turn_counts: list[int], steps: int) -> dict[str, Any]:
    """Store bytes per conversation of T turns: in a fresh store per T, after one warm-up
    conversation, ``ceil(steps / T)`` conversations (so that every T writes about ``steps``
    LLM effects and the bytes dwarf the files' granularity); the growth of the journal,
    index and whole store (allocated, apparent) divided by the conversations."""
    from tracelock.runtime.runtime import Runtime
    from tracelock.runtime.tools.toolkit import Toolkit

    kit = Toolkit(llm=conversation_model)
    out: dict[str, Any] = {}
    with scratch("tracelock-conversation-") as root:
        for turns in turn_counts:
            store = root / f"store-{turns}"
            count = math.ceil(steps / turns)
            with Runtime(store, workload.POLICY, toolkits=(kit,)) as runtime:
                runtime.run(conversation_agent, {"topic": "warm-up", "turns": turns})
            before = store_sizes(store)
            with Runtime(store, workload.POLICY, toolkits=(kit,)) as runtime:
                for number in range(count):
                    result = runtime.run(conversation_agent, {"topic": f"chat {number}", "turns": turns})
                    if not result.ok:
                        raise RuntimeError(f"conversation failed: {result.code} {result.error}")
            after = store_sizes(store)
            out[str(turns)] = {
                "conversations": count,
                **{part: round((after[part] - before[part]) / count) for part in after},
            }
    return out


def main(argv: list[str]) -> int:
    kind, *args = argv
    if kind == "cpu":
        result = cpu_child(int(args[0]), int(args[1]))
    elif kind == "syscalls":
        result = syscalls_child(args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit(f"unknown child {kind!r}")
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
