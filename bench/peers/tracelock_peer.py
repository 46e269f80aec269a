"""tracelock: a Runtime over a fresh directory store, the workload of ``bench.workload``."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import workload
from bench.peers.base import System
from tracelock.runtime.runtime import Runtime


class Tracelock(System):
    key = "tracelock"
    title = "tracelock"
    distributions = ("tracelock",)
    app_module = "tracelock_app"
    durability = (
        'durability="auto" (the default): each entry goes to the journal file as it is appended; the '
        "file is fsynced (group commit) at the run's end before run() returns, and before any "
        "idempotent or irreversible effect runs"
    )
    strict = False
    store_subdir = "store"
    recovery = "Runtime.recover() (resumes every unfinished run from its journal)"
    replay = "Runtime.replay(run_id) (re-executes the current code against the record)"

    def open(self, root: Path) -> None:
        self.runtime = Runtime(
            root / "store", workload.POLICY, toolkits=(workload.kit,), durability=self.durability_mode
        )
        self.run_ids: list[str] = []

    def run(self, number: int) -> Any:
        result = self.runtime.run(workload.agent, workload.task(number))
        if not result.ok:
            raise RuntimeError(f"tracelock run failed: {result.code} {result.error}")
        self.run_ids.append(result.run_id)
        return result.output

    def replay_all(self, limit: int) -> tuple[list[float], int]:
        """Replay (up to ``limit``) recorded runs: per-run seconds, and how many matched."""
        samples, matched = [], 0
        for run_id in self.run_ids[:limit]:
            started = time.perf_counter()
            report = self.runtime.replay(run_id, workload.agent)
            samples.append(time.perf_counter() - started)
            matched += report.matched
        return samples, matched

    def close(self) -> None:
        self.runtime.close()

    def payload_bytes(self, store: Path) -> int | None:
        """From the index: each payload record's length less its ``=<64 hex digits> ``
        head (docs/spec.md 3.3)."""
        with closing(sqlite3.connect(f"file:{store / 'index.sqlite'}?mode=ro", uri=True)) as db:
            count, total = db.execute("SELECT count(*), coalesce(sum(length), 0) FROM payloads").fetchone()
        return int(total) - 66 * int(count)

    @property
    def durability_mode(self) -> str:
        return "strict" if self.strict else "auto"

    def _runtime(self, app: ModuleType | None, root: Path) -> Runtime:
        assert app is not None
        return Runtime(root / "store", workload.POLICY, toolkits=(app.kit,), durability=self.durability_mode)

    def child_run(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> Any:
        assert app is not None
        return self._runtime(app, root).run(app.agent, task, run_id=run_id).output

    def child_recover(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        runtime = self._runtime(app, root)
        report = runtime.recover()
        row = next((row for row in report.runs if row["run"] == run_id), None)
        if row is None:
            said = "recover() found no such run: none of its entries had reached the journal file"
            return {"output": None, "status": "unknown", "said": said, "noticed": False}
        result = runtime.retrieve(run_id)
        noticed = row.get("error_kind") is not None
        said = f"{row['error_kind']}: {row['reason']}" if noticed else f"run {row['from']} -> {row['to']}"
        return {"output": result.output, "status": result.status, "said": said, "noticed": noticed}

    def child_replay(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        report = self._runtime(app, root).replay(run_id)
        said = "replay matched" if report.matched else str((report.divergence or {}).get("message"))
        return {"output": None, "status": "replayed", "said": said, "noticed": not report.matched}


class TracelockStrict(Tracelock):
    key = "tracelock-strict"
    title = 'tracelock (durability="strict")'
    durability = 'durability="strict": every journal entry is fsynced (group commit) before the call returns'
    strict = True


SYSTEM = Tracelock()
STRICT = TracelockStrict()
