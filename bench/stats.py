"""Small timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary_us(samples_s: list[float]) -> dict[str, float]:
    """p50/p99/mean in microseconds from samples in seconds."""
    return {
        "p50_us": round(percentile(samples_s, 0.50) * 1e6, 1),
        "p99_us": round(percentile(samples_s, 0.99) * 1e6, 1),
        "mean_us": round(statistics.fmean(samples_s) * 1e6, 1),
    }
