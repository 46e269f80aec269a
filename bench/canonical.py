"""Canonical JSON speed: the reference ``rfc8785`` package, our exact path, our ``dumps``.

``python -m bench.canonical [--quick] [--json]``. The contenders are timed in interleaved
rounds (each round times every contender once, in a rotating order), so that a busy machine
slows all of them alike. Times are medians over rounds of the mean time per call, measured
with ``time.perf_counter_ns`` over a batch sized to last a few milliseconds; speedups are
medians over rounds of the ratio measured within each round.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import rfc8785

from bench.cli import bench_main
from tracelock.core import canonical


def typical_step(n: int = 42) -> dict[str, Any]:
    """A realistic ~1 KB agent step: ids, a tool call with nested arguments, messages."""
    return {
        "run_id": "run_01J9Z3K4X8Q2M7N5P6R1S0T9V8",
        "step_id": f"step_{n:06d}",
        "seq": n,
        "parent": "9f2c6a1e0b7d4c3a8e5f1b2d6c9a0e7f3b4d5c6a7e8f9a0b1c2d3e4f5a6b7c8d",
        "kind": "effect",
        "tool": "http.fetch",
        "args": {
            "url": "https://example.com/api/v1/search?q=caf%C3%A9",
            "method": "GET",
            "timeout_s": 30,
            "retries": 2,
            "temperature": 0.7,
            "top_p": 0.0012,
            "stream": False,
            "headers": {"accept": "application/json", "user-agent": "tracelock/0.1"},
            "cursor": None,
        },
        "messages": [
            {
                "role": "system",
                "content": "You are a careful assistant. Answer in French when asked.",
            },
            {
                "role": "user",
                "content": "Résume l'article « Les défis de l'IA » en trois points, s'il te plaît.",
            },
            {
                "role": "assistant",
                "content": "1. Coût énergétique. 2. Biais des données. 3. Sûreté — vérification.",
            },
            {"role": "tool", "content": "Größe: 12 kB; Zeit: 0,4 s; naïve café ✓ 日本語"},
        ],
        "policy": {"allowed": True, "rule": "net.allow-list", "matched": ["example.com"]},
        "budget": {"tokens_in": 1834 + n, "tokens_out": 412, "cost_usd": 0.0046},
        "tags": ["search", "fr", "retrieval"],
    }


def large_transcript(steps: int = 64) -> dict[str, Any]:
    """A run transcript of ``steps`` typical steps (about 64 KB canonical)."""
    return {
        "run_id": "run_01J9Z3K4X8Q2M7N5P6R1S0T9V8",
        "agent": {"name": "researcher", "version": "1.4.2", "model": "example-model"},
        "steps": [typical_step(n) for n in range(steps)],
        "totals": {"steps": steps, "cost_usd": 0.2944, "wall_s": 12.5},
    }


def _orjson_unchecked(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _dumps_cold(value: Any) -> bytes:
    """``dumps`` with its memo of proven floats emptied first: every float checked anew."""
    canonical._SAFE_FLOATS.clear()
    return canonical.dumps(value)


CONTENDERS: list[tuple[str, Callable[[Any], bytes]]] = [
    ("rfc8785", rfc8785.dumps),
    ("exact", canonical._exact_dumps),
    ("dumps", canonical.dumps),
    ("dumps_cold", _dumps_cold),
    ("orjson", _orjson_unchecked),  # floor: orjson alone, not canonical
]


def _batch_ns(function: Callable[[Any], bytes], value: Any, calls: int) -> float:
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(calls):
            function(value)
        return (time.perf_counter_ns() - start) / calls
    finally:
        if gc_was_enabled:
            gc.enable()


def _measure(value: Any, rounds: int, batch_ms: float) -> dict[str, list[float]]:
    """Per-call microseconds of every contender, one sample per round."""
    calls: dict[str, int] = {}
    for name, function in CONTENDERS:
        function(value)  # warm up
        single = min(_batch_ns(function, value, 1) for _ in range(5))
        calls[name] = max(1, int(batch_ms * 1e6 / max(single, 1.0)))
    samples: dict[str, list[float]] = {name: [] for name, _ in CONTENDERS}
    for round_number in range(rounds):
        shift = round_number % len(CONTENDERS)
        for name, function in CONTENDERS[shift:] + CONTENDERS[:shift]:
            samples[name].append(_batch_ns(function, value, calls[name]) / 1000)
    return samples


def _ratio(samples: dict[str, list[float]], slow: str, fast: str) -> float:
    """Median over rounds of the ratio within each round (robust to a drifting load)."""
    return statistics.median(a / b for a, b in zip(samples[slow], samples[fast], strict=True))


def run(quick: bool) -> dict[str, Any]:
    """Time every contender on the typical and the large object; print a table."""
    rounds, batch_ms = (7, 4.0) if quick else (31, 10.0)
    objects = {"typical": typical_step(), "large": large_transcript()}
    figures: dict[str, Any] = {"rounds": rounds, "python": sys.version.split()[0]}
    header = (
        f"{'object':<8} {'bytes':>7} {'rfc8785 us':>11} {'exact us':>9} {'dumps us':>9} "
        f"{'cold us':>8} {'orjson us':>10} {'rfc/dumps':>10} {'rfc/cold':>9} {'rfc/exact':>10}"
    )
    print(header)
    for label, value in objects.items():
        expected = rfc8785.dumps(value)
        if canonical.dumps(value) != expected or canonical._exact_dumps(value) != expected:
            raise AssertionError(f"{label}: output differs from rfc8785")
        samples = _measure(value, rounds, batch_ms)
        times = {name: statistics.median(values) for name, values in samples.items()}
        row = {
            "bytes": len(expected),
            "rfc8785_us": round(times["rfc8785"], 2),
            "exact_us": round(times["exact"], 2),
            "dumps_us": round(times["dumps"], 2),
            "dumps_cold_us": round(times["dumps_cold"], 2),
            "orjson_unchecked_us": round(times["orjson"], 2),
            "speedup_dumps_vs_rfc8785": round(_ratio(samples, "rfc8785", "dumps"), 1),
            "speedup_dumps_cold_vs_rfc8785": round(_ratio(samples, "rfc8785", "dumps_cold"), 1),
            "speedup_exact_vs_rfc8785": round(_ratio(samples, "rfc8785", "exact"), 2),
        }
        figures[label] = row
        print(
            f"{label:<8} {row['bytes']:>7} {row['rfc8785_us']:>11.2f} {row['exact_us']:>9.2f} "
            f"{row['dumps_us']:>9.2f} {row['dumps_cold_us']:>8.2f} "
            f"{row['orjson_unchecked_us']:>10.2f} {row['speedup_dumps_vs_rfc8785']:>9.1f}x "
            f"{row['speedup_dumps_cold_vs_rfc8785']:>8.1f}x {row['speedup_exact_vs_rfc8785']:>9.2f}x"
        )
    print(
        "dumps: the figures in use (floats already proven are remembered); cold: that memo "
        "emptied before every call"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
