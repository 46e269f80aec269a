"""What every compared system provides to the harness.

A system is timed in a process of its own (``bench.peers.worker`` calls :meth:`System.open`,
:meth:`System.run` and :meth:`System.close` there), and tested for crashes and code changes
in child processes (:meth:`System.child_run`, :meth:`System.child_recover`,
:meth:`System.child_replay`), which receive the system's app module as imported from a scratch directory (see ``apps/``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from tracelock.storage.directory.disk_usage import allocated_bytes

#: Set by the harness to run a DBOS test with the application version pinned in its config
#: (rather than computed from the workflows' source, DBOS's default).
DBOS_PINNED_VERSION_ENV = "BENCH_DBOS_APP_VERSION"


class System:
    #: Short name, used on the command line and as the child's argument.
    key = ""
    #: The name shown in the report.
    title = ""
    #: The distributions whose versions the report shows (the first one must be installed).
    distributions: tuple[str, ...] = ()
    #: The module under ``bench/peers/apps/`` holding this system's workload, or None.
    app_module: str | None = None
    #: How a run is made durable, for the report.
    durability = ""
    #: The mechanism used to recover an interrupted run, for the report.
    recovery = ""
    #: The mechanism used to re-drive a completed run under changed code, for the report.
    replay = ""
    #: Where, under the root given to :meth:`open`, the store's parts are (for the breakdown
    #: of bytes stored per run).
    store_subdir = ""

    def version(self) -> str:
        parts = []
        for name in self.distributions:
            try:
                parts.append(f"{name} {importlib.metadata.version(name)}")
            except importlib.metadata.PackageNotFoundError:
                parts.append(f"{name} (not installed)")
        return ", ".join(parts)

    # -- timed runs, in the harness's process ------------------------------------------------
    def open(self, root: Path) -> None:
        """Set up a fresh store under ``root`` (an empty directory)."""

    def run(self, number: int) -> Any:
        """One durable run of the workload on ``bench.workload.task(number)``; returns its output
        once the run is durable."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store, so that its size on disk is final."""

    def payload_bytes(self, store: Path) -> int | None:
        """The bytes of the unique payloads in the closed store (their canonical JSON), when
        the system can tell: what "bytes stored beyond the payloads" is measured against."""
        return None

    # -- crash and divergence tests, in child processes ----------------------------------
    def child_run(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> Any:
        """Run the workload once as ``run_id`` (the crash test kills it in its third step)."""
        raise NotImplementedError

    def child_recover(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        """Recover the interrupted run with the system's own mechanism. Returns ``output``
        (None if the run did not complete), ``status``, ``said`` (what the system reported)
        and ``noticed`` (True if it reported that the code no longer matches the record)."""
        raise NotImplementedError

    def child_replay(self, app: ModuleType | None, root: Path, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
        """Re-drive the completed run ``run_id`` under the current code with the system's own
        mechanism; same keys as :meth:`child_recover`."""
        raise NotImplementedError


def tree_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (the store's size on disk): each file's size, or
    what it has allocated when that is less (a sparse file: tracelock's ``journal.log`` keeps
    its size after its sealed blocks are freed, docs/spec.md 3.8)."""
    files = [path] if path.is_file() else [item for item in path.rglob("*") if item.is_file()]
    return sum(allocated_bytes(item) for item in files)
