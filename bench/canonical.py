"""Canonical JSON speed: the reference ``rfc8785`` package, our exact path, our ``dumps``.

``python -m bench.canonical [--quick] [--json]``. Each object is timed twice: *seen*, the
same object serialized over and over (``dumps`` remembers the floats it has proven), and
*fresh*, a new object of the same shape for every call, with its own floats and strings
(what a journal sees); fresh objects are built before each batch, outside the timing. The contenders are timed in interleaved
rounds (each round times every contender once, in a rotating order), so that a busy machine
slows all of them alike. Times are medians over rounds of the mean time per call, measured
with ``time.perf_counter_ns`` over a batch sized to last a few milliseconds; speedups are
medians over rounds of the ratio measured within each round.
"""

from __future__ import annotations

import gc
import itertools
import random
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


def fresh_step(rng: random.Random, n: int = 42) -> dict[str, Any]:
    """:func:`typical_step` with its own ids, texts and floats: latencies, scores, costs and
    probabilities at full precision or rounded, a few of them small."""
    step = typical_step(n)
    step["step_id"] = f"step_{rng.getrandbits(48):012x}"
    step["parent"] = f"{rng.getrandbits(256):064x}"
    step["args"]["temperature"] = round(rng.random(), 2)
    step["args"]["top_p"] = rng.random() / 100
    step["args"]["url"] = f"https://example.com/api/v1/search?q=caf%C3%A9&page={rng.randrange(100)}"
    step["messages"][2]["content"] = f"1. Coût {rng.random():.4f} €. 2. Biais. 3. Sûreté — {n}."
    step["messages"][3]["content"] = f"Größe: {rng.uniform(1, 64):.1f} kB; Zeit: {rng.random()} s ✓"
    step["budget"]["cost_usd"] = round(rng.uniform(0, 0.05), 6)
    step["budget"]["latency_s"] = rng.uniform(0.05, 30.0)
    step["budget"]["score"] = rng.random()
    return step


def fresh_transcript(rng: random.Random, steps: int = 64) -> dict[str, Any]:
    """:func:`large_transcript` made of :func:`fresh_step` steps."""
    transcript = large_transcript(0)
    transcript["steps"] = [fresh_step(rng, n) for n in range(steps)]
    transcript["totals"] = {
        "steps": steps,
        "cost_usd": rng.uniform(0, 3),
        "wall_s": rng.uniform(1, 60),
    }
    return transcript


# Seeds are never reused, so no batch sees a float an earlier batch has seen.
_SEEDS = itertools.count(1)


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


def _batch_ns(function: Callable[[Any], bytes], values: list[Any]) -> float:
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for value in values:
            function(value)
        return (time.perf_counter_ns() - start) / len(values)
    finally:
        if gc_was_enabled:
            gc.enable()


Make = Callable[[int], list[Any]]  # the values for a batch of so many calls


def _measure(make: Make, rounds: int, batch_ms: float) -> dict[str, list[float]]:
    """Per-call microseconds of every contender, one sample per round."""
    calls: dict[str, int] = {}
    for name, function in CONTENDERS:
        function(make(1)[0])  # warm up
        single = min(_batch_ns(function, make(1)) for _ in range(5))
        calls[name] = max(1, int(batch_ms * 1e6 / max(single, 1.0)))
    samples: dict[str, list[float]] = {name: [] for name, _ in CONTENDERS}
    for round_number in range(rounds):
        shift = round_number % len(CONTENDERS)
        for name, function in CONTENDERS[shift:] + CONTENDERS[:shift]:
            values = make(calls[name])
            samples[name].append(_batch_ns(function, values) / 1000)
    return samples


def _seen(value: Any) -> Make:
    return lambda calls: [value] * calls


def _fresh(build: Callable[[random.Random], Any]) -> Make:
    def make(calls: int) -> list[Any]:
        rng = random.Random(next(_SEEDS))
        return [build(rng) for _ in range(calls)]

    return make


def _ratio(samples: dict[str, list[float]], slow: str, fast: str) -> float:
    """Median over rounds of the ratio within each round (robust to a drifting load)."""
    return statistics.median(a / b for a, b in zip(samples[slow], samples[fast], strict=True))


def run(quick: bool) -> dict[str, Any]:
    """Time every contender on the typical and the large object; print a table."""
    rounds, batch_ms = (7, 4.0) if quick else (31, 10.0)
    objects: dict[str, tuple[Any, Make]] = {
        "typical": (typical_step(), _seen(typical_step())),
        "typical_fresh": (fresh_step(random.Random(0)), _fresh(fresh_step)),
        "large": (large_transcript(), _seen(large_transcript())),
        "large_fresh": (fresh_transcript(random.Random(0)), _fresh(fresh_transcript)),
    }
    figures: dict[str, Any] = {"rounds": rounds, "python": sys.version.split()[0]}
    header = (
        f"{'object':<13} {'bytes':>7} {'rfc8785 us':>11} {'exact us':>9} {'dumps us':>9} "
        f"{'cold us':>8} {'orjson us':>10} {'rfc/dumps':>10} {'rfc/cold':>9} {'rfc/exact':>10}"
    )
    print(header)
    for label, (value, make) in objects.items():
        expected = rfc8785.dumps(value)
        if canonical.dumps(value) != expected or canonical._exact_dumps(value) != expected:
            raise AssertionError(f"{label}: output differs from rfc8785")
        samples = _measure(make, rounds, batch_ms)
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
            f"{label:<13} {row['bytes']:>7} {row['rfc8785_us']:>11.2f} {row['exact_us']:>9.2f} "
            f"{row['dumps_us']:>9.2f} {row['dumps_cold_us']:>8.2f} "
            f"{row['orjson_unchecked_us']:>10.2f} {row['speedup_dumps_vs_rfc8785']:>9.1f}x "
            f"{row['speedup_dumps_cold_vs_rfc8785']:>8.1f}x {row['speedup_exact_vs_rfc8785']:>9.2f}x"
        )
    print(
        "dumps: the figures in use (floats already proven are remembered); cold: that memo "
        "emptied before every call; *_fresh: a new object, new floats and strings, every call"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
