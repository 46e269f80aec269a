"""IntentusNet: an agent on ``IntentusRuntime`` (execution recording on), each step written to
IntentusNet's fsynced write-ahead log; recovery with its ``RecoveryManager``, replay with its
``ReplayEngine``."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from intentusnet import FileExecutionStore, ReplayEngine
from intentusnet.wal import RecoveryManager

from bench import workload
from bench.peers.base import System


class Intentusnet(System):
    key = "intentusnet"
    title = "IntentusNet (WAL + recording)"
    distributions = ("intentusnet",)
    app_module = "intentusnet_app"
    durability = "WALWriter entries (fsync each) around every step; an execution record (JSON, not fsynced) per run"
    recovery = (
        "RecoveryManager.scan_incomplete_executions() + resume_execution(), then the application "
        "sends the intent again (the WAL keeps hashes, not results or inputs)"
    )
    replay = "ReplayEngine(record).replay() (returns the recorded final response)"

    def open(self, root: Path) -> None:
        from bench.peers.apps import intentusnet_app

        self.app = intentusnet_app
        self.runtime = intentusnet_app.build(root)

    def run(self, number: int) -> Any:
        return self.app.run(self.runtime, f"run-{number}", workload.task(number))

    def child_run(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> Any:
        assert app is not None
        return app.run(app.build(root), run_id, task)

    def child_recover(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        assert app is not None
        manager = RecoveryManager(str(root / "wal"))
        incomplete = manager.scan_incomplete_executions()
        if run_id not in incomplete:
            return {"output": None, "status": "not found", "said": f"scan found {incomplete}", "noticed": False}
        decision = manager.resume_execution(run_id)
        output = app.run(app.build(root), run_id, task)
        said = f"resume_execution: {decision.reason}; completed steps {decision.completed_steps}"
        return {"output": output, "status": "re-run", "said": said, "noticed": False}

    def child_replay(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        store = FileExecutionStore(str(root / "records"))
        records = [store.load(execution_id) for execution_id in store.list_ids()]
        record = next(r for r in records if r.envelope.get("payload", {}).get("run_id") == run_id)
        result = ReplayEngine(record).replay()
        said = f"returned the recorded response (envelope_hash_ok={result.envelope_hash_ok})"
        return {"output": result.response["payload"], "status": "replayed", "said": said, "noticed": False}


SYSTEM = Intentusnet()
