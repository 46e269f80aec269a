"""Two runs side by side, and the drift of runs of the same input.

The comparison is ``tracelock diff``'s: :func:`run_difference` for the first divergence
(its component, step and field, and the differing leaves as JSON pointers) and
:func:`step_table` for which fields differ at each step. The page adds the recorded values
of both runs next to each other.

The drift view gathers the runs of one agent whose input is canonically the same as a
given run's (among the newest :data:`DRIFT_SCAN_LIMIT` runs) and groups them by
fingerprint: more than one fingerprint for one input is drift, and each other group is
compared with the given run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracelock.core.fingerprint import value_hash
from tracelock.runtime.records import RunRecord, load_run
from tracelock.runtime.replay.compare import run_difference, step_table
from tracelock.storage.backend import Store
from tracelock.storage.errors import PayloadMissingError, PayloadRedactedError, RunNotFoundError
from tracelock.web.data.run import check_run_id
from tracelock.web.errors import UiNotFoundError

__all__ = ["DRIFT_SCAN_LIMIT", "DiffView", "DriftGroup", "DriftView", "load_diff", "load_drift"]

#: The newest runs searched for runs of the same input.
DRIFT_SCAN_LIMIT = 2_000
#: The fields shown for each step, in the order of the comparison.
FIELDS = ("kind", "name", "class", "args", "result", "outcome", "code", "attempts", "timeout_ms", "idempotency_key")


@dataclass
class DiffView:
    """Two runs compared."""

    a: RunRecord
    b: RunRecord
    rows: list[dict[str, Any]]
    first: dict[str, Any] | None
    fingerprints: tuple[Any, Any]

    @property
    def same(self) -> bool:
        return self.fingerprints[0] == self.fingerprints[1] and self.first is None


def _load(store: Store, run_id: str) -> RunRecord:
    check_run_id(run_id)
    try:
        return load_run(store, run_id)
    except RunNotFoundError:
        raise UiNotFoundError(f"no run {run_id!r} in this store", details={"run": run_id}) from None


def load_diff(store: Store, run_a: str, run_b: str) -> DiffView:
    """Runs ``run_a`` and ``run_b`` compared step by step."""
    a, b = _load(store, run_a), _load(store, run_b)
    first = run_difference(a, b)
    rows = []
    for row in step_table(a, b):
        step = row["step"]
        ea, eb = a.effects.get(step), b.effects.get(step)
        cells = [
            {"field": name, "a": None if ea is None else ea.get(name), "b": None if eb is None else eb.get(name)}
            for name in FIELDS
        ]
        is_first = first is not None and first.get("component") == "effects" and first.get("step") == step
        rows.append(
            row
            | {
                "cells": cells,
                "first": is_first,
                "first_field": first.get("field") if is_first and first is not None else None,
            }
        )
    return DiffView(
        a=a,
        b=b,
        rows=rows,
        first=first,
        fingerprints=((a.end or {}).get("fingerprint"), (b.end or {}).get("fingerprint")),
    )


@dataclass
class DriftGroup:
    """Runs of the input that share one fingerprint."""

    fingerprint: str | None
    runs: list[str]
    difference: dict[str, Any] | None = None


@dataclass
class DriftView:
    """Runs of the same agent and input as ``run``, grouped by fingerprint."""

    run: str
    agent: str
    input_hash: str
    groups: list[DriftGroup] = field(default_factory=list)
    searched: int = 0

    @property
    def drifted(self) -> bool:
        return len([group for group in self.groups if group.fingerprint is not None]) > 1


def _start_input(store: Store, run_id: str) -> tuple[bool, Any]:
    """(readable, input) of a run's ``run.start``."""
    entries = store.entries(run_id)
    if not entries or entries[0].kind != "run.start" or entries[0].payload is None:
        return False, None
    try:
        doc = store.get_payload(entries[0].payload)
    except (PayloadRedactedError, PayloadMissingError):
        return False, None
    return (True, doc.get("input")) if isinstance(doc, dict) else (False, None)


def load_drift(store: Store, run_id: str) -> DriftView:
    """The drift view around ``run_id``."""
    base = _load(store, run_id)
    wanted = value_hash(base.input)
    view = DriftView(run=run_id, agent=base.agent, input_hash=wanted)
    agent_of_run = store.run_info(run_id).agent
    candidates = store.runs(limit=DRIFT_SCAN_LIMIT)
    view.searched = len(candidates)
    by_fingerprint: dict[str | None, list[str]] = {}
    for info in candidates:
        if info.agent != agent_of_run or info.status not in ("completed", "failed"):
            continue
        readable, value = (True, base.input) if info.run == run_id else _start_input(store, info.run)
        if not readable or value_hash(value) != wanted:
            continue
        fp = (base.end or {}).get("fingerprint") if info.run == run_id else _fingerprint(store, info.run)
        by_fingerprint.setdefault(fp, []).append(info.run)
    if run_id not in [run for runs in by_fingerprint.values() for run in runs]:
        by_fingerprint.setdefault((base.end or {}).get("fingerprint"), []).append(run_id)
    own = (base.end or {}).get("fingerprint")
    for fp, runs in sorted(by_fingerprint.items(), key=lambda item: (item[0] != own, -len(item[1]))):
        group = DriftGroup(fingerprint=fp, runs=runs)
        if fp != own and runs:
            group.difference = run_difference(base, load_run(store, runs[0]))
        view.groups.append(group)
    return view


def _fingerprint(store: Store, run_id: str) -> str | None:
    entries = store.entries(run_id)
    last = entries[-1] if entries else None
    if last is None or last.kind != "run.end" or last.payload is None:
        return None
    try:
        doc = store.get_payload(last.payload)
    except (PayloadRedactedError, PayloadMissingError):
        return None
    value = doc.get("fingerprint") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None
