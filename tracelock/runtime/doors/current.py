"""The run whose agent code is running: how a door built before the run (an HTTP client
made at import time) finds the pipeline to hand its requests to.

The engine enters the run around the agent's call; an ``async`` agent's tasks inherit it
(a context variable), and so does a thread started with ``contextvars.copy_context``.
"""

from __future__ import annotations

import contextvars

from tracelock.runtime.pipeline.pipeline import Pipeline

__all__ = ["current_pipeline", "running"]

_CURRENT: contextvars.ContextVar[Pipeline | None] = contextvars.ContextVar("tracelock_pipeline", default=None)


def current_pipeline() -> Pipeline | None:
    """The pipeline of the run whose agent is running here, or None outside a run."""
    return _CURRENT.get()


class running:  # lower case: used as a function, ``with running(pipeline):``
    """Make ``pipeline`` the current run's for the duration of the block (a plain class:
    it is entered once per run, where a generator-based context manager costs more)."""

    __slots__ = ("_pipeline", "_token")

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    def __enter__(self) -> Pipeline:
        self._token = _CURRENT.set(self._pipeline)
        return self._pipeline

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)
        self._pipeline.end_stream()
