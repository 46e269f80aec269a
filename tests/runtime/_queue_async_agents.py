"""``async def`` agents and tools of the queue tests, importable by worker processes
(``tracelock worker tests.runtime._queue_async_agents``).

Like :mod:`tests.runtime._queue_agents`, every real effect is recorded outside the store, in a
ledger file (``TRACELOCK_TEST_LEDGER``, one JSON line per event with the worker's pid), and
``TRACELOCK_TEST_HOLD`` names a file that holds the first run reaching a hold point for a key
(it writes ``<ledger>.held.<key>`` and waits, awaiting, while the file exists).

``nap`` writes an ``enter`` line when a run comes into it and an ``exit`` line when it
leaves: read in order, they say how many runs were inside the tool at once. Each ``enter``
line carries the number of the process's threads at that moment (``/proc/self/task``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tests.runtime._queue_agents import hold_file, ledger_line
from tracelock.runtime.tools.toolkit import Toolkit

POLICY = {
    "version": 1,
    "tools": [
        {"name": "nap"},
        {"name": "pay"},
        {"name": "linger"},
        {"name": "ship", "approval": True},
    ],
}
kit = Toolkit()


def _ledger(line: dict[str, Any], *, sync: bool = False) -> None:
    ledger_line(line, sync=sync)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


async def _hold(key: str) -> None:
    hold = hold_file(key)
    while hold is not None and hold.exists():
        await asyncio.sleep(0.01)


@kit.tool(timeout=None)
async def nap(key: str, seconds: float) -> str:
    _ledger({"event": "enter", "key": key, "threads": _threads()})
    await asyncio.sleep(seconds)
    _ledger({"event": "exit", "key": key})
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
async def pay(key: str, amount: int) -> str:
    _ledger({"event": "pay", "key": key, "amount": amount}, sync=True)
    await _hold(key)
    return "paid"


@kit.tool(timeout=None)
async def linger(key: str) -> str:
    """Read-only: held while the hold file exists (a worker can be paused or stopped here)."""
    _ledger({"event": "linger", "key": key})
    await _hold(key)
    return key.lower()


@kit.tool(side_effect="irreversible", timeout=None)
async def ship(key: str) -> str:
    _ledger({"event": "ship", "key": key}, sync=True)
    return "shipped"


@kit.agent("napper")
async def napper(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """One tool call that awaits ``asyncio.sleep``."""
    return {"napped": await ctx.call("nap", key=task["key"], seconds=task.get("seconds", 0.2))}


@kit.agent("async_payer")
async def async_payer(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A nap, then an irreversible payment (held while the hold file exists)."""
    napped = await ctx.call("nap", key=task["key"], seconds=0)
    return {"napped": napped, "paid": await ctx.call("pay", key=task["key"], amount=task.get("amount", 1))}


def sync_napper(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A sync agent calling the same async tool (it runs in a worker thread)."""
    return {"napped": ctx.call("nap", key=task["key"], seconds=task.get("seconds", 0.2))}


@kit.agent("lingerer")
async def lingerer(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A nap whose result is journaled, then a read-only step that can be held."""
    napped = await ctx.call("nap", key=task["key"], seconds=0)
    return {"napped": napped, "lingered": await ctx.call("linger", key=task["key"])}


@kit.agent("async_shipper")
async def async_shipper(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """An irreversible step that needs approval."""
    return {"shipped": await ctx.call("ship", key=task["key"])}
