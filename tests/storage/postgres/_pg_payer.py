"""The agent of the PostgreSQL runtime fault test, importable by the child that runs it and
by ``tracelock recover`` in the test: a read-only lookup, then an irreversible payment.
Each real payment appends a line to ``WORKDIR/paid``; with ``HOLD`` set, it then writes
``WORKDIR/held`` and waits to be killed. With ``HOLD_LOOKUP`` set, the lookup writes
``WORKDIR/looking`` and waits to be killed instead."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tracelock.runtime.tools.toolkit import Toolkit

POLICY = {"version": 1, "tools": [{"name": "lookup"}, {"name": "pay"}]}
kit = Toolkit()
WORKDIR: list[Path] = []
HOLD: list[bool] = []
HOLD_LOOKUP: list[bool] = []


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    if HOLD_LOOKUP:
        (WORKDIR[0] / "looking").write_text(key)
        threading.Event().wait()
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    with open(WORKDIR[0] / "paid", "a") as paid:
        paid.write(f"{amount}\n")
    if HOLD:
        (WORKDIR[0] / "held").write_text("paying")
        threading.Event().wait()
    return "paid"


@kit.agent("payer")
def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    found = ctx.call("lookup", key=task["key"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}
