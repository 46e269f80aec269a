"""Child process of the fork crash test: records a run whose prefix holds an irreversible
effect, forks it, and is killed (SIGKILL, by the agent itself, so the instant is exact)
inside the fork while the reused prefix is being copied: after the child's start and its
copy of step 0 were written, before the copy of the irreversible step 1. Every tool counts
its real executions in a file outside the store."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit

POLICY = {"version": 1, "tools": [{"name": "fetch"}, {"name": "charge"}, {"name": "notify"}]}
FORK_AT = 3
#: The run whose agent kills the process after step 0 (set only in the child process).
KILL_RUN: dict[str, str | None] = {"run": None}

kit = Toolkit()


def _count(tool: str, line: str) -> None:
    with open(Path(os.environ["TRACELOCK_CRASH_COUNTERS"]) / f"{tool}.log", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


@kit.tool(side_effect="read_only", timeout=None)
def fetch(tag: str) -> dict[str, Any]:
    _count("fetch", tag)
    return {"fetched": tag}


@kit.tool(side_effect="irreversible", timeout=None)
def charge(amount: int) -> dict[str, Any]:
    _count("charge", str(amount))
    return {"charged": amount}


@kit.tool(side_effect="idempotent", timeout=None)
def notify(text: str, idempotency_key: str = "") -> bool:
    _count("notify", text)
    return True


@kit.agent("fork-crash-agent")
def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    first = ctx.call("fetch", tag="0")
    if ctx.run_id == KILL_RUN["run"]:
        os.kill(os.getpid(), signal.SIGKILL)
    paid = ctx.call("charge", amount=task["amount"])
    second = ctx.call("fetch", tag="2")
    ctx.call("notify", text=str(task["amount"]))
    return {"first": first, "paid": paid, "second": second}


def make_runtime(store: str) -> Runtime:
    return Runtime(store, POLICY, toolkits=(kit,))


def main(store: str, parent: str, child: str) -> None:
    runtime = make_runtime(store)
    runtime.run(agent, {"amount": 5}, run_id=parent)
    sys.stdout.write("RECORDED\n")
    sys.stdout.flush()
    KILL_RUN["run"] = child
    fork_run(runtime, parent, FORK_AT, new_run_id=child)
    sys.stdout.write("FORK ENDED\n")  # never reached: the fork is killed while it copies


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
