"""Child process of ``test_held_entries.py``: one run that SIGKILLs itself at a chosen write
of the store (before or after the ``append`` or ``append_many`` that carries a given entry),
so the instant is exact. Every tool counts its real executions in a file outside the store."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracelock import Runtime, Toolkit
from tracelock.core.entry import Entry
from tracelock.storage.backend import NewEntry
from tracelock.storage.directory import DirectoryStore

POLICY = {
    "version": 1,
    "tools": [{"name": "lookup"}, {"name": "pay"}],
    "llm": {"allow": True, "models": ["m"]},
}


def _count(counters: Path, tool: str, line: str) -> None:
    with open(counters / f"{tool}.log", "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def build(counters: Path) -> Toolkit:
    def llm(request: dict[str, Any]) -> dict[str, Any]:
        _count(counters, "llm", str(request["prompt"]))
        return {"content": "go " + str(request["prompt"]), "usage": {"input_tokens": 3, "output_tokens": 2}}

    kit = Toolkit(llm=llm)

    @kit.tool(side_effect="read_only")
    def lookup(order: str) -> dict[str, Any]:
        _count(counters, "lookup", order)
        return {"order": order, "amount": 42}

    @kit.tool(side_effect="irreversible")
    def pay(order: str, amount: int) -> str:
        _count(counters, "pay", order)
        return f"paid {order}"

    @kit.agent("payer")
    def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        plan = ctx.llm(model="m", prompt=task["order"], max_tokens=8)
        first = ctx.call("lookup", order=task["order"] + "-1")
        paid = ctx.call("pay", order=task["order"] + "-1", amount=first["amount"])
        second = ctx.call("lookup", order=task["order"] + "-2")
        again = ctx.call("pay", order=task["order"] + "-2", amount=second["amount"])
        return {"plan": plan["content"], "paid": [paid, again]}

    return kit


def main() -> None:
    store_dir, counters, when, kind, nth = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    seen = {"count": 0}

    def instant(items: Sequence[NewEntry], write: Any) -> Any:
        """Kill before or after the ``nth`` write that carries an entry of ``kind``."""
        carries = any(item.run == "run-1" and item.kind == kind for item in items)
        if carries:
            seen["count"] += 1
        hit = carries and seen["count"] == nth
        if hit and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        written = write()
        if hit and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    original_many, original_one = DirectoryStore.append_many, DirectoryStore.append

    def append_many(self: DirectoryStore, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        written: list[Entry] = instant(items, lambda: original_many(self, items, durable=durable))
        return written

    def append(self: DirectoryStore, run: str, kind: str, **kwargs: Any) -> Entry:
        written: Entry = instant([NewEntry(run, kind)], lambda: original_one(self, run, kind, **kwargs))
        return written

    DirectoryStore.append_many = append_many  # type: ignore[method-assign]
    DirectoryStore.append = append  # type: ignore[method-assign]
    kit = build(counters)
    with Runtime(str(store_dir), POLICY, toolkits=(kit,), ids=lambda: "run-1") as runtime:
        result = runtime.run(kit.agents["payer"].func, {"order": "o"})
        print(f"DONE {result.status}", flush=True)


if __name__ == "__main__":
    main()
