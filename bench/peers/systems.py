"""The systems compared, in the order the report lists them, and how to load one."""

from __future__ import annotations

import importlib

from bench.peers.base import System

#: key -> ``module[:attribute]`` under bench/peers (the attribute defaults to ``SYSTEM``).
MODULES = {
    "plain": "plain_peer",
    "tracelock": "tracelock_peer",
    "tracelock-strict": "tracelock_peer:STRICT",
    "dbos": "dbos_peer",
    "langgraph": "langgraph_peer",
    "intentusnet": "intentusnet_peer",
}

#: key -> the distributions it needs (for the install log named in the report when it fails).
DISTRIBUTIONS = {
    "plain": (),
    "tracelock": ("tracelock",),
    "tracelock-strict": ("tracelock",),
    "dbos": ("dbos",),
    "langgraph": ("langgraph", "langgraph-checkpoint-sqlite"),
    "intentusnet": ("intentusnet",),
}

#: key -> the name the report shows when the system could not be loaded.
TITLES = {
    "plain": "plain Python (no durability)",
    "tracelock": "tracelock",
    "tracelock-strict": 'tracelock (durability="strict")',
    "dbos": "DBOS (SQLite)",
    "langgraph": "LangGraph + SqliteSaver (sync)",
    "intentusnet": "IntentusNet (WAL + recording)",
}


def load_system(key: str) -> System:
    """Import a system's module (which imports the system itself: this raises if it cannot)."""
    module_name, _, attribute = MODULES[key].partition(":")
    module = importlib.import_module(f"bench.peers.{module_name}")
    system: System = getattr(module, attribute or "SYSTEM")
    return system
