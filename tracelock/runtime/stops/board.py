"""Emergency stops: an operator's prohibition of a tool, or of every irreversible tool,
across every run of a store, including runs already under way.

A stop and its lifting are entries of the store's ``tracelock:admin`` chain (kinds
``stop.set`` and ``stop.lift``, written durably by :mod:`tracelock.runtime.stops.journal`);
this module holds what they add up to, the :class:`StopBoard` a runtime's pipelines
consult at AUTHORIZE. A step that a stop covers ends ``DENIED [TOOL_STOPPED]``, with the
stop's admin entry (``seq``, ``by``, ``reason``) in the step's error details: the decision
is in the run's own journal, so replay and resume answer it from the record.

The board is a pure fold of those entries: replaying the admin chain in ``seq`` order
rebuilds it exactly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tracelock.runtime.outcomes import Outcome, StepFailure, register_code

__all__ = ["STOP_KIND", "LIFT_KIND", "TOOL_STOPPED", "Stop", "StopBoard", "stop_target"]

STOP_KIND = "stop.set"
LIFT_KIND = "stop.lift"

TOOL_STOPPED = register_code(
    "TOOL_STOPPED",
    Outcome.DENIED,
    "an operator's emergency stop (`tracelock stop`) prohibits this tool, or every tool of its side-effect class",
)

#: The side-effect classes a stop may name instead of a tool.
STOPPABLE_CLASSES = ("irreversible", "idempotent")


def stop_target(tool: str | None, side_effect: str | None) -> dict[str, str | None]:
    """The target member of a stop document: exactly one of a tool name and a class."""
    if (tool is None) == (side_effect is None):
        raise ValueError("a stop names a tool or a side-effect class, not both, not neither")
    if side_effect is not None and side_effect not in STOPPABLE_CLASSES:
        raise ValueError(f"a stop's class is one of {', '.join(STOPPABLE_CLASSES)}")
    return {"tool": tool, "class": side_effect}


@dataclass(frozen=True)
class Stop:
    """One stop in force: its target, and the admin entry that set it."""

    tool: str | None
    side_effect: str | None
    seq: int
    by: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "class": self.side_effect, "seq": self.seq, "by": self.by, "reason": self.reason}

    @property
    def target(self) -> str:
        return f"tool {self.tool}" if self.tool is not None else f"every {self.side_effect} tool"


class StopBoard:
    """The stops in force, folded from the admin chain's stop entries (:meth:`apply`).

    Shared by every run of a runtime: a stop applied while a run is under way reaches its
    next step. ``active`` is checked first, so a runtime without stops pays one attribute
    test per step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_tool: dict[str, Stop] = {}
        self._by_class: dict[str, Stop] = {}
        self.active = False
        #: The ``seq`` of the last admin entry folded in (-1: none).
        self.seen = -1
        #: Set by the runtime: looks for stops written since (paced; see :meth:`poll`).
        self.refresher: Callable[[], None] | None = None

    def poll(self) -> None:
        """Give the runtime a chance to fold stops written by another process in, before
        a step that can change the world is authorized (the runtime paces the lookups)."""
        refresher = self.refresher
        if refresher is not None:
            refresher()

    def apply(self, seq: int, kind: str, doc: Mapping[str, Any]) -> None:
        """Fold one admin entry in (entries of other kinds, and entries already folded in,
        are ignored)."""
        with self._lock:
            if seq <= self.seen:
                return
            self.seen = seq
            if kind not in (STOP_KIND, LIFT_KIND) or not isinstance(doc, Mapping):
                return
            tool, side_effect = doc.get("tool"), doc.get("class")
            table, key = (self._by_tool, tool) if isinstance(tool, str) else (self._by_class, side_effect)
            if not isinstance(key, str):
                return
            if kind == STOP_KIND:
                table[key] = Stop(
                    tool if isinstance(tool, str) else None,
                    side_effect if isinstance(side_effect, str) and not isinstance(tool, str) else None,
                    seq,
                    str(doc.get("by", "")),
                    str(doc.get("reason", "")),
                )
            else:
                table.pop(key, None)
            self.active = bool(self._by_tool or self._by_class)

    def stop_for(self, tool: str, side_effect: str) -> Stop | None:
        """The stop that prohibits ``tool`` (of class ``side_effect``), or None."""
        if not self.active:
            return None
        with self._lock:
            return self._by_tool.get(tool) or self._by_class.get(side_effect)

    def check(self, tool: str, side_effect: str) -> None:
        """Raise the step's DENIED failure when a stop covers it."""
        stop = self.stop_for(tool, side_effect)
        if stop is not None:
            raise StepFailure(
                TOOL_STOPPED,
                f"{tool}: stopped by {stop.by or 'an operator'} ({stop.target}): {stop.reason}",
                stop=stop.to_dict(),
            )

    def stops(self) -> list[Stop]:
        """The stops in force, tools by name first, then classes."""
        with self._lock:
            return [self._by_tool[name] for name in sorted(self._by_tool)] + [
                self._by_class[name] for name in sorted(self._by_class)
            ]
