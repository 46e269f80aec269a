"""The Runtime: the facade an application uses. It runs agents (:class:`Engine`) and
answers for recorded runs: replays them and recovers them after a crash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracelock.runtime.replay.replay import ReplayReport, replay_run
from tracelock.runtime.runs.engine import (
    AsyncRunContext,
    Engine,
    RunResult,
    resolve_agent_path,
    result_from_record,
)
from tracelock.runtime.runs.recovery import RecoveryReport, abort_run, recover_runs, resolve_step

__all__ = ["Runtime", "RunResult", "AsyncRunContext", "resolve_agent_path", "result_from_record"]


class Runtime(Engine):
    """Runs agents deterministically against a store and a policy.

    ``store`` is a store or a path (default ``./.tracelock``); ``policy`` a :class:`Policy`,
    a path to a policy file, a mapping, or None for the empty policy (which denies every
    tool and LLM call). ``clock`` (ms), ``sleep`` and ``ids`` are injected; their defaults
    read the real world.
    """

    def replay(self, run_id: str, agent: Callable[..., Any] | str | None = None) -> ReplayReport:
        """Re-execute the agent's current code against the recorded run (writes nothing)."""
        return replay_run(self, run_id, agent)

    def recover(self, *, progress: Callable[[int, int], None] | None = None) -> RecoveryReport:
        """Continue every unfinished run that needs no human (see :mod:`recovery`)."""
        return recover_runs(self, progress=progress)

    def resolve(
        self,
        run_id: str,
        step: int,
        *,
        by: str,
        reason: str = "",
        result: Any = None,
        failed: str | None = None,
        retry: bool = False,
    ) -> None:
        """Say what really happened at a blocked irreversible step, or allow one retry."""
        resolve_step(self, run_id, step, by=by, reason=reason, result=result, failed=failed, retry=retry)

    def abort(self, run_id: str, *, by: str, reason: str) -> None:
        """End an unfinished run as ``aborted``."""
        abort_run(self, run_id, by=by, reason=reason)
