"""Replay: re-execute an agent's current code with every effect answered from the journal.

Each effect the code requests must match the recorded one at the same step in kind, name
and canonical arguments; the first mismatch stops the replay with a divergence report.
That first divergence is the verdict even if the agent catches what the context raised and
carries on (see :class:`tracelock.runtime.errors.Diverged`); a gather is judged in the
order the code lists its members. A replay writes nothing. A matching replay reproduces the
recorded output and fingerprint.

Before anything is compared, the run's recorded provenance (the engine, the agent's
modules, the tools' definitions: ``run.start``'s ``provenance``) is compared with the
current one; what changed is reported beside the verdict (``provenance``), so a
divergence comes with the modules that changed since the recording.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracelock.core.jsondiff import diff
from tracelock.runtime.doors.context import RunContext
from tracelock.runtime.errors import DivergenceError
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.provenance.record import differences, unchanged
from tracelock.runtime.records import RunRecord, load_run, provenance_document

if TYPE_CHECKING:
    from tracelock.runtime.runs.engine import Engine

__all__ = ["ReplayReport", "provenance_changes", "replay_run"]


@dataclass
class ReplayReport:
    run_id: str
    matched: bool
    recorded_fingerprint: str | None
    replayed_fingerprint: str | None
    divergence: dict[str, Any] | None
    #: What differs between the recorded provenance and the replaying one
    #: (:func:`tracelock.runtime.provenance.record.differences`), or None when not compared.
    provenance: dict[str, Any] | None = None

    @property
    def environment_changed(self) -> bool:
        """Whether the engine or environment differs from the recorded one."""
        return bool(self.provenance and self.provenance.get("engine"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "matched": self.matched,
            "recorded_fingerprint": self.recorded_fingerprint,
            "replayed_fingerprint": self.replayed_fingerprint,
            "divergence": self.divergence,
            "provenance": self.provenance,
        }


def replay_run(
    runtime: Engine, run_id: str, agent: Callable[..., Any] | str | None = None
) -> ReplayReport:
    record = load_run(runtime.store, run_id, provenance=False)
    return replay_record(runtime, record, agent)


def provenance_changes(runtime: Engine, record: RunRecord, func: Callable[..., Any]) -> dict[str, Any]:
    """What differs between ``record``'s provenance and that of ``func`` on ``runtime``.
    A record read with ``load_run(..., provenance=False)`` names its provenance by hash
    (from ``runtime.store``): equal to the current one's, nothing differs, and the
    document is read only when they differ."""
    reference = runtime.provenance.reference(func, runtime.toolkit)
    current = None if reference is None else reference[1]
    recorded = record.start.get("provenance")
    if isinstance(recorded, str):
        if reference is not None and recorded == reference[0]:
            return unchanged()
        recorded = provenance_document(runtime.store, recorded)
    return differences(recorded, current)


def replay_record(
    runtime: Engine, record: RunRecord, agent: Callable[..., Any] | str | None = None
) -> ReplayReport:
    redacted = _redacted_input(record)
    if redacted is not None:
        return ReplayReport(record.run_id, False, (record.end or {}).get("fingerprint"), None, redacted)
    func, _ = runtime.agent_for(record, agent)
    changes = provenance_changes(runtime, record, func)
    name = record.agent  # the agent's identity is the recorded one; its code is what is tested
    recorded_end = record.end or {}
    recorded_fp = recorded_end.get("fingerprint")
    pipeline = Pipeline(
        runtime.environment,
        run_id=record.run_id,
        seed=str(record.start.get("seed")),
        journal=None,
        recording=record,
        replay_only=True,
        start_ms=record.entries[0].ts if record.entries else 0,
        policy=runtime.policy_of(record),
    )
    ctx = RunContext(pipeline, input=record.input, annotations=record.annotations)
    try:
        result = runtime._drive(ctx, func, name, record.input, None, status="running")
    except DivergenceError as exc:
        return ReplayReport(record.run_id, False, recorded_fp, None, exc.report, changes)
    unused = sorted(set(record.effects) - set(ctx.effects))
    if unused:
        step = unused[0]
        missing = record.effects[step]
        return ReplayReport(
            record.run_id,
            False,
            recorded_fp,
            result.fingerprint,
            {
                "message": f"step {step}: the recorded {missing.get('kind')} "
                f"{missing.get('name')!r} was never requested by the code",
                "step": step,
                "kind": "missing_effect",
                "recorded": {key: missing.get(key) for key in ("kind", "name", "args")},
                "requested": None,
            },
            changes,
        )
    if result.fingerprint != recorded_fp or result.output != recorded_end.get("output"):
        return ReplayReport(
            record.run_id,
            False,
            recorded_fp,
            result.fingerprint,
            {
                "message": "every effect matched, but the run's result differs "
                f"(outcome {result.outcome} vs {recorded_end.get('outcome')}; "
                f"fingerprint {result.fingerprint} vs {recorded_fp})",
                "step": None,
                "kind": "changed_output",
                "recorded": {"output": recorded_end.get("output"), "outcome": recorded_end.get("outcome")},
                "requested": {"output": result.output, "outcome": result.outcome},
                "diff": diff(
                    {"output": recorded_end.get("output"), "outcome": recorded_end.get("outcome")},
                    {"output": result.output, "outcome": result.outcome},
                ),
            },
            changes,
        )
    return ReplayReport(record.run_id, True, recorded_fp, result.fingerprint, None, changes)


def _redacted_input(record: RunRecord) -> dict[str, Any] | None:
    """The report of a run whose input (or its whole start document) was redacted: the
    code cannot be run on an input that is gone, so nothing is compared."""
    start_gone = record.start.get("__tracelock__") is not None or "input" not in record.start
    marker = record.start if start_gone else record.input
    if not isinstance(marker, dict) or marker.get("__tracelock__") not in ("redacted", "missing"):
        return None
    state = marker["__tracelock__"]
    return {
        "message": f"run {record.run_id}: its input is {state} (hash {marker.get('hash')}), "
        "so it cannot be replayed; the rest of its record still verifies",
        "step": None,
        "kind": f"{state}_input",
        "recorded": {"input": marker},
        "requested": None,
    }
