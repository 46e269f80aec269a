"""Drift: run the same input N times live, in isolated runs, and compare fingerprints.

Each run goes to its own fresh store (so no run can see another's state). On a difference
the report names the first component and step that differ and the kind of drift.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelock.runtime.compare import first_difference, projection_of
from tracelock.runtime.records import load_run
from tracelock.storage.directory import DirectoryStore

__all__ = ["DriftReport", "detect_drift"]


@dataclass
class DriftReport:
    runs: int
    fingerprints: list[str | None]
    drift: dict[str, Any] | None

    @property
    def drifted(self) -> bool:
        return self.drift is not None

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "fingerprints": self.fingerprints, "drifted": self.drifted, "drift": self.drift}


def detect_drift(
    make_runtime: Callable[[DirectoryStore], Any],
    agent: Callable[..., Any],
    input: Any,
    n: int,
    *,
    progress: Callable[[int, str | None], None] | None = None,
) -> DriftReport:
    """``make_runtime(store)`` builds a runtime over a fresh store for each run."""
    if n < 2:
        raise ValueError("drift needs at least 2 runs")
    fingerprints: list[str | None] = []
    first_projection: dict[str, Any] | None = None
    drift: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="tracelock-drift-") as tmp:
        for number in range(n):
            store = DirectoryStore(Path(tmp) / f"run-{number}")
            runtime = make_runtime(store)
            try:
                result = runtime.run(agent, input)
                projection = projection_of(load_run(store, result.run_id))
            finally:
                runtime.close()
                store.close()
            fingerprints.append(result.fingerprint)
            if progress is not None:
                progress(number + 1, result.fingerprint)
            if first_projection is None:
                first_projection = projection
            elif drift is None and result.fingerprint != fingerprints[0]:
                difference = first_difference(first_projection, projection)
                drift = {"run": number, **(difference or {"component": "unknown", "kind": "unknown"})}
    return DriftReport(n, fingerprints, drift)
