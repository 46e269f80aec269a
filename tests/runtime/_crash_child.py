"""Child process of the crash-recovery harness: runs agents with read-only, idempotent and
irreversible tools until it is killed. Each tool counts its real executions in a file
outside the store; each finished run is reported on stdout."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit

POLICY = {"version": 1, "tools": [{"name": "fetch"}, {"name": "reserve"}, {"name": "charge"}]}

kit = Toolkit()


def _count(tool: str, run: str, step: str, extra: str = "") -> None:
    counters = Path(os.environ["TRACELOCK_CRASH_COUNTERS"])
    with open(counters / f"{tool}.log", "a", encoding="utf-8") as handle:
        handle.write(f"{run} {step} {extra}".rstrip() + "\n")
    time.sleep(0.001)


@kit.tool(side_effect="read_only", timeout=None)
def fetch(run: str, step: str) -> dict[str, Any]:
    _count("fetch", run, step)
    return {"fetched": step}


@kit.tool(side_effect="idempotent", timeout=None)
def reserve(run: str, step: str, idempotency_key: str = "") -> dict[str, Any]:
    _count("reserve", run, step, idempotency_key)
    return {"reserved": step}


@kit.tool(side_effect="irreversible", timeout=None)
def charge(run: str, step: str) -> dict[str, Any]:
    _count("charge", run, step)
    return {"charged": step}


@kit.agent("crash-agent")
def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    run = ctx.run_id
    first = ctx.call("fetch", run=run, step="0")
    held = ctx.call("reserve", run=run, step="1")
    paid = ctx.call("charge", run=run, step="2")
    again = ctx.call("fetch", run=run, step="3")
    return {"task": task["n"], "results": [first, held, paid, again]}


def make_runtime(store: str) -> Runtime:
    return Runtime(store, POLICY, toolkits=(kit,))


def main(store: str, prefix: str) -> None:
    runtime = make_runtime(store)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    number = 0
    while True:
        result = runtime.run(agent, {"n": number}, run_id=f"{prefix}-{number}")
        sys.stdout.write(f"DONE {result.run_id} {result.status}\n")
        sys.stdout.flush()
        number += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
