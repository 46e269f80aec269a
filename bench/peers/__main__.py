"""``python -m bench.peers [--quick] [--runs N] [--only SYSTEM ...] [--no-write] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from bench.peers.harness import run
from bench.peers.systems import MODULES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="about 500 runs per system instead of 10,000")
    parser.add_argument("--runs", type=int, help="runs per system (overrides --quick)")
    parser.add_argument("--only", nargs="+", choices=sorted(MODULES), help="these systems (tracelock always runs)")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/performance.md and the plot")
    parser.add_argument("--json", action="store_true", help="print all figures as JSON at the end")
    args = parser.parse_args(argv)
    figures = run(args.quick, runs=args.runs, only=args.only, write=not args.no_write)
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
