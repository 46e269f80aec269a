"""Per-run cost of the README's workload (LLM stand-in + a read-only tool + an irreversible
tool, unique inputs and results) on tracelock alone, against the sync floor measured in the
same run, and replay time per recorded run: ``python -m bench.runtime``.

Variants, interleaved round by round so that machine noise hits all alike:

- ``default``: tool settings left at their defaults (``timeout=30.0``), ``durability="auto"``:
  the headline;
- ``timeout_none``: the same tools registered with ``timeout=None`` (no deadline at all);
- ``thread_handoff``: the same tools with ``timeout_mode="thread"``, the pool-thread hand-off
  every sync tool with a timeout paid before the watchdog;
- ``strict``: default tools, ``durability="strict"`` (every entry durable before the call
  returns: the peers' per-step durability).

Each variant's p50 is also given as a multiple of its own floor: its syncs per run times the
p50 of one small overwrite + ``fdatasync`` probed between the rounds."""

from __future__ import annotations

import concurrent.futures
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import workload
from bench.stats import percentile, summary_us
from bench.syncs import probe
from tracelock.runtime.replay.gate import replay_all
from tracelock.runtime.runtime import Runtime
from tracelock.storage.directory.disk_usage import store_parts

VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "default": ({}, "auto"),
    "timeout_none": ({"timeout": None}, "auto"),
    "thread_handoff": ({"timeout_mode": "thread"}, "auto"),
    "strict": ({}, "strict"),
}


def _store_bytes(path: Path) -> dict[str, int]:
    """Bytes on disk by part, as ``tracelock store info`` counts them: the journal is
    ``journal.log`` with its sealed segments (docs/spec.md 3.8)."""
    parts, _ = store_parts(path)
    return {"journal": parts["journal"] + parts["segments"], "index": parts["index"], "total": parts["total"]}


def run(quick: bool) -> dict[str, Any]:
    runs = 300 if quick else 10_000
    batch = 50 if quick else 100
    figures: dict[str, Any] = {"runs": runs}
    plain = []
    for number in range(runs):
        started = time.perf_counter()
        workload.plain_python(workload.task(number))
        plain.append(time.perf_counter() - started)
    figures["plain_python"] = summary_us(plain)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        root = Path(tmp)
        runtimes = {
            label: Runtime(root / label, workload.POLICY, toolkits=(workload.make_kit(**settings),), durability=durability)
            for label, (settings, durability) in VARIANTS.items()
        }
        samples: dict[str, list[float]] = {label: [] for label in VARIANTS}
        # CPU time of the whole process (every thread) per run: steadier than wall time on a
        # shared machine, and it counts what a hand-off costs in both threads.
        cpu_samples: dict[str, list[float]] = {label: [] for label in VARIANTS}
        per_round: dict[str, list[float]] = {label: [] for label in VARIANTS}
        run_ids: dict[str, list[str]] = {label: [] for label in VARIANTS}
        floor: list[float] = []
        for runtime in runtimes.values():  # warm-up, outside the figures
            for number in range(20):
                runtime.run(workload.agent, workload.task(runs + number))
        syncs_before = {label: runtime.store.sync_count for label, runtime in runtimes.items()}  # type: ignore[attr-defined]
        labels = list(VARIANTS)
        for round_number in range(runs // batch):
            shift = round_number % len(labels)
            for label in labels[shift:] + labels[:shift]:
                runtime, own, ids, cpu = runtimes[label], [], run_ids[label], cpu_samples[label]
                for number in range(round_number * batch, (round_number + 1) * batch):
                    cpu_started = time.process_time()
                    started = time.perf_counter()
                    result = runtime.run(workload.agent, workload.task(number))
                    own.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - cpu_started)
                    ids.append(result.run_id)
                assert result.ok, result.error
                samples[label] += own
                per_round[label].append(percentile(own, 0.5))
            floor += probe(root, 20)
        floor_us = percentile(floor, 0.5) * 1e6
        figures["sync_floor"] = {**summary_us(floor), "probes": len(floor)}
        for label, runtime in runtimes.items():
            syncs = (runtime.store.sync_count - syncs_before[label]) / runs  # type: ignore[attr-defined]
            stats = summary_us(samples[label])
            figures[label] = {
                "durable_run": stats,
                "cpu_per_run": summary_us(cpu_samples[label]),
                "runs_per_s": round(runs / sum(samples[label])),
                "syncs_per_run": round(syncs, 2),
                "p50_vs_floor": round(stats["p50_us"] / (syncs * floor_us), 2) if syncs else None,
            }
        default_rounds = per_round["default"]
        for label in ("timeout_none", "thread_handoff", "strict"):
            ratios = [other / own for own, other in zip(default_rounds, per_round[label], strict=True)]
            figures[label]["p50_vs_default_by_round"] = [round(min(ratios), 2), round(percentile(ratios, 0.5), 2), round(max(ratios), 2)]
        runtime = runtimes["default"]
        replays = []
        for run_id in run_ids["default"][: min(runs, 1000)]:
            started = time.perf_counter()
            report = runtime.replay(run_id, workload.agent)
            replays.append(time.perf_counter() - started)
            assert report.matched
        started = time.perf_counter()
        gate = replay_all(runtime, agent=workload.agent)
        gate_seconds = time.perf_counter() - started
        assert gate.ok and gate.checked == runs + 20
        figures["default"]["replay"] = summary_us(replays)
        figures["default"]["replay_gate_runs_per_s"] = round(gate.checked / gate_seconds)
        for label, runtime in runtimes.items():
            runtime.close()
            sizes = _store_bytes(root / label)
            figures[label]["bytes_per_run"] = {part: round(count / (runs + 20)) for part, count in sizes.items()}
    figures["tool_call"] = tool_call(quick)
    figures["replay_by_store_size"] = replay_by_store_size(quick)
    _print(figures)
    return figures


def tool_call(quick: bool) -> dict[str, dict[str, float]]:
    """One sync tool call through the invoker alone (no journal, no disk), per tool setting,
    interleaved: wall time per call (p50) and the process's CPU time per call (mean)."""
    from tracelock.runtime.tools.invoke import ToolInvoker

    calls, rounds = (2_000, 5) if quick else (10_000, 10)
    settings = {name: kit.tools["search_orders"] for name, kit in (
        ("default", workload.make_kit()),
        ("timeout_none", workload.make_kit(timeout=None)),
        ("thread_handoff", workload.make_kit(timeout_mode="thread")),
    )}
    with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="bench-tool") as pool:
        invoke = ToolInvoker(pool)
        wall: dict[str, list[float]] = {name: [] for name in settings}
        cpu: dict[str, float] = dict.fromkeys(settings, 0.0)
        for _ in range(rounds):
            for name, tool in settings.items():
                kwargs = {"query": "where is order 1?"}
                cpu_started = time.process_time()
                for _ in range(calls // rounds):
                    started = time.perf_counter()
                    invoke(tool, kwargs)
                    wall[name].append(time.perf_counter() - started)
                cpu[name] += time.process_time() - cpu_started
        invoke.close()
    return {
        name: {"wall_p50_us": round(percentile(wall[name], 0.5) * 1e6, 2), "cpu_mean_us": round(cpu[name] / calls * 1e6, 2)}
        for name in settings
    }


def replay_by_store_size(quick: bool) -> dict[str, dict[str, float]]:
    """CPU time (process time: the machine may be shared) of replaying runs spread over the
    whole store, in stores of growing size, each reopened first: the first replay after
    opening, then the mean of the others, in journal order and (reopened again) in a
    shuffled order.

    In journal order, the smallest store's sample holds about five runs per decoded frame
    of its sealed segments (docs/spec.md 3.8), which the handle's frame cache keeps between
    consecutive replays, while a larger store's holds one: the shuffled order gives every
    size the same chance of a cached frame (almost none), so that what it compares is the
    store's size alone."""
    sizes = (300, 3_000) if quick else (1_000, 10_000, 100_000)
    sample = 100 if quick else 500
    out: dict[str, dict[str, float]] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
            store = Path(tmp) / "store"
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            run_ids = [runtime.run(workload.agent, workload.task(number)).run_id for number in range(size)]
            runtime.close()
            picked = run_ids[:: max(1, size // sample)][:sample]
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            started = time.process_time()
            assert runtime.replay(picked[0], workload.agent).matched
            first = time.process_time() - started
            started = time.process_time()
            for run_id in picked[1:]:
                assert runtime.replay(run_id, workload.agent).matched
            rest = (time.process_time() - started) / (len(picked) - 1)
            runtime.close()
            shuffled = picked[1:]
            random.Random(size).shuffle(shuffled)
            runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
            assert runtime.replay(picked[0], workload.agent).matched
            started = time.process_time()
            for run_id in shuffled:
                assert runtime.replay(run_id, workload.agent).matched
            mixed = (time.process_time() - started) / len(shuffled)
            runtime.close()
        out[str(size)] = {
            "first_replay_cpu_us": round(first * 1e6),
            "replay_cpu_us": round(rest * 1e6, 1),
            "replay_cpu_us_shuffled": round(mixed * 1e6, 1),
        }
    return out


def _print(figures: dict[str, Any]) -> None:
    plain = figures["plain_python"]
    floor = figures["sync_floor"]
    print(f"plain python (no durability): p50 {plain['p50_us']} us  p99 {plain['p99_us']} us")
    print(f"sync floor (small overwrite + fdatasync, {floor['probes']} probes): p50 {floor['p50_us']} us  p99 {floor['p99_us']} us")
    for label in VARIANTS:
        f = figures[label]
        d = f["durable_run"]
        line = (
            f"{label:<15} p50 {d['p50_us']:>7} us  p99 {d['p99_us']:>7} us  CPU p50 {f['cpu_per_run']['p50_us']:>6} us  "
            f"{f['runs_per_s']:>5} runs/s  "
            f"syncs/run {f['syncs_per_run']}  p50 = {f['p50_vs_floor']}x its syncs' floor  "
            f"{f['bytes_per_run']['total']} B/run"
        )
        if "p50_vs_default_by_round" in f:
            low, mid, high = f["p50_vs_default_by_round"]
            line += f"  vs default, per round: {low}-{high}x (median {mid}x)"
        print(line)
    for name, f in figures["tool_call"].items():
        print(f"one sync tool call, invoker only, {name:<15} wall p50 {f['wall_p50_us']} us  CPU {f['cpu_mean_us']} us")
    d = figures["default"]
    print(f"replay of a recorded run: p50 {d['replay']['p50_us']} us; gate {d['replay_gate_runs_per_s']} runs/s")
    for size, f in figures["replay_by_store_size"].items():
        print(
            f"replay in a store of {size:>6} runs: first after opening {f['first_replay_cpu_us']} us CPU, "
            f"then {f['replay_cpu_us']} us CPU per run in journal order, {f['replay_cpu_us_shuffled']} us shuffled"
        )


if __name__ == "__main__":
    run(quick=False)
