"""A fork child's prefix: the steps before its fork point, answered from its parent.

A child cut short (a crash while it copied its prefix, or a suspension) is resumed with
every step before the fork point answered from the parent's record, never live, and copied
into the child's journal if it is not there yet; a copy already there must equal the
parent's step (:func:`child_recording`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tracelock.core.canonical import CanonicalError, dumps
from tracelock.errors import StoreError
from tracelock.runtime.errors import DivergenceError
from tracelock.runtime.pipeline.state import ParentPrefix
from tracelock.runtime.records import RunRecord, load_run
from tracelock.storage.backend import Store

__all__ = ["ForkPrefixError", "child_recording"]


class ForkPrefixError(DivergenceError):
    """A fork child cannot be resumed from its parent: a prefix step copied into its journal
    differs from the parent's, or the parent's record cannot be read. Nothing is run."""

    code = "FORK_PREFIX_INVALID"


def child_recording(store: Store, child: RunRecord) -> tuple[RunRecord, ParentPrefix]:
    """The recording a fork child resumes from: the parent's steps before the fork point
    (what the fork reused), the child's own from the fork point on, and what the child's
    journal already holds of the prefix. Raises :class:`ForkPrefixError` when a copy there
    differs from the parent's step or the parent cannot be read."""
    origin = child.parent or {}
    parent_id, at = origin.get("run"), origin.get("step")
    if not isinstance(parent_id, str) or isinstance(at, bool) or not isinstance(at, int):
        raise ForkPrefixError(_prefix_report(child.run_id, None, f"its start names no valid parent: {origin!r}"))
    try:
        parent = load_run(store, parent_id)
    except StoreError as exc:
        raise ForkPrefixError(_prefix_report(child.run_id, None, f"parent {parent_id} cannot be read: {exc}")) from None
    for step in sorted(step for step in child.effects if step < at):
        problem = _copy_problem(child.effects[step], parent.effects.get(step), parent_id, step)
        if problem is not None:
            raise ForkPrefixError(_prefix_report(child.run_id, step, problem))
    stray = sorted(step for step in child.pending if step < at)
    if stray:
        raise ForkPrefixError(_prefix_report(child.run_id, stray[0], "an unfinished effect before the fork point"))
    recording = dataclasses.replace(
        child,
        effects=_split(parent.effects, child.effects, at),
        pending=_split(parent.pending, child.pending, at),
        gather_orders=_split(parent.gather_orders, child.gather_orders, at),
    )
    copied = frozenset(step for step in child.effects if step < at)
    return recording, ParentPrefix(parent_id, at, copied)


def _split(before: Mapping[int, Any], after: Mapping[int, Any], at: int) -> dict[int, Any]:
    merged = {step: value for step, value in before.items() if step < at}
    merged.update((step, value) for step, value in after.items() if step >= at)
    return merged


def _copy_problem(copy: Mapping[str, Any], original: Mapping[str, Any] | None, parent: str, step: int) -> str | None:
    if original is None:
        return f"the parent {parent} has no result at that step"
    if copy.get("reused_from") != {"run": parent, "step": step}:
        return f"the child's entry is not a copy of step {step} of {parent} (reused_from {copy.get('reused_from')!r})"
    try:
        same = _comparable(copy) == _comparable(original)
    except CanonicalError:
        same = False
    return None if same else f"the copy differs from step {step} of the parent {parent}"


def _comparable(doc: Mapping[str, Any]) -> bytes:
    # Absent and null members mean the same in an effect document.
    return dumps({key: value for key, value in doc.items() if value is not None and key != "reused_from"})


def _prefix_report(child: str, step: int | None, problem: str) -> dict[str, Any]:
    where = f" at step {step}" if step is not None else ""
    return {
        "message": f"fork child {child} cannot be resumed from its parent{where}: {problem}",
        "step": step,
        "kind": "invalid_fork_prefix",
        "child": child,
    }
