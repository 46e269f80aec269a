"""Per-run overhead of a durable 3-effect agent run (LLM stand-in + two tools) against plain
Python, and replay time per recorded run: ``python -m bench.runtime``."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import workload
from bench.stats import summary_us
from tracelock.runtime.replay.gate import replay_all
from tracelock.runtime.runtime import Runtime


def _store_bytes(path: Path) -> dict[str, int]:
    sizes = {p.name: p.stat().st_size for p in path.iterdir() if p.is_file()}
    journal = sizes.get("journal.log", 0)
    index = sum(size for name, size in sizes.items() if name.startswith("index.sqlite"))
    return {"journal": journal, "index": index}


def run(quick: bool) -> dict[str, Any]:
    runs = 300 if quick else 10_000
    figures: dict[str, Any] = {"runs": runs}
    plain = []
    for number in range(runs):
        started = time.perf_counter()
        workload.plain_python(workload.task(number))
        plain.append(time.perf_counter() - started)
    figures["plain_python"] = summary_us(plain)
    for label, agent in (("read_only_tools", workload.agent), ("with_idempotent_write", workload.agent_with_write)):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
            store = Path(tmp) / "store"
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            samples = []
            run_ids = []
            for number in range(runs):
                started = time.perf_counter()
                result = runtime.run(agent, workload.task(number))
                samples.append(time.perf_counter() - started)
                run_ids.append(result.run_id)
            syncs = runtime.store.sync_count if hasattr(runtime.store, "sync_count") else None
            replays = []
            for run_id in run_ids[: min(runs, 1000)]:
                started = time.perf_counter()
                report = runtime.replay(run_id, agent)
                replays.append(time.perf_counter() - started)
                assert report.matched
            started = time.perf_counter()
            gate = replay_all(runtime, agent=agent)
            gate_seconds = time.perf_counter() - started
            assert gate.ok and gate.checked == runs
            runtime.close()
            sizes = _store_bytes(store)
        figures[label] = {
            "durable_run": summary_us(samples),
            "runs_per_s": round(runs / sum(samples)),
            "fsyncs_per_run": round(syncs / runs, 2) if syncs is not None else None,
            "replay": summary_us(replays),
            "replay_gate_runs_per_s": round(runs / gate_seconds),
            "journal_bytes_per_run": round(sizes["journal"] / runs),
            "index_bytes_per_run": round(sizes["index"] / runs),
        }
    figures["replay_by_store_size"] = replay_by_store_size(quick)
    _print(figures)
    return figures


def replay_by_store_size(quick: bool) -> dict[str, dict[str, float]]:
    """CPU time (process time: the machine may be shared) of replaying runs spread over the
    whole store, in stores of growing size, each reopened first: the first replay after
    opening, then the mean of the others."""
    sizes = (300, 3_000) if quick else (1_000, 10_000, 100_000)
    sample = 100 if quick else 500
    out: dict[str, dict[str, float]] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
            store = Path(tmp) / "store"
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            run_ids = [runtime.run(workload.agent_with_write, workload.task(number)).run_id for number in range(size)]
            runtime.close()
            picked = run_ids[:: max(1, size // sample)][:sample]
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            started = time.process_time()
            assert runtime.replay(picked[0], workload.agent_with_write).matched
            first = time.process_time() - started
            started = time.process_time()
            for run_id in picked[1:]:
                assert runtime.replay(run_id, workload.agent_with_write).matched
            rest = (time.process_time() - started) / (len(picked) - 1)
            runtime.close()
        out[str(size)] = {"first_replay_cpu_us": round(first * 1e6), "replay_cpu_us": round(rest * 1e6, 1)}
    return out


def _print(figures: dict[str, Any]) -> None:
    plain = figures["plain_python"]
    print(f"plain python (no durability): p50 {plain['p50_us']} us  p99 {plain['p99_us']} us")
    for label in ("read_only_tools", "with_idempotent_write"):
        f = figures[label]
        d, r = f["durable_run"], f["replay"]
        print(
            f"{label:<22} durable run p50 {d['p50_us']:>7} us  p99 {d['p99_us']:>7} us  "
            f"{f['runs_per_s']:>5} runs/s  fsyncs/run {f['fsyncs_per_run']}  "
            f"replay p50 {r['p50_us']} us  gate {f['replay_gate_runs_per_s']} runs/s  "
            f"journal {f['journal_bytes_per_run']} B/run  "
            f"index {f['index_bytes_per_run']} B/run"
        )
    for size, f in figures["replay_by_store_size"].items():
        print(
            f"replay in a store of {size:>6} runs: first after opening {f['first_replay_cpu_us']} us CPU, "
            f"then {f['replay_cpu_us']} us CPU per run"
        )


if __name__ == "__main__":
    run(quick=False)
