"""Agents and tools of the queue tests, importable by worker processes (``tracelock worker
tests.runtime._queue_agents``).

Every real effect is recorded outside the store, in a ledger file (``TRACELOCK_TEST_LEDGER``,
one JSON line per effect with the worker's pid): the tests read it to prove that no
irreversible effect happened twice. ``TRACELOCK_TEST_HOLD`` names a file: while it exists, the
first run to reach a hold point for a key writes ``<ledger>.held.<key>`` and waits (so that
a test can kill or pause the worker in the middle of a run); later runs pass.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from tracelock.runtime.tools.toolkit import Toolkit

POLICY = {
    "version": 1,
    "tools": [
        {"name": "lookup"},
        {"name": "charge"},
        {"name": "refund"},
        {"name": "ship", "approval": True},
    ],
}
kit = Toolkit()


def ledger_line(line: dict[str, Any], *, sync: bool = True) -> None:
    """Append ``line`` (with this process's pid) to the ledger; ``sync``: durably."""
    path = os.environ.get("TRACELOCK_TEST_LEDGER")
    if not path:
        return
    line = dict(line, pid=os.getpid())
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(line, sort_keys=True) + "\n")
        ledger.flush()
        if sync:
            os.fsync(ledger.fileno())


def hold_file(key: str) -> Path | None:
    """The hold file the first run reaching a hold point for ``key`` waits on while it
    exists (its marker ``<ledger>.held.<key>`` written), or None: not held."""
    hold = os.environ.get("TRACELOCK_TEST_HOLD")
    ledger = os.environ.get("TRACELOCK_TEST_LEDGER")
    if not hold or not ledger:
        return None
    marker = Path(f"{ledger}.held.{key}")
    if not Path(hold).exists() or marker.exists():
        return None  # held once per key: the worker that takes the run over is not held
    marker.write_text(str(os.getpid()))
    return Path(hold)



def _hold(key: str) -> None:
    hold = hold_file(key)
    while hold is not None and hold.exists():
        threading.Event().wait(0.01)


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="idempotent", timeout=None)
def refund(key: str, amount: int, idempotency_key: str) -> str:
    ledger_line({"effect": "refund", "key": key, "amount": amount, "idem": idempotency_key})
    return "refunded"


@kit.tool(side_effect="irreversible", timeout=None)
def charge(key: str, amount: int) -> str:
    ledger_line({"effect": "charge", "key": key, "amount": amount})
    _hold(key)
    return "charged"


@kit.tool(side_effect="irreversible", timeout=None)
def ship(key: str) -> str:
    ledger_line({"effect": "ship", "key": key})
    return "shipped"


@kit.agent("payer")
def payer(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """Three effects: a lookup, an idempotent refund, an irreversible charge."""
    found = ctx.call("lookup", key=task["key"])
    refunded = ctx.call("refund", key=task["key"], amount=task.get("amount", 1))
    charged = ctx.call("charge", key=task["key"], amount=task.get("amount", 1))
    return {"found": found, "refunded": refunded, "charged": charged}


@kit.agent("slow_refunder")
def slow_refunder(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A lookup, then an idempotent refund that waits while the hold file exists."""
    found = ctx.call("lookup", key=task["key"])
    ctx.call("refund", key=task["key"], amount=task.get("amount", 1))
    ctx.call("charge", key=task["key"], amount=0) if task.get("charge") else None
    return {"found": found}


def holding_refund(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """An idempotent refund, then a read-only lookup while held: a worker paused here has
    its later appends refused."""
    ctx.call("refund", key=task["key"], amount=1)
    _hold(task["key"])
    return {"found": ctx.call("lookup", key=task["key"])}


@kit.agent("shipper")
def shipper(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """An irreversible step that needs approval."""
    return {"shipped": ctx.call("ship", key=task["key"])}


def plain(ctx: Any, task: Any) -> Any:
    return {"echo": task, "looked": ctx.call("lookup", key=str(task.get("key", "x")))}
