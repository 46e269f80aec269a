"""The three effects every system's agent performs (the shared workload of ``bench.workload``),
with the two probes the crash test needs.

- Counters: when :func:`configure` names a directory, each effect appends a line to a file of
  its own name there each time it really runs. The files live outside every system's store, so
  they count what happened, not what a journal says happened.
- The hold: when :func:`configure` names a marker file, the third effect (``send_update``, the
  irreversible one) writes it on entry, before it does anything, and then waits to be killed.
  Every system has recorded the second step before it starts the third, so a kill on seeing
  the marker lands after the second step has completed and been recorded, and before the
  irreversible effect has happened (its counter is written after the hold).

With neither probe set (the timed runs), each effect is one ``None`` check on top of the
workload's own function.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import workload

EFFECTS = ("llm", "search_orders", "send_update")

_counters: Path | None = None
_hold: Path | None = None


def configure(*, counters: Path | None = None, hold: Path | None = None) -> None:
    global _counters, _hold
    _counters, _hold = counters, hold


def counts(directory: Path) -> dict[str, int]:
    """How many times each effect ran, from the counter files in ``directory``."""
    result = {}
    for name in EFFECTS:
        path = directory / name
        result[name] = len(path.read_text().splitlines()) if path.exists() else 0
    return result


def _count(name: str) -> None:
    if _counters is not None:
        with open(_counters / name, "a") as counter:
            counter.write("ran\n")


def llm(request: dict[str, Any]) -> dict[str, Any]:
    """The LLM stand-in: a fixed plan whatever the request."""
    _count("llm")
    return workload.llm_stand_in(request)


def plan(prompt: str) -> dict[str, Any]:
    """The LLM call as the peers make it (one function taking the prompt)."""
    return llm({"model": "stand-in", "prompt": prompt, "max_tokens": 64})


def search_orders(query: str) -> list[dict[str, Any]]:
    _count("search_orders")
    return workload.search_orders(query)


def send_update(customer_id: str, text: str) -> dict[str, Any]:
    if _hold is not None:
        _hold.write_text("the third effect has started\n")
        while True:  # the parent kills this process now
            time.sleep(1)
    _count("send_update")
    return workload.send_update(customer_id, text)
