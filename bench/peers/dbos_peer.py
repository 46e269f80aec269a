"""DBOS on SQLite: ``@DBOS.workflow`` / ``@DBOS.step``, one workflow id per run, the system
database in a SQLite file (no server)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

from bench import workload
from bench.peers.base import DBOS_PINNED_VERSION_ENV, System

RECOVERY_WAIT_S = 15.0


def _launch(root: Path) -> None:
    config: DBOSConfig = {
        "name": "bench-peers",
        "system_database_url": f"sqlite:///{root / 'dbos.sqlite'}",
        "log_level": "ERROR",
    }
    pinned = os.environ.get(DBOS_PINNED_VERSION_ENV)
    if pinned:
        config["application_version"] = pinned
    DBOS(config=config)
    DBOS.launch()


class Dbos(System):
    key = "dbos"
    title = "DBOS (SQLite)"
    distributions = ("dbos",)
    app_module = "dbos_app"
    durability = "SQLite system database (rollback journal, synchronous=FULL): a row per step and per workflow"
    recovery = "DBOS.launch() (recovers this executor's PENDING workflows of the current application version)"
    replay = "calling the workflow again with the same workflow id"

    def open(self, root: Path) -> None:
        from bench.peers.apps import dbos_app  # registers the workflow before launch

        self.app = dbos_app
        _launch(root)

    def run(self, number: int) -> Any:
        with SetWorkflowID(f"run-{number}"):
            return self.app.agent_workflow(workload.task(number))

    def close(self) -> None:
        DBOS.destroy()

    def child_run(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> Any:
        assert app is not None
        _launch(root)
        with SetWorkflowID(run_id):
            return app.agent_workflow(task)

    def child_recover(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        _launch(root)  # starts recovery of pending workflows in the background
        deadline = time.monotonic() + RECOVERY_WAIT_S
        status = DBOS.get_workflow_status(run_id)
        while status is not None and status.status in ("PENDING", "ENQUEUED") and time.monotonic() < deadline:
            time.sleep(0.05)
            status = DBOS.get_workflow_status(run_id)
        if status is None:
            return {"output": None, "status": "missing", "said": "no such workflow", "noticed": False}
        if status.status == "SUCCESS":
            output: Any = DBOS.retrieve_workflow(run_id).get_result()
            return {"output": output, "status": "SUCCESS", "said": "recovered on launch", "noticed": False}
        said = (
            f"workflow still {status.status} after {RECOVERY_WAIT_S:.0f} s: it was started under "
            f"application version {status.app_version}, this code is version {DBOS.application_version}, "
            "and launch recovers only its own version's workflows"
        )
        if status.error is not None:
            said = f"workflow {status.status}: {status.error}"
        return {"output": None, "status": status.status, "said": said, "noticed": False}

    def child_replay(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        assert app is not None
        _launch(root)
        with SetWorkflowID(run_id):
            output = app.agent_workflow(task)
        return {"output": output, "status": "returned", "said": "returned the workflow's recorded output", "noticed": False}


SYSTEM = Dbos()
