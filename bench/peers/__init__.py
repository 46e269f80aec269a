"""tracelock side by side with the systems users would pick instead (DBOS, LangGraph,
IntentusNet, and plain Python as the floor): ``python -m bench.peers [--quick]``, or
``make bench``, which installs the peers into their own environment first.

One module per system (``<system>_peer.py``), the workload written for each system in
``apps/``, the harness in :mod:`bench.peers.harness`; the report goes to
``docs/benchmarks.md`` (see :mod:`bench.report`).
"""

from __future__ import annotations

from typing import Any


def run(quick: bool) -> dict[str, Any]:
    from bench.peers.harness import run as run_harness

    return run_harness(quick)
