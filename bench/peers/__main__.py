"""``python -m bench.peers [--quick] [--runs N] [--only SYSTEM ...] [--no-write] [--json]``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from bench.peers.harness import log, run
from bench.peers.systems import MODULES
from bench.syncs import counter_library, preloaded_count


def preload_sync_counter() -> None:
    """Start this command again with the sync counter preloaded (``LD_PRELOAD`` only acts at
    process start), so that the timed runs themselves are counted; go on without it when it
    cannot be built."""
    if preloaded_count() is not None:
        return
    library, why = counter_library()
    if library is None:
        log(f"peers: syncs will not be counted: {why}")
        return
    preload = os.pathsep.join(filter(None, [str(library), os.environ.get("LD_PRELOAD", "")]))
    os.execve(sys.executable, [sys.executable, "-m", "bench.peers", *sys.argv[1:]], {**os.environ, "LD_PRELOAD": preload})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="about 500 runs per system instead of 10,000")
    parser.add_argument("--runs", type=int, help="runs per system (overrides --quick)")
    parser.add_argument("--only", nargs="+", choices=sorted(MODULES), help="these systems (tracelock always runs)")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md and the plot")
    parser.add_argument("--json", action="store_true", help="print all figures as JSON at the end")
    args = parser.parse_args(argv)
    if argv is None:
        preload_sync_counter()
    figures = run(args.quick, runs=args.runs, only=args.only, write=not args.no_write)
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
