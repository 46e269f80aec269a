"""The replay gate: replay every recorded run of a store against the current code.

Run it in CI before deploying a code change: a change that would make any recorded run
take a different path fails the gate, with the run, the step and the differing fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracelock.runtime.errors import AgentDefinitionError
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.replay import replay_record
from tracelock.runtime.runs.lifecycle import TERMINAL_STATES

if TYPE_CHECKING:
    from tracelock.runtime.runs.engine import Engine

__all__ = ["GateReport", "replay_all"]


@dataclass
class GateReport:
    checked: int = 0
    matched: int = 0
    diverged: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    #: Runs recorded under another engine or environment than the replaying one
    #: (``{"run", "agent", "engine": [differences]}``): information, or a failure under
    #: ``replay --all --strict-environment``.
    environment: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """A run the current code cannot even load counts against the gate, like a divergence."""
        return not self.diverged and not self.skipped

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "matched": self.matched,
            "diverged": self.diverged,
            "skipped": self.skipped,
            "environment": self.environment,
        }


def replay_all(
    runtime: Engine,
    *,
    since_ms: int | None = None,
    agent: Callable[..., Any] | str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GateReport:
    """Replay every ended run (newest first) whose start is at or after ``since_ms``."""
    report = GateReport()
    runs = [
        info
        for info in runtime.store.runs()
        if info.status in TERMINAL_STATES and (since_ms is None or info.started_ts >= since_ms)
    ]
    for position, info in enumerate(runs):
        record = load_run(runtime.store, info.run, provenance=False)
        try:
            replay = replay_record(runtime, record, agent)
        except AgentDefinitionError as exc:
            report.skipped.append({"run": info.run, "agent": info.agent, "reason": exc.message})
            continue
        report.checked += 1
        if replay.environment_changed and replay.provenance is not None:
            report.environment.append({"run": info.run, "agent": info.agent, "engine": replay.provenance["engine"]})
        if replay.matched:
            report.matched += 1
        else:
            report.diverged.append(
                {"run": info.run, "agent": info.agent, "divergence": replay.divergence, "provenance": replay.provenance}
            )
        if progress is not None:
            progress(position + 1, len(runs))
    return report
