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
    _print(figures)
    return figures


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


if __name__ == "__main__":
    run(quick=False)
