"""The observer hook's helpers (:class:`~tracelock.runtime.pipeline.state.RunObserver`:
what a run tells an onlooker such as tracing, never what it decides)."""

from __future__ import annotations

from tracelock.runtime.pipeline.state import RunObserver, RunState

__all__ = ["RunObserver", "run_mode"]


def run_mode(run: RunState) -> str:
    """``record``, ``resume``, ``fork`` or ``replay``: how ``run`` relates to its recording."""
    if run.replay_only:
        return "replay"
    if run.recording is None:
        return "record"
    return "fork" if run.fork_before is not None else "resume"
