"""Child process of ``test_sync_points.py``: one run of the README's workload (an LLM call,
a read-only tool, an irreversible tool; with ``--after``, one more read-only tool after it)
that kills itself with SIGKILL at instant ``kill_at``.

An *instant* is the moment before or after each store append, each store sync, and each
effect (the LLM provider, each tool): every point at which the process can die with a
different journal and a different world. The irreversible tool appends one line to the
ledger file (fsynced) as its effect on the world. The child prints ``DONE <fingerprint>``
once the run returned (what its caller has been told), then ``INSTANTS <n>``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from tracelock import Runtime, Toolkit
from tracelock.storage.directory import DirectoryStore

POLICY = {
    "version": 1,
    "tools": [{"name": "lookup"}, {"name": "pay"}, {"name": "notify"}],
    "llm": {"allow": True, "models": ["m"]},
}


class Instants:
    def __init__(self, kill_at: int) -> None:
        self.count = 0
        self.kill_at = kill_at

    def __call__(self) -> None:
        self.count += 1
        if self.count == self.kill_at:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def build(ledger: Path, tick: Any = lambda: None) -> Toolkit:
    def llm(request: dict[str, Any]) -> dict[str, Any]:
        tick()
        answer = {"content": "pay " + str(request["prompt"]), "usage": {"input_tokens": 3, "output_tokens": 2}}
        tick()
        return answer

    kit = Toolkit(llm=llm)

    @kit.tool(side_effect="read_only")
    def lookup(order: str) -> dict[str, Any]:
        tick()
        tick()
        return {"order": order, "amount": 42}

    @kit.tool(side_effect="irreversible")
    def pay(order: str, amount: int) -> str:
        tick()
        with ledger.open("a") as out:
            out.write(f"pay {order}\n")
            out.flush()
            os.fsync(out.fileno())
        tick()
        return f"paid {order}"

    @kit.tool(side_effect="read_only")
    def notify(order: str, receipt: str) -> str:
        tick()
        tick()
        return "sent"

    @kit.agent("payer")
    def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        plan = ctx.llm(model="m", prompt=task["order"], max_tokens=8)
        found = ctx.call("lookup", order=task["order"])
        receipt = ctx.call("pay", order=task["order"], amount=found["amount"])
        sent = ctx.call("notify", order=task["order"], receipt=receipt) if task.get("after") else None
        return {"plan": plan["content"], "receipt": receipt, "sent": sent}

    return kit


def instrument(tick: Instants) -> None:
    """Make every append and sync of the directory store two instants."""
    for name in ("append", "append_many", "sync"):
        original = getattr(DirectoryStore, name)

        def wrapped(self: DirectoryStore, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            tick()
            result = __original(self, *args, **kwargs)
            tick()
            return result

        setattr(DirectoryStore, name, wrapped)


def main() -> None:
    store_dir, ledger, kill_at, after = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "after"
    tick = Instants(kill_at)
    instrument(tick)
    kit = build(ledger, tick)
    with Runtime(str(store_dir), POLICY, toolkits=(kit,), ids=lambda: "run-1") as runtime:
        result = runtime.run(kit.agents["payer"].func, {"order": "o1", "after": after})
        print(f"DONE {result.fingerprint}", flush=True)
    print(f"INSTANTS {tick.count}", flush=True)


if __name__ == "__main__":
    main()
