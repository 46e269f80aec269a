"""Run every benchmark listed in :data:`MODULES`: ``python -m bench [--quick] [--json]``.

Each listed module, ``bench/<name>.py``, exposes ``run(quick: bool) -> dict``, prints its own
readable table and returns its figures as a JSON-ready dict.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

#: Benchmark modules run by ``python -m bench``, in order.
MODULES = ["canonical", "journal", "runtime", "bound", "recovery", "merkle", "scan", "evidence", "capture", "adapters", "mcp", "ui"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", action="store_true", help="print all figures as JSON at the end")
    args = parser.parse_args(argv)
    figures = {}
    for name in MODULES:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}", flush=True)
        figures[name] = module.run(args.quick)
        print(flush=True)
    if args.json:
        json.dump(figures, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
