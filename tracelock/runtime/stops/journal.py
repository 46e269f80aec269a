"""Setting and lifting emergency stops in a store, and folding them into a runtime's
:class:`StopBoard` (see :mod:`tracelock.runtime.stops.board`).

A stop is a durable ``stop.set`` entry of the ``tracelock:admin`` chain, its lifting a
``stop.lift`` entry; their payloads are ``{"v": 1, "tool", "class", "by", "reason"}``
(exactly one of ``tool`` and ``class`` is non-null). A runtime folds the admin chain into
its board when it opens, when it resumes a run, and (paced by :class:`StopWatch`) after a
run's start and before each idempotent or irreversible step, when the chain has grown (one
index lookup). A stop set through the runtime itself reaches its runs in flight at their
next step; one written by another process, at their next step that can change the world
after the runtime has looked again.
"""

from __future__ import annotations

import time
from typing import Any

from tracelock.core.entry import ADMIN_RUN
from tracelock.runtime.admin_feed import admin_entries_after
from tracelock.runtime.errors import RunStateError
from tracelock.runtime.stops.board import LIFT_KIND, STOP_KIND, Stop, StopBoard, stop_target
from tracelock.storage.backend import Store

__all__ = ["StopNotFoundError", "StopWatch", "refresh_stops", "set_stop", "lift_stop"]

#: How often (seconds) a runtime looks for stops written by another process before a run
#: starts: looking costs an index lookup, a tenth of a small run's durable append.
REFRESH_INTERVAL_S = 0.25


class StopNotFoundError(RunStateError):
    """A stop was to be lifted that is not in force."""

    code = "STOP_NOT_FOUND"


def refresh_stops(store: Store, board: StopBoard) -> None:
    """Fold the admin chain's entries the board has not seen yet into it."""
    for entry in admin_entries_after(store, board.seen):
        doc: Any = None
        if entry.kind in (STOP_KIND, LIFT_KIND) and entry.payload is not None:
            doc = store.get_payload(entry.payload)
        board.apply(entry.seq, entry.kind, doc if isinstance(doc, dict) else {})


class StopWatch:
    """When to look at the admin chain again before a run starts: at most every
    :data:`REFRESH_INTERVAL_S` seconds of the process's monotonic clock. It decides only
    when a cache is refreshed; what a step is decided by (the stop) is journaled with it."""

    def __init__(self, interval_s: float = REFRESH_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last = -interval_s

    def due(self) -> bool:
        now = time.monotonic()  # tracelock: allow TL-CLOCK-001 -- paces a cache refresh; the stop that decides a step is journaled in it
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return True


def _document(tool: str | None, side_effect: str | None, by: str, reason: str) -> dict[str, Any]:
    if not by:
        raise RunStateError("a stop must name who decided it (by=...)")
    if not reason:
        raise RunStateError("a stop must say why (reason=...)")
    try:
        target = stop_target(tool, side_effect)
    except ValueError as exc:
        raise RunStateError(str(exc)) from None
    return {"v": 1, **target, "by": by, "reason": reason}


def set_stop(store: Store, board: StopBoard, *, tool: str | None = None, side_effect: str | None = None,
             by: str, reason: str) -> Stop:
    """Prohibit ``tool`` (or every tool of class ``side_effect``) in every run: a durable
    ``stop.set`` admin entry, folded into ``board`` at once."""
    doc = _document(tool, side_effect, by, reason)
    refresh_stops(store, board)
    entry = store.append(ADMIN_RUN, STOP_KIND, payload=doc, durable=True)
    refresh_stops(store, board)
    return Stop(tool, side_effect, entry.seq, by, reason)


def lift_stop(store: Store, board: StopBoard, *, tool: str | None = None, side_effect: str | None = None,
              by: str, reason: str) -> Stop:
    """Lift the stop in force on ``tool`` (or on class ``side_effect``): a durable
    ``stop.lift`` admin entry. Returns the stop it lifted."""
    doc = _document(tool, side_effect, by, reason)
    refresh_stops(store, board)
    lifted = next(
        (stop for stop in board.stops() if stop.tool == tool and stop.side_effect == side_effect), None
    )
    if lifted is None:
        what = f"tool {tool}" if tool is not None else f"class {side_effect}"
        raise StopNotFoundError(f"no stop is in force on {what}", details={"tool": tool, "class": side_effect})
    store.append(ADMIN_RUN, LIFT_KIND, payload=doc, durable=True)
    refresh_stops(store, board)
    return lifted
