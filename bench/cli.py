"""The command line every benchmark module shares: ``python -m bench.<name> [--quick] [--json]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


def bench_main(run: Callable[[bool], dict[str, Any]], description: str, argv: list[str] | None = None) -> int:
    """Parse ``--quick``/``--json``, run the benchmark (it prints its own table), and print
    its figures as JSON when asked."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.quick)
    if args.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
    return 0
