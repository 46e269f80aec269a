"""Throughput of ``tracelock scan``: lines per second over a large installed package.

Every function of the package is an entry point (``--entry '*:*'``), so the whole tree is
analysed, not only what agents reach. The full run scans the installed ``mypy`` package
(about 130k lines); the quick run scans ``click`` (about 13k lines). The target is a
100k-line tree in under 10 seconds, i.e. at least 10,000 lines per second.

Run with ``python -m bench.scan [--quick] [--json]``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any

from bench.cli import bench_main
from tracelock.analysis import ScanConfig, ScanReport, scan_paths

FULL = ("mypy", "hypothesis", "_pytest", "click")
QUICK = ("click", "_pytest", "mypy")
TARGET_LINES = 100_000
TARGET_SECONDS = 10.0


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _parse_only(files: list[Path]) -> float:
    """Seconds to read and parse the files with ``ast`` alone (the floor of any AST scan)."""
    start = time.perf_counter()
    for file in files:
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(file.read_bytes())
    return time.perf_counter() - start


def _scan_once(root: Path, config: ScanConfig) -> tuple[float, float, ScanReport]:
    wall = time.perf_counter()
    cpu = time.process_time()
    report = scan_paths([root], config, base=root.parent)
    return time.perf_counter() - wall, time.process_time() - cpu, report


def run(quick: bool) -> dict[str, Any]:
    """Scan one installed package with every function as an entry point; print a table."""
    candidates = QUICK if quick else FULL
    found = [(name, path) for name in candidates if (path := _package_dir(name)) is not None]
    if not found:
        print(f"skipped: none of {', '.join(candidates)} is installed")
        return {"name": "scan", "skipped": f"none of {', '.join(candidates)} is installed"}
    name, root = found[0]
    config = ScanConfig(extra_entry_points=("*:*",))
    rounds = 1 if quick else 3
    runs = [_scan_once(root, config) for _ in range(rounds)]
    walls = sorted(w for w, _, _ in runs)
    best_wall = walls[0]
    best_cpu = min(c for _, c, _ in runs)
    report = runs[0][2]

    lines = report.stats.lines
    per_second = lines / best_wall if best_wall else 0.0
    result: dict[str, Any] = {
        "name": "scan",
        "package": name,
        "mode": "every function is an entry point",
        "rounds": rounds,
        "files": report.stats.files,
        "lines": lines,
        "functions": report.stats.functions,
        "reachable_functions": report.stats.reachable_functions,
        "findings": len(report.findings),
        "seconds_best": round(best_wall, 3),
        "seconds_median": round(statistics.median(walls), 3),
        "cpu_seconds_best": round(best_cpu, 3),
        "lines_per_second": round(per_second),
        "lines_per_cpu_second": round(lines / best_cpu) if best_cpu else 0,
        "seconds_per_100k_lines": round(TARGET_LINES / per_second, 2) if per_second else None,
        "target": f"{TARGET_LINES} lines in under {TARGET_SECONDS:g} s",
        "meets_target": per_second >= TARGET_LINES / TARGET_SECONDS,
    }
    if not quick:
        files = sorted(root.rglob("*.py"))
        result["parse_only_seconds"] = round(_parse_only(files), 3)

    print(f"tracelock scan over the installed {name} package ({result['mode']})")
    print(f"  {result['files']} files, {lines} lines, {result['functions']} functions, "
          f"{result['findings']} findings")
    print(f"  best of {rounds}: {best_wall:.2f} s wall, {best_cpu:.2f} s cpu "
          f"-> {result['lines_per_second']:,} lines/s "
          f"({result['seconds_per_100k_lines']} s per 100k lines)")
    if "parse_only_seconds" in result:
        print(f"  ast.parse alone: {result['parse_only_seconds']:.2f} s")
    print(f"  target {result['target']}: {'met' if result['meets_target'] else 'MISSED'}")
    return result


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
