"""The step rule of a run: its steps form one sequence (docs/spec.md 3.9).

The chain rules (:class:`tracelock.core.entry.ChainChecker`) prove that a run's entries were
not changed, inserted or removed; they cannot tell a run that two callers executed at once,
since each caller appends a valid continuation of the chain. This rule can: every entry that
records a step (``effect``, ``effect.intent``, ``effect.result``) names the step number in
its payload (``step``), and a run executed once records each number once:

1. a step is recorded once: by one ``effect`` entry, or by one ``effect.intent`` and at most
   one ``effect.result`` of the same step after it; no other step entry names the step, and
   an ``effect.result`` follows the ``effect.intent`` of its step;
2. a run that ends (``run.end``), unless it was aborted, has recorded steps ``0, 1, ..., n-1``
   for some ``n``: no number is skipped.

Gathered steps complete, and are recorded, in any order, which is why rule 2 is judged at the
run's end rather than entry by entry. The rule applies to runs: the chains whose first entry
is a ``run.start`` whose ``meta`` names the agent, as every run the runtime starts does
(docs/spec.md 3.6). Other chains of a store (the admin chain, chains that programs write
through the store API) are not runs of the runtime. A step entry whose step the verifier
cannot see (its payload redacted or missing, ``step`` hidden by a field redaction, or a
payload that is not an object with a non-negative integer ``step``) is judged on what it can
see: the steps it does see are still recorded once each, but a result without a visible
intent, and the run's completeness, are not judged.

This module is pure: callers read the payloads and hand over the documents.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from tracelock.core.entry import ChainIssue, Entry

__all__ = [
    "STEP_KINDS",
    "STEP_SEQUENCE_BROKEN",
    "RunSteps",
    "StepChecker",
    "opens_run",
    "run_step_issue",
    "step_number",
]

#: The issue code of a run that breaks the step rule.
STEP_SEQUENCE_BROKEN: Final = "JOURNAL_STEP_SEQUENCE_BROKEN"

START_KIND: Final = "run.start"
EFFECT_KIND: Final = "effect"
INTENT_KIND: Final = "effect.intent"
RESULT_KIND: Final = "effect.result"
END_KIND: Final = "run.end"
#: The entry kinds that record a step.
STEP_KINDS: Final = frozenset({EFFECT_KIND, INTENT_KIND, RESULT_KIND})
#: A run ended with this status stopped wherever it was (a gather's member may be missing).
ABORTED: Final = "aborted"


# What each step number has been recorded by so far.
_EFFECT, _INTENT, _RESULT = 0, 1, 2


def step_number(doc: Any) -> int | None:
    """The step a payload document names: its ``step`` member when that is a non-negative
    integer (not a boolean); None otherwise."""
    if not isinstance(doc, dict):
        return None
    step = doc.get("step")
    if type(step) is not int or step < 0:
        return None
    return step


def opens_run(i: int, kind: str, meta: dict[str, Any] | None) -> bool:
    """Whether an entry (its index ``i``, ``kind`` and ``meta``) starts a run the step rule
    applies to: a ``run.start`` at index 0 whose ``meta.agent`` is a string."""
    return i == 0 and kind == START_KIND and isinstance((meta or {}).get("agent"), str)


class RunSteps:
    """The step rule over one run, fed its step entries in chain order. Memory: one small
    tuple per step of the run."""

    __slots__ = ("blind", "run", "steps")

    def __init__(self, run: str) -> None:
        self.run = run
        # step -> (what recorded it last: _EFFECT, _INTENT or _RESULT; seq of its first entry)
        self.steps: dict[int, tuple[int, int]] = {}
        # Whether an entry of the run names a step the verifier cannot read.
        self.blind = False

    def add(self, seq: int, kind: str, step: int | None) -> ChainIssue | None:
        """Take the entry at ``seq`` of kind ``kind`` (one of :data:`STEP_KINDS`) naming
        ``step`` (:func:`step_number` of its payload document; None when the payload cannot
        be read or names no step); return the rule it breaks, or None."""
        if step is None:
            self.blind = True
            return None
        known = self.steps.get(step)
        if kind == RESULT_KIND:
            if known is None:
                if self.blind:
                    return None  # its intent may be an entry whose payload cannot be read
                return self._issue(seq, f"the effect.result of step {step} at seq {seq} follows no effect.intent of that step")
            if known[0] != _INTENT:
                return self._twice(seq, kind, step, known)
            self.steps[step] = (_RESULT, known[1])
            return None
        if known is not None:
            return self._twice(seq, kind, step, known)
        self.steps[step] = (_EFFECT if kind == EFFECT_KIND else _INTENT, seq)
        return None

    def end(self, seq: int, status: str | None) -> ChainIssue | None:
        """The run's ``run.end`` at ``seq`` with ``meta.status`` ``status``: every step number
        below the number of steps is recorded (an aborted run is not judged)."""
        if status == ABORTED or self.blind:
            return None
        count = len(self.steps)
        # Distinct non-negative numbers are 0 .. count-1 exactly when the highest is count-1.
        if not count or (highest := max(self.steps)) < count:
            return None
        missing = next(step for step in range(count) if step not in self.steps)
        return self._issue(
            seq,
            f"it ended ({status or 'no status'}) at seq {seq} with steps up to {highest} recorded "
            f"but not step {missing}: a run's steps are numbered 0, 1, 2, ... without gaps",
        )

    def _twice(self, seq: int, kind: str, step: int, known: tuple[int, int]) -> ChainIssue:
        was, first = known
        first_kind = EFFECT_KIND if was == _EFFECT else INTENT_KIND
        if was == _RESULT and kind == RESULT_KIND:
            what = f"a second effect.result at seq {seq}, after its effect.intent at seq {first} and its result"
        elif first_kind == kind:
            what = f"a second {kind} at seq {seq}, after its {first_kind} at seq {first}"
        else:
            what = f"an {kind} at seq {seq}, after its {first_kind} at seq {first}"
        return self._issue(
            seq,
            f"step {step} is recorded twice: {what} (two callers executed the run at once, or "
            "entries were appended to it out of turn)",
        )

    def _issue(self, seq: int, message: str) -> ChainIssue:
        return ChainIssue(STEP_SEQUENCE_BROKEN, seq, self.run, f"run {self.run}: {message}")


class StepChecker:
    """The step rule over every run of a journal, fed its entries in journal order (each
    run's in chain order). A run's state is dropped at its ``run.end``."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[str, RunSteps] = {}

    def wants_payload(self, entry: Entry) -> bool:
        """Whether :meth:`check` needs the payload of ``entry`` (a step entry of a run)."""
        return entry.kind in STEP_KINDS and entry.run in self._runs

    def check(self, entry: Entry, doc: Any = None) -> ChainIssue | None:
        """Advance over ``entry`` (which passed the chain rules), ``doc`` being its payload
        document, None when it cannot be read (needed only when :meth:`wants_payload`)."""
        if opens_run(entry.i, entry.kind, entry.meta):
            self._runs[entry.run] = RunSteps(entry.run)
            return None
        steps = self._runs.get(entry.run)
        if steps is None:
            return None
        if entry.kind in STEP_KINDS:
            return steps.add(entry.seq, entry.kind, step_number(doc))
        if entry.kind == END_KIND:
            del self._runs[entry.run]
            status = (entry.meta or {}).get("status")
            return steps.end(entry.seq, status if isinstance(status, str) else None)
        return None


def run_step_issue(entries: Iterable[tuple[Entry, Any]]) -> ChainIssue | None:
    """The first step rule that one run's ``(entry, payload document)`` pairs, in chain order,
    break (a document is None when its payload cannot be read); None if none."""
    checker = StepChecker()
    for entry, doc in entries:
        issue = checker.check(entry, doc)
        if issue is not None:
            return issue
    return None
