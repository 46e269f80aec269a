"""The concurrency benchmark (``bench/concurrency.py``): its tracelock systems run the
workload to the right outputs with several runs in flight, and its target lines say MISS
when a figure misses (and n/a, never PASS, when a system could not be measured)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import concurrency
from bench.concurrency_child import measure


@pytest.mark.parametrize("key", ["tracelock-arun", "tracelock-threads"])
def test_a_tracelock_system_runs_the_workload_concurrently(tmp_path: Path, key: str) -> None:
    # Run 0 is checked against plain Python's output inside the child (every 97th run is).
    raw = measure(key, 4, 8, 2, tmp_path)
    assert raw["runs"] == 8
    assert len(raw["latencies_s"]) == 8
    assert raw["heartbeats"] > 0
    figures = concurrency.cell(raw, 4)
    assert figures["runs"] == 8
    assert figures["latency_bound"] == 80.0


def _figures(subject: dict[str, Any], dbos: dict[str, Any]) -> dict[str, Any]:
    systems: dict[str, Any] = {
        "tracelock-arun": {"1024": subject},
        "dbos": {"1024": dbos},
        "langgraph": {"1024": {"error": "ImportError: no langgraph"}},
    }
    titles = {"tracelock-arun": "tracelock arun", "dbos": "DBOS async", "langgraph": "LangGraph ainvoke"}
    return {"levels": [1024], "systems": systems, "titles": titles}


def _by_target(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {row["target"]: row["verdict"] for row in rows}


def test_targets_report_each_figure_as_pass_or_miss() -> None:
    subject = {
        "runs_per_s": 900.0,
        "latency_bound": 20480.0,
        "runs_per_cpu_s": 1000.0,
        "syncs_per_run": 0.5,
        "kb_per_in_flight_run": 31.0,  # the wave's peak: reported, not judged
        "kb_held_per_waiting_run": 12.0,
        "held_runs": 1000,
        "lag_max_ms": 4.0,
    }
    rows = concurrency.targets(_figures(subject, {"runs_per_s": 200.0}))
    verdicts = _by_target(rows)
    assert verdicts["≥ 80% of min(latency bound, CPU bound)"] == "PASS"  # 90% of the CPU bound
    assert verdicts["≥ 5x DBOS runs/s"] == "MISS"  # 4.5x
    assert verdicts["≥ 5x LangGraph runs/s"] == "n/a"  # LangGraph failed: no ratio, no pass
    assert verdicts["≤ 0.3 syncs per run"] == "MISS"
    assert verdicts["< 20 KB per in-flight run"] == "PASS"
    assert verdicts["loop lag < 5 ms"] == "PASS"


def test_a_failed_subject_passes_nothing() -> None:
    failed = _figures({"error": "AttributeError: no arun"}, {"error": "ImportError: no dbos"})
    rows = concurrency.targets(failed)
    assert {row["verdict"] for row in rows} == {"n/a"}
    report = concurrency.render(
        {
            **failed,
            "quick": True,
            "runs": {"1024": 1024},
            "warmup": 16,
            "llm_latency_ms": 50.0,
            "machine": {"cpus": 2, "python": "3.11"},
            "sync_floor_p50_us": 60.0,
            "syncs_counted": False,
            "versions": {"tracelock-arun": "", "dbos": "", "langgraph": ""},
            "how": {"tracelock-arun": "", "dbos": "", "langgraph": ""},
        }
    )
    assert "failed: AttributeError: no arun" in report
    assert "PASS" not in report
