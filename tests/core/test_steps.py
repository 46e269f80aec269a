"""The core step rule (``tracelock.core.steps``, docs/spec.md 3.9) on hand-built chains: what
the runtime writes passes (gathered steps in completion order, intents and results, an
aborted run stopped inside a gather, steps it cannot see), and every way to break the
sequence is refused with ``JOURNAL_STEP_SEQUENCE_BROKEN`` at the entry that breaks it."""

from __future__ import annotations

from typing import Any

import pytest

from tracelock.core.entry import Entry, build_next
from tracelock.core.steps import STEP_SEQUENCE_BROKEN, StepChecker, run_step_issue, step_number

RUN = "r1"


def chain(*items: tuple[str, Any], run: str = RUN, status: str | None = "completed") -> list[tuple[Entry, Any]]:
    """A run's entries with their payload documents: ``run.start``, ``items`` (kind, document:
    an int is ``{"step": n}``), then ``run.end`` with ``status`` (None: the run is open)."""
    kinds: list[tuple[str, Any, dict[str, Any] | None]] = [("run.start", {"agent": "a"}, {"agent": "a", "status": "running"})]
    for kind, doc in items:
        kinds.append((kind, {"step": doc} if isinstance(doc, int) else doc, None))
    if status is not None:
        kinds.append(("run.end", {"outcome": "SUCCESS"}, {"status": status}))
    head: tuple[int, str] | None = None
    out = []
    for seq, (kind, doc, meta) in enumerate(kinds):
        entry = build_next(seq, run, head, kind, "0" * 64, 1000 + seq, meta)
        head = (entry.i, entry.hash)
        out.append((entry, doc))
    return out


FX, IN, RE = "effect", "effect.intent", "effect.result"


@pytest.mark.parametrize(
    "items",
    [
        [],
        [(FX, 0), (FX, 1), (IN, 2), (RE, 2), (FX, 3)],
        # A gather's members are recorded as they complete; its order entry follows them.
        [(FX, 0), (FX, 2), (FX, 1), ("gather.order", {"first": 1, "steps": [2, 1]}), (FX, 3)],
        # Gathered intents interleave with each other's results.
        [(IN, 1), (IN, 0), (RE, 0), (FX, 2), (RE, 1)],
        # A run that waited for approval, was approved and resumed: the step is recorded once.
        [(FX, 0), ("run.state", {"step": 1, "reason": "approval"}), ("approval", {"step": 1}),
         ("run.state", {"step": 1, "reason": "resumed"}), (IN, 1), (RE, 1)],
        # A blocked irreversible step resolved by an operator: its one result is the operator's.
        [(IN, 0), ("run.state", {"step": 0}), (RE, {"step": 0, "operator": {"by": "op"}}), (FX, 1)],
        # An intent that no result completes (the run ended while it was pending).
        [(FX, 0), (IN, 1)],
        # A fork child: the parent's steps copied, then its own.
        [(FX, {"step": 0, "reused_from": {"run": "p", "step": 0}}), (FX, 1)],
    ],
)
def test_what_the_runtime_writes_passes(items: list[tuple[str, Any]]) -> None:
    assert run_step_issue(chain(*items)) is None


def test_an_aborted_run_may_stop_inside_a_gather() -> None:
    # Step 1 of a gather waited for approval; the run was aborted before it ran.
    items = [(FX, 0), (FX, 2), ("run.state", {"step": 1})]
    assert run_step_issue(chain(*items, status="aborted")) is None
    issue = run_step_issue(chain(*items, status="failed"))
    assert issue is not None and issue.code == STEP_SEQUENCE_BROKEN and "not step 1" in issue.message


def test_an_open_run_is_judged_on_what_it_recorded_so_far() -> None:
    # A crash inside a gather: step 1 not recorded yet, recovery will run it.
    assert run_step_issue(chain((FX, 0), (FX, 2), status=None)) is None


@pytest.mark.parametrize(
    ("items", "at", "said"),
    [
        ([(FX, 0), (IN, 1), (RE, 1), (IN, 1), (RE, 1)], 4, "step 1 is recorded twice: a second effect.intent"),
        ([(FX, 0), (IN, 1), (IN, 1), (RE, 1), (RE, 1)], 3, "step 1 is recorded twice: a second effect.intent"),
        ([(FX, 0), (IN, 1), (RE, 1), (RE, 1)], 4, "step 1 is recorded twice: a second effect.result"),
        ([(FX, 0), (FX, 0)], 2, "step 0 is recorded twice: a second effect at seq 2, after its effect at seq 1"),
        ([(FX, 0), (IN, 0)], 2, "step 0 is recorded twice"),
        ([(IN, 0), (RE, 0), (FX, 0)], 3, "step 0 is recorded twice"),
        ([(FX, 0), (RE, 0)], 2, "step 0 is recorded twice: an effect.result at seq 2, after its effect at seq 1"),
        ([(FX, 0), (RE, 1)], 2, "the effect.result of step 1 at seq 2 follows no effect.intent"),
        ([(RE, 0), (IN, 0)], 1, "follows no effect.intent"),
        ([(FX, 0), (FX, 2)], 3, "steps up to 2 recorded but not step 1"),
        ([(FX, 1), (FX, 2)], 3, "but not step 0"),
        ([(IN, 0), (RE, 0), (FX, 5)], 4, "but not step 1"),
    ],
)
def test_every_break_of_the_sequence_is_refused(items: list[tuple[str, Any]], at: int, said: str) -> None:
    issue = run_step_issue(chain(*items))
    assert issue is not None, items
    assert issue.code == STEP_SEQUENCE_BROKEN and issue.run == RUN and issue.seq == at, issue
    assert said in issue.message, issue.message


def test_steps_it_cannot_see_are_not_held_against_the_run() -> None:
    # A redacted or missing payload (None), a step hidden by a field redaction, a payload
    # that names no step: such an entry may be any step, so completeness and a result's
    # intent are not judged, but the steps it does see are still recorded once each.
    for unseen in (None, {"args": 1}, {"step": {"__tracelock__": "redacted", "hash": "0" * 64}}, {"step": -1}):
        assert run_step_issue(chain((FX, 0), (IN, unseen), (RE, 1), (FX, 3))) is None
        issue = run_step_issue(chain((FX, 0), (IN, unseen), (FX, 0)))
        assert issue is not None and "step 0 is recorded twice" in issue.message


def test_a_result_is_judged_before_an_unseen_entry_that_follows_it() -> None:
    issue = run_step_issue(chain((FX, 0), (RE, 1), (IN, None), (FX, 2)))
    assert issue is not None and issue.seq == 2 and "follows no effect.intent" in issue.message


@pytest.mark.parametrize(
    ("first", "meta"),
    [("effect", None), ("run.start", None), ("run.start", {"status": "running"}), ("run.start", {"agent": 1})],
)
def test_chains_that_are_not_runs_are_left_alone(first: str, meta: dict[str, Any] | None) -> None:
    # The runtime starts every run with a run.start whose meta names the agent; other chains
    # are written by programs through the store API, whose payloads mean what they like.
    checker = StepChecker()
    head: tuple[int, str] | None = None
    for seq, kind in enumerate([first, "effect", "effect", "effect.result", "run.end"]):
        entry = build_next(seq, "synthetic", head, kind, "0" * 64, 1, meta if seq == 0 else None)
        head = (entry.i, entry.hash)
        assert not checker.wants_payload(entry)
        assert checker.check(entry, {"step": 0}) is None


def test_runs_are_checked_apart_and_forgotten_at_their_end() -> None:
    checker = StepChecker()
    first, second = chain((FX, 0), run="a"), chain((FX, 0), (FX, 1), run="b")
    for entry, doc in [first[0], second[0], first[1], second[1], second[2], first[2], second[3]]:
        assert checker.check(entry, doc) is None
    assert checker._runs == {}


def test_the_step_a_document_names() -> None:
    assert step_number({"step": 3}) == 3
    assert step_number({"step": 0}) == 0
    for doc in (None, [], {"step": True}, {"step": -1}, {"step": 1.0}, {"step": "1"}, {}):
        assert step_number(doc) is None
