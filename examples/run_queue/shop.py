"""A run queue on one machine: a web handler submits runs, worker processes take them.

    tracelock worker shop --store .tracelock --concurrency 4      # in one or more terminals
    python shop.py                                               # submits three orders, waits

The same code serves a fleet once the store is PostgreSQL (``--store postgresql://...``, and
``Runtime("postgresql://...")`` below). ``charge`` is irreversible: if a worker dies in the
middle of it, the run is blocked for an operator, never charged twice; ``reserve`` is
idempotent: a worker that takes a dead worker's run over repeats it with the same key.
"""

from __future__ import annotations

import sys
from typing import Any

from tracelock import Runtime, Toolkit

POLICY = {"version": 1, "tools": [{"name": "price"}, {"name": "reserve"}, {"name": "charge"}]}
kit = Toolkit()


@kit.tool()
def price(sku: str) -> int:
    return 100 * len(sku)


@kit.tool(side_effect="idempotent")
def reserve(sku: str, idempotency_key: str) -> str:
    return f"reserved {sku} ({idempotency_key[:8]})"


@kit.tool(side_effect="irreversible")
def charge(customer: str, amount: int) -> str:
    return f"charged {customer} {amount}"


@kit.agent("checkout")
def checkout(ctx: Any, order: dict[str, Any]) -> dict[str, Any]:
    amount = ctx.call("price", sku=order["sku"])
    reserved = ctx.call("reserve", sku=order["sku"])
    return {"reserved": reserved, "charged": ctx.call("charge", customer=order["customer"], amount=amount)}


def main(store: str) -> None:
    with Runtime(store, POLICY, toolkits=(kit,)) as runtime:
        handles = [
            runtime.submit("checkout", {"sku": sku, "customer": "c-1"}, queue="default", idempotency_key=f"order-{sku}")
            for sku in ("tea", "cups", "kettle")
        ]
        for handle in handles:
            result = handle.result(timeout=60)
            print(handle.run_id, result.status, result.output)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".tracelock")
