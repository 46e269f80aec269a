"""Plain Python, no durability: the floor every durable system is measured against."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from bench import workload
from bench.peers.apps import effects
from bench.peers.base import System


class Plain(System):
    key = "plain"
    title = "plain Python (no durability)"
    durability = "nothing is stored"
    recovery = "run it again from the start"
    replay = "nothing recorded to replay"

    def version(self) -> str:
        return "the same functions, called directly"

    def run(self, number: int) -> Any:
        return workload.plain_python(workload.task(number))

    def child_run(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> Any:
        ask = task["ask"]
        plan = effects.plan(ask)
        orders = effects.search_orders(query=ask)
        update = effects.send_update(customer_id=task["customer"], text=plan["content"])
        return {"plan": plan["content"], "orders": orders, "update": update}

    def child_recover(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        output = self.child_run(app, root, run_id, task)
        return {"output": output, "status": "ran again", "said": "nothing: there is no record", "noticed": False}


SYSTEM = Plain()
