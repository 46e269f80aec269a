"""One run as its page shows it: lifecycle, the timeline of steps, routing and policy
decisions, the fingerprint with its components, parent and forks.

The run is read with :func:`tracelock.runtime.records.load_run` (the record replay and
``tracelock diff`` use), so a step shows what was recorded, field-redaction copies
included. The entries are walked once more for what the record does not keep: when each
step started and ended, and the entries whose payload is wholly redacted or missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracelock.cli.describe import Describer
from tracelock.core.entry import ADMIN_RUN, Entry, valid_run_id
from tracelock.core.fingerprint import (
    PROJECTED_KINDS,
    fingerprint_of_documents,
    projection_of_documents,
)
from tracelock.runtime.records import RunRecord, load_run
from tracelock.storage.backend import RunInfo, Store
from tracelock.storage.errors import PayloadMissingError, PayloadRedactedError, RunNotFoundError
from tracelock.web.errors import UiNotFoundError

__all__ = ["FORK_SCAN_LIMIT", "LifecycleEvent", "RunView", "StepView", "check_run_id", "load_run_view", "marked"]

#: The newest runs searched for a run's forks (children name their parent).
FORK_SCAN_LIMIT = 5_000
_MARK = "__tracelock__"


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can be a run's id (the journal's rule, ``valid_run_id``; the
    store's own admin chain is no run), else :class:`UiNotFoundError`."""
    if not valid_run_id(run_id) or run_id == ADMIN_RUN:
        raise UiNotFoundError("that is not a run id", details={"run": run_id[:80]})
    return run_id


def marked(value: Any) -> bool:
    """Whether a value holds a redaction (or missing-payload) marker anywhere."""
    if isinstance(value, dict):
        return _MARK in value or any(marked(item) for item in value.values())
    if isinstance(value, list):
        return any(marked(item) for item in value)
    return False


@dataclass
class StepView:
    """One step of the timeline."""

    step: int
    kind: str
    name: str
    side_effect: str | None
    outcome: str | None
    code: str | None
    phase: str
    attempts: int | None
    started_ts: int
    duration_ms: int | None
    args: Any
    result: Any
    error: Any
    idempotency_key: str | None
    proposal: Any
    approval: dict[str, Any] | None
    sandbox: Any
    reused_from: Any
    redacted: bool
    llm: dict[str, Any] | None

    @property
    def failed(self) -> bool:
        return self.outcome not in (None, "SUCCESS")


@dataclass(frozen=True)
class LifecycleEvent:
    """A state the run entered, when and why."""

    ts: int
    status: str
    reason: str


@dataclass
class RunView:
    """Everything the run page shows."""

    info: RunInfo
    record: RunRecord
    steps: list[StepView]
    lifecycle: list[LifecycleEvent]
    timeline: list[dict[str, Any]]
    unreadable: list[dict[str, Any]]
    projection: dict[str, Any] | None
    recomputed: str | None
    forks: list[RunInfo] = field(default_factory=list)
    forks_searched: int = 0

    @property
    def end(self) -> dict[str, Any]:
        return self.record.end or {}

    @property
    def fingerprint(self) -> str | None:
        value = self.end.get("fingerprint")
        return value if isinstance(value, str) else None


def _read(store: Store, entry: Entry) -> tuple[Any, str]:
    if entry.payload is None:
        return None, "none"
    try:
        return store.get_payload(entry.payload), "present"
    except PayloadRedactedError:
        return None, "redacted"
    except PayloadMissingError:
        return None, "missing"


def _phase(effect: dict[str, Any], pending: bool) -> str:
    """How far the step got through the seven phases."""
    if pending:
        return "EXECUTE"
    phase = effect.get("phase")
    if isinstance(phase, str):
        return phase
    return "RESPOND" if effect.get("outcome") == "SUCCESS" else "RECORD"


def _llm(effect: dict[str, Any]) -> dict[str, Any] | None:
    """An LLM call's messages (or prompt), answer and streamed chunks, where recorded."""
    if effect.get("kind") != "llm":
        return None
    args = effect.get("args") if isinstance(effect.get("args"), dict) else {}
    result = effect.get("result") if isinstance(effect.get("result"), dict) else {}
    assert isinstance(args, dict) and isinstance(result, dict)
    body = args.get("body") if isinstance(args.get("body"), dict) else {}
    assert isinstance(body, dict)
    answer = result.get("content")
    captured = result.get("llm")
    if answer is None and isinstance(captured, dict):
        answer = captured.get("content")
    chunks = result.get("chunks")
    return {
        "model": args.get("model") or body.get("model"),
        "messages": args.get("messages") or body.get("messages"),
        "prompt": args.get("prompt"),
        "answer": answer,
        "chunks": chunks if isinstance(chunks, list) else None,
        "usage": result.get("usage") or (captured.get("usage") if isinstance(captured, dict) else None),
    }


def _step_views(record: RunRecord, times: dict[int, tuple[int, int | None]]) -> list[StepView]:
    views = []
    steps = sorted(set(record.effects) | set(record.pending))
    for step in steps:
        pending = step not in record.effects
        effect = record.pending[step] if pending else record.effects[step]
        started, ended = times.get(step, (0, None))
        attempts = effect.get("attempts")
        views.append(
            StepView(
                step=step,
                kind=str(effect.get("kind")),
                name=str(effect.get("name") or "-"),
                side_effect=effect.get("class"),
                outcome=None if pending else effect.get("outcome"),
                code=effect.get("code"),
                phase=_phase(effect, pending),
                attempts=attempts if isinstance(attempts, int) else None,
                started_ts=started,
                duration_ms=None if ended is None else max(0, ended - started),
                args=effect.get("args"),
                result=effect.get("result"),
                error=effect.get("error"),
                idempotency_key=effect.get("idempotency_key"),
                proposal=effect.get("proposal"),
                approval=record.approvals.get(step),
                sandbox=effect.get("sandbox"),
                reused_from=effect.get("reused_from"),
                redacted=marked(effect.get("args")) or marked(effect.get("result")),
                llm=_llm(effect),
            )
        )
    return views


def load_run_view(store: Store, run_id: str, *, forks: bool = True) -> RunView:
    """The run page's data; :class:`UiNotFoundError` for an unknown or malformed id."""
    check_run_id(run_id)
    try:
        info = store.run_info(run_id)
        record = load_run(store, run_id)
    except RunNotFoundError:
        raise UiNotFoundError(f"no run {run_id!r} in this store", details={"run": run_id}) from None
    describer = Describer()
    timeline: list[dict[str, Any]] = []
    unreadable: list[dict[str, Any]] = []
    lifecycle: list[LifecycleEvent] = []
    times: dict[int, tuple[int, int | None]] = {}
    documents: list[tuple[str, Any]] = []  # what the fingerprint is recomputed from
    previous_ts = record.entries[0].ts if record.entries else 0
    for entry in record.entries:
        doc, state = _read(store, entry)
        if state in ("redacted", "missing"):
            unreadable.append({"i": entry.i, "kind": entry.kind, "state": state, "payload": entry.payload})
            doc = {_MARK: state, "hash": entry.payload}
        elif entry.kind in PROJECTED_KINDS and state == "present":
            documents.append((entry.kind, doc))
        summary = describer(entry, doc if state != "none" else None)
        timeline.append({"i": entry.i, "seq": entry.seq, "ts": entry.ts, "kind": entry.kind, "hash": entry.hash, "summary": summary, "state": state})
        step = doc.get("step") if isinstance(doc, dict) else None
        if entry.kind == "effect" and isinstance(step, int):
            times[step] = (previous_ts, entry.ts)
        elif entry.kind == "effect.intent" and isinstance(step, int):
            times[step] = (entry.ts, None)
        elif entry.kind == "effect.result" and isinstance(step, int):
            times[step] = (times.get(step, (entry.ts, None))[0], entry.ts)
        status = (entry.meta or {}).get("status")
        if isinstance(status, str):
            reason = ""
            if isinstance(doc, dict):
                reason = str(doc.get("reason") or doc.get("error") or doc.get("outcome") or "")
            lifecycle.append(LifecycleEvent(entry.ts, status, reason))
        previous_ts = entry.ts
    projection: dict[str, Any] | None = None
    recomputed: str | None = None
    if record.end is not None and not record.redacted and record.start:
        projection = projection_of_documents(documents)
        recomputed = fingerprint_of_documents(documents)
    view = RunView(
        info=info,
        record=record,
        steps=_step_views(record, times),
        lifecycle=lifecycle,
        timeline=timeline,
        unreadable=unreadable,
        projection=projection,
        recomputed=recomputed,
    )
    if forks:
        candidates = store.runs(limit=FORK_SCAN_LIMIT)
        view.forks = [candidate for candidate in candidates if candidate.parent == run_id]
        view.forks_searched = len(candidates)
    return view
