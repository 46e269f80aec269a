"""Readable one-line descriptions of a run's entries (shared by ``show`` and ``demo``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tracelock.core.entry import Entry


def describe_step(doc: dict[str, Any]) -> str:
    """``step 3 proposal issue_refund DENIED [POLICY_ARGUMENT_REJECTED] in AUTHORIZE``."""
    text = f"step {doc.get('step')} {doc.get('kind')} {doc.get('name') or '-'}"
    outcome = doc.get("outcome")
    if outcome is None:
        return text + " (intent recorded; executing)"
    text += f" {outcome}"
    if outcome != "SUCCESS":
        text += f" [{doc.get('code')}] in {doc.get('phase')}"
    attempts = doc.get("attempts")
    if isinstance(attempts, int) and attempts > 1:
        text += f" after {attempts} attempts"
    if doc.get("reused_from"):
        text += f" (reused from {doc['reused_from'].get('run')})"
    return text


class Describer:
    """Describes a run's entries in order (a result is described with its intent)."""

    def __init__(self) -> None:
        self._intents: dict[Any, dict[str, Any]] = {}

    def __call__(self, entry: Entry, doc: Any) -> str:
        if entry.kind == "effect.intent" and isinstance(doc, dict):
            self._intents[doc.get("step")] = doc
        if entry.kind == "effect.result" and isinstance(doc, dict):
            doc = {**self._intents.get(doc.get("step"), {}), **doc}
        return describe(entry, doc)


def describe(entry: Entry, doc: Any) -> str:
    """Describe an entry given its payload document (None when it has none)."""
    meta = entry.meta or {}
    kind = entry.kind
    if isinstance(doc, dict) and doc.get("__tracelock__") in ("redacted", "missing") and set(doc) <= {"__tracelock__", "hash"}:
        return f"{kind} (payload {doc['__tracelock__']})"
    if kind in ("effect", "effect.result") and isinstance(doc, dict):
        return describe_step(doc)
    if kind == "effect.intent" and isinstance(doc, dict):
        return f"step {doc.get('step')} {doc.get('kind')} {doc.get('name')} intent ({doc.get('class')})"
    if kind == "run.start" and isinstance(doc, dict):
        return f"start agent={doc.get('agent')} policy={str(doc.get('policy'))[:12]}"
    if kind == "run.end" and isinstance(doc, dict):
        code = f" [{doc.get('code')}]" if doc.get("code") else ""
        return f"end {meta.get('status')} {doc.get('outcome')}{code} fingerprint={str(doc.get('fingerprint'))[:16]}"
    if kind == "run.state" and isinstance(doc, dict):
        return f"state -> {meta.get('status')} (step {doc.get('step')}: {doc.get('reason')})"
    if kind == "approval" and isinstance(doc, dict):
        return f"step {doc.get('step')} {doc.get('decision')} by {doc.get('by')}"
    if kind == "workflow.step" and isinstance(doc, dict):
        return f"workflow step {doc.get('step')} done"
    if kind == "route" and isinstance(doc, dict):
        return f"route {doc.get('intent')} -> {doc.get('chosen')} ({doc.get('reason', '')})"
    if kind in ("stop.set", "stop.lift") and isinstance(doc, dict):
        target = f"tool {doc.get('tool')}" if doc.get("tool") is not None else f"every {doc.get('class')} tool"
        verb = "stop" if kind == "stop.set" else "lift the stop on"
        return f"{verb} {target} by {doc.get('by')}: {doc.get('reason')}"
    if kind == "budget.spend" and isinstance(doc, dict):
        usage = doc.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        spent = ", ".join(f"{name} {value}" for name, value in sorted(usage.items()) if value)
        tenant = f" (tenant {doc.get('tenant')})" if doc.get("tenant") else ""
        return f"budget spend of run {doc.get('run')} on {doc.get('day')}, agent {doc.get('agent')}{tenant}: {spent or 'nothing'}"
    if kind in ("policy.register", "provenance.register"):
        return f"{kind.split('.')[0]} {entry.payload} kept for the runs that name it"
    if kind == "run.traceback" and isinstance(doc, dict):
        where = "the agent" if doc.get("step") is None else f"step {doc.get('step')} ({doc.get('where')})"
        return f"traceback of {where}: {doc.get('exception')}"
    details = " ".join(f"{key}={json.dumps(value, sort_keys=True)}" for key, value in sorted(meta.items()))
    return f"{kind} {details}".rstrip()


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header line and one line per row, every column as wide as its widest cell (the
    last one is not padded), so long run ids and agent names stay aligned."""
    widths = [max([len(header), *(len(row[column]) for row in rows)]) for column, header in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [cell.ljust(width) for cell, width in zip(cells[:-1], widths[:-1], strict=True)]
        return " ".join([*padded, cells[-1]]).rstrip()

    return [line(headers), *(line(row) for row in rows)]
