"""Child processes of ``test_one_owner.py``: callers racing on one run, each a process of its
own with a runtime of its own over one store.

The agent looks an order up (read-only), then charges it (irreversible): ``charge`` appends
one line per real execution to a ledger file outside the store, then takes a moment (so a
second caller arrives while the first is inside the effect). A charge of an order whose
``hold`` file exists waits until that file is gone (at most a minute): the caller can be
killed or raced at a known point.
"""

from __future__ import annotations

import json
import os
import random
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from tracelock import Runtime, Toolkit

POLICY = {"version": 1, "tools": [{"name": "lookup"}, {"name": "charge"}]}


def build(ledger: Path) -> Toolkit:
    kit = Toolkit()

    @kit.tool(side_effect="read_only", timeout=None)
    def lookup(order: str) -> dict[str, Any]:
        _held(ledger.with_name(f"hold-lookup-{order}"), ledger.with_name(f"inside-lookup-{order}"))
        return {"order": order, "cents": 100 + len(order)}

    @kit.tool(side_effect="irreversible", timeout=None)
    def charge(order: str, cents: int) -> str:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{order} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        _held(ledger.with_name(f"hold-{order}"), ledger.with_name(f"inside-{order}"))
        time.sleep(0.08)
        return f"charged {order} {cents}"

    return kit


def _held(hold: Path, inside: Path) -> None:
    """While ``hold`` exists (at most a minute), say so in ``inside`` and wait."""
    if hold.exists():
        inside.write_text(str(os.getpid()))
        for _ in range(1200):
            if not hold.exists():
                break
            time.sleep(0.05)


def checkout(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """The agent (module level: a queued run names it by its import path)."""
    found = ctx.call("lookup", order=task["order"])
    receipt = ctx.call("charge", order=task["order"], cents=found["cents"])
    return {"receipt": receipt}


def runtime_for(location: str, ledger: Path, lease_ms: int = 30_000) -> Runtime:
    return Runtime(location, POLICY, toolkits=(build(ledger),), lease_ms=lease_ms, busy_timeout=60.0)


def racer(location: str, ledger: str, results: str, trials: int, seed: int, barrier: Barrier, name: str) -> None:
    """Call ``run`` with idempotency key ``order-<n>`` for trial n, after the barrier and a
    random offset (0-150 ms: the charge takes 80 ms), and write each result to ``results``."""
    offsets = random.Random(f"{seed}:{name}")
    with runtime_for(location, Path(ledger)) as runtime:
        for trial in range(trials):
            barrier.wait(120)
            time.sleep(offsets.random() * 0.15)
            order = f"order-{trial}"
            try:
                row = runtime.run(checkout, {"order": order}, idempotency_key=order).to_dict()
            except Exception as exc:  # reported to the test, which fails on it
                row = {"error": f"{type(exc).__name__}: {exc}", "code": getattr(exc, "code", None)}
            with open(results, "a") as out:
                out.write(json.dumps({"trial": trial, "caller": name, **row}) + "\n")


def owner(location: str, ledger: str, order: str, lease_ms: int) -> None:
    """Run order ``order`` once (a step may be held by a ``hold`` file); write how the call
    ended to ``outcome-<order>`` beside the ledger."""
    outcome = Path(ledger).with_name(f"outcome-{order}")
    with runtime_for(location, Path(ledger), lease_ms) as runtime:
        try:
            result = runtime.run(checkout, {"order": order}, idempotency_key=order)
        except Exception as exc:
            outcome.write_text(json.dumps({"raised": type(exc).__name__, "code": getattr(exc, "code", None)}))
            raise SystemExit(3) from None
        outcome.write_text(json.dumps({"status": result.status}))
