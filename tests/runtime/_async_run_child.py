"""Child process of ``test_async_runs.py``: awaited runs on one loop, one of which is held
inside its irreversible effect (after the effect recorded itself in a ledger outside the
store) until the process is killed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tracelock import Runtime

POLICY = {"version": 1, "tools": [{"name": "lookup"}, {"name": "charge"}]}


def runtime(location: str, ledger: str, inside: str) -> Runtime:
    made = Runtime(location, POLICY)

    @made.tool(side_effect="read_only")
    async def lookup(order: str) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"order": order, "cents": 100 + len(order)}

    @made.tool(side_effect="irreversible")
    async def charge(order: str, cents: int) -> str:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{order}\n".encode())
        finally:
            os.close(fd)
        if order == "k-held":
            Path(inside).write_text(str(os.getpid()))
            await asyncio.sleep(3600)  # killed here
        return f"charged {order} {cents}"

    return made


async def checkout(ctx: Any, order: str) -> dict[str, Any]:
    found = await ctx.call("lookup", order=order)
    return {"receipt": await ctx.call("charge", order=order, cents=found["cents"])}


def serve(location: str, ledger: str, inside: str) -> None:
    async def main() -> None:
        with runtime(location, ledger, inside) as made:
            await asyncio.gather(*(made.arun(checkout, order) for order in ("k-0", "k-1", "k-held", "k-2")))

    asyncio.run(main())
