"""The run lifecycle: states and the only legal transitions between them.

Every transition is journaled (``run.start`` enters ``running``; ``run.state`` entries
record ``awaiting_approval``, ``blocked`` and the return to ``running``; ``run.end``
records ``completed``, ``failed`` or ``aborted``). An illegal transition is a bug: it
raises, it is never written.
"""

from __future__ import annotations

from tracelock.runtime.errors import LifecycleError

__all__ = ["STATES", "TERMINAL_STATES", "check_transition"]

STATES = ("created", "running", "awaiting_approval", "blocked", "completed", "failed", "aborted")
TERMINAL_STATES = frozenset({"completed", "failed", "aborted"})

_LEGAL: dict[str, frozenset[str]] = {
    "created": frozenset({"running", "aborted"}),
    "running": frozenset({"awaiting_approval", "blocked", "completed", "failed", "aborted"}),
    "awaiting_approval": frozenset({"running", "aborted"}),
    "blocked": frozenset({"running", "aborted"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "aborted": frozenset(),
}


def check_transition(current: str, new: str) -> None:
    """Raise :class:`LifecycleError` unless ``current -> new`` is legal."""
    if current not in _LEGAL or new not in _LEGAL:
        raise LifecycleError(f"unknown run state in transition {current!r} -> {new!r}")
    if new not in _LEGAL[current]:
        raise LifecycleError(f"illegal run state transition {current} -> {new}")
