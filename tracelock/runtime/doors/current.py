"""The run whose agent code is running: how a door built before the run (an HTTP client
made at import time) finds the pipeline to hand its requests to.

The engine enters the run around the agent's call; an ``async`` agent's tasks inherit it
(a context variable), and so does a thread started with ``contextvars.copy_context``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from tracelock.runtime.pipeline.pipeline import Pipeline

__all__ = ["current_pipeline", "running"]

_CURRENT: contextvars.ContextVar[Pipeline | None] = contextvars.ContextVar("tracelock_pipeline", default=None)


def current_pipeline() -> Pipeline | None:
    """The pipeline of the run whose agent is running here, or None outside a run."""
    return _CURRENT.get()


@contextlib.contextmanager
def running(pipeline: Pipeline) -> Iterator[Pipeline]:
    """Make ``pipeline`` the current run's for the duration of the block."""
    token = _CURRENT.set(pipeline)
    try:
        yield pipeline
    finally:
        _CURRENT.reset(token)
