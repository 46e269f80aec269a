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


def group_rounds(rounds: list[list[float]], passes: int) -> list[list[float]]:
    """The samples of consecutive rounds pooled into ``passes`` groups (fewer when there are
    fewer rounds; the first groups take one round more when they do not divide evenly): a
    figure computed per group, quoted as a range, shows how much it moves within one run."""
    count = max(1, min(passes, len(rounds)))
    size, extra = divmod(len(rounds), count)
    groups, start = [], 0
    for index in range(count):
        stop = start + size + (index < extra)
        groups.append([sample for own in rounds[start:stop] for sample in own])
        start = stop
    return groups
