"""LangGraph with ``SqliteSaver``: a three-node graph compiled with the checkpointer, invoked
with ``durability="sync"`` (each step's checkpoint is written before the next step starts),
one thread id per run."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from bench import workload
from bench.peers.base import System


def _graph(app: ModuleType, root: Path) -> tuple[Any, sqlite3.Connection]:
    connection = sqlite3.connect(root / "langgraph.sqlite", check_same_thread=False)
    saver = SqliteSaver(connection)
    saver.setup()
    return app.build(saver), connection


def _config(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}}


class Langgraph(System):
    key = "langgraph"
    title = "LangGraph + SqliteSaver (sync)"
    distributions = ("langgraph", "langgraph-checkpoint-sqlite")
    app_module = "langgraph_app"
    durability = "SqliteSaver checkpoint per step (SQLite WAL, synchronous=FULL), durability=\"sync\""
    recovery = "graph.invoke(None, config) on the run's thread (resumes from its last checkpoint)"
    replay = "graph.invoke(None, config) on the run's thread (replays from its last checkpoint)"

    def open(self, root: Path) -> None:
        from bench.peers.apps import langgraph_app

        self.app = langgraph_app
        self.graph, self.connection = _graph(langgraph_app, root)

    def run(self, number: int) -> Any:
        state = self.graph.invoke(workload.task(number), _config(f"run-{number}"), durability="sync")
        return self.app.output(state)

    def close(self) -> None:
        self.connection.close()

    def child_run(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> Any:
        assert app is not None
        graph, _ = _graph(app, root)
        return app.output(graph.invoke(task, _config(run_id), durability="sync"))

    def _resume(self, app: ModuleType | None, root: Path, run_id: str) -> dict[str, Any]:
        assert app is not None
        graph, _ = _graph(app, root)
        pending = graph.get_state(_config(run_id)).next
        state = graph.invoke(None, _config(run_id), durability="sync")
        said = f"resumed at {', '.join(pending)}" if pending else "nothing left to run; returned the checkpointed state"
        return {"output": app.output(state), "status": "done", "said": said, "noticed": False}

    def child_recover(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        return self._resume(app, root, run_id)

    def child_replay(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        return self._resume(app, root, run_id)


SYSTEM = Langgraph()
