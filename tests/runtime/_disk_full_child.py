"""Child process of the disk-full tests: records runs of an agent with an irreversible tool
into a store until the store fails. Every real execution of the tool is written to a ledger
file outside the store (``TRACELOCK_LEDGER``); each finished run is reported on stdout, and
the failure as ``FAILED <code> <run>`` with exit status 3."""

from __future__ import annotations

import os
import sys
from typing import Any

from tracelock.errors import TracelockError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit

POLICY = {"version": 1, "tools": [{"name": "pay"}, {"name": "look"}]}

kit = Toolkit()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(key: str, size: int) -> str:
    with open(os.environ["TRACELOCK_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(key + "\n")
    return key + " " + "x" * size


@kit.tool(side_effect="read_only", timeout=None)
def look(key: str) -> str:
    return key


@kit.agent("disk-full-agent")
def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    for number in range(task["steps"]):
        ctx.call("look", key=f"{ctx.run_id}:{number}")
        ctx.call("pay", key=f"{ctx.run_id}:{number}", size=task["size"])
    return {"paid": task["steps"]}


def main(store: str, size: int, steps: int) -> None:
    runtime = Runtime(store, POLICY, toolkits=(kit,))
    number = 0
    try:
        while True:
            run_id = f"d-{number}"
            try:
                result = runtime.run(agent, {"size": size, "steps": steps}, run_id=run_id)
            except TracelockError as exc:
                sys.stdout.write(f"FAILED {exc.code} {run_id}\n")
                sys.stdout.flush()
                sys.exit(3)
            sys.stdout.write(f"DONE {result.run_id} {result.status}\n")
            sys.stdout.flush()
            number += 1
    finally:
        runtime.close()


if __name__ == "__main__":
    # Through the module's own name: the runs then record an agent `recover` can import.
    from tests.runtime._disk_full_child import main as run_until_full

    run_until_full(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
