"""Comparing runs: where two runs' deterministic projections first differ, and how.

Used by ``drift`` (the same input run N times) and ``diff`` (any two runs). The kinds of
difference: ``input``, ``policy``, ``agent``, ``tool`` (an effect added, missing or
replaced), ``ordering`` (the same effects in another order), ``argument``, ``output`` (a
tool's or the run's output), ``retry`` (attempts), ``timeout``, ``outcome``, ``routing``,
``sandbox``, and ``model``: an LLM step whose results differ because the provider
answered with another model than in the first run (the ``model`` member of its effect,
the model the response names, beside the requested one in ``args``).

Every comparison is by canonical form (RFC 8785), as the fingerprint is: ``0`` and ``0.0``
are the same value, ``true`` and ``1`` are not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracelock.core.canonical import dumps
from tracelock.core.fingerprint import effect_projection, run_projection
from tracelock.core.jsondiff import diff, same_value
from tracelock.runtime.pipeline.held import answered_model
from tracelock.runtime.records import RunRecord

__all__ = ["projection_of", "first_difference", "run_difference", "step_table", "model_of"]

_EFFECT_FIELDS = (
    ("kind", "tool"),
    ("name", "tool"),
    ("class", "tool"),
    ("args", "argument"),
    ("result", "output"),
    ("outcome", "outcome"),
    ("code", "outcome"),
    ("attempts", "retry"),
    ("timeout_ms", "timeout"),
    ("sandbox", "sandbox"),
)

#: The recorded value behind a projected (hashed) field, where the diff shows the values.
_VALUE_FIELDS = {"args": "args", "result": "result", "sandbox": "sandbox"}


def projection_of(record: RunRecord) -> dict[str, Any]:
    """The fingerprint projection of a recorded run (from its journal)."""
    end = record.end or {}
    return run_projection(
        agent=record.agent,
        input=record.input,
        policy_hash=record.policy_hash,
        effects=[record.effects[step] for step in sorted(record.effects)],
        routing=record.routing,
        output=end.get("output"),
        outcome=str(end.get("outcome")),
        code=end.get("code"),
    )


def model_of(effect: Mapping[str, Any] | None) -> str | None:
    """The model that answered an LLM step (its recorded ``model``, else the one its
    result names), or None for other steps and for answers that name none."""
    if effect is None or effect.get("kind") != "llm":
        return None
    model = effect.get("model")
    return model if isinstance(model, str) else answered_model(effect.get("result"))


def _model_changed(ea: Mapping[str, Any] | None, eb: Mapping[str, Any] | None) -> bool:
    return ea is not None and eb is not None and ea.get("kind") == "llm" and model_of(ea) != model_of(eb)


def _identity(effect: Mapping[str, Any]) -> bytes:
    return dumps([effect.get("kind"), effect.get("name"), effect.get("args")])


def _differs(a: Any, b: Any) -> bool:
    return not same_value(a, b)


def first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first component where projection ``b`` differs from ``a``, or None if identical."""
    for key, kind in (("agent", "agent"), ("input", "input"), ("policy", "policy")):
        if _differs(a[key], b[key]):
            return {"component": key, "kind": kind, "step": None, "a": a[key], "b": b[key]}
    effects_a, effects_b = a["effects"], b["effects"]
    for index in range(max(len(effects_a), len(effects_b))):
        if index >= len(effects_a) or index >= len(effects_b):
            present = effects_b[index] if index >= len(effects_a) else effects_a[index]
            return {
                "component": "effects",
                "kind": "tool",
                "step": present["step"],
                "field": "added" if index >= len(effects_a) else "missing",
                "a": effects_a[index] if index < len(effects_a) else None,
                "b": effects_b[index] if index < len(effects_b) else None,
            }
        ea, eb = effects_a[index], effects_b[index]
        if same_value(ea, eb):
            continue
        if _identity(ea) != _identity(eb) and sorted(map(_identity, effects_a)) == sorted(map(_identity, effects_b)):
            return {"component": "effects", "kind": "ordering", "step": ea["step"], "field": "order", "a": ea, "b": eb}
        for field, kind in _EFFECT_FIELDS:
            if _differs(ea.get(field), eb.get(field)):
                return {"component": "effects", "kind": kind, "step": ea["step"], "field": field, "a": ea.get(field), "b": eb.get(field)}
    if _differs(a["routing"], b["routing"]):
        return {"component": "routing", "kind": "routing", "step": None, "a": a["routing"], "b": b["routing"]}
    for key, kind in (("outcome", "outcome"), ("code", "outcome"), ("output", "output")):
        if _differs(a[key], b[key]):
            return {"component": key, "kind": kind, "step": None, "a": a[key], "b": b[key]}
    return None


def run_difference(a: RunRecord, b: RunRecord) -> dict[str, Any] | None:
    """:func:`first_difference` of two recorded runs, with ``diff``: the differing leaves
    of the recorded values behind it as JSON pointers (``/args/query`` in an effect,
    ``/input/...``, ``/output/...``, ``/routing/...`` in the run), compared canonically.

    At a step, ``tool`` names the effect (``{"kind", "name", "class"}`` of the first run's,
    or of the second's when the first has none). When every differing leaf of a result is
    the step's own idempotency key in each run (a tool that echoes its key, which is made
    from the run id), ``cause`` is ``"idempotency_key"`` and ``message`` says so."""
    difference = first_difference(projection_of(a), projection_of(b))
    if difference is None:
        return None
    step = difference.get("step")
    if difference["component"] == "effects" and isinstance(step, int):
        named = a.effects.get(step) or b.effects.get(step) or {}
        difference["tool"] = {key: named.get(key) for key in ("kind", "name", "class")}
    values = _values_behind(a, b, difference)
    if values is not None:
        difference["diff"] = diff(*values)
        if isinstance(step, int) and _only_keys_differ(a.effects.get(step), b.effects.get(step), difference["diff"]):
            difference["cause"] = "idempotency_key"
            difference["message"] = (
                f"step {step}: the result of {difference['tool'].get('name')!r} differs only where it echoes "
                "its idempotency key, which is made from the run id"
            )
    if difference["component"] == "effects" and isinstance(step, int):
        ea, eb = a.effects.get(step), b.effects.get(step)
        if difference.get("field") == "result" and _model_changed(ea, eb):
            # The provider answered with another model: name the model, not the output.
            difference.update(
                component="model",
                kind="model",
                field="model",
                a=model_of(ea),
                b=model_of(eb),
                requested=(ea or {}).get("args", {}).get("model") if isinstance((ea or {}).get("args"), dict) else None,
                message=f"step {step}: the provider answered with model {model_of(eb)!r}, "
                f"the first run's answer came from {model_of(ea)!r}",
            )
    return difference


def _only_keys_differ(ea: Mapping[str, Any] | None, eb: Mapping[str, Any] | None, changes: list[dict[str, Any]]) -> bool:
    if ea is None or eb is None or not changes:
        return False
    key_a, key_b = ea.get("idempotency_key"), eb.get("idempotency_key")
    if not isinstance(key_a, str) or not isinstance(key_b, str) or key_a == key_b:
        return False
    return all(
        change["op"] == "changed"
        and isinstance(change.get("recorded"), str)
        and isinstance(change.get("requested"), str)
        and change["recorded"].replace(key_a, key_b) == change["requested"]
        and key_a in change["recorded"]
        for change in changes
    )


def _values_behind(a: RunRecord, b: RunRecord, difference: Mapping[str, Any]) -> tuple[Any, Any] | None:
    component = difference["component"]
    if component == "input":
        return {"input": a.input}, {"input": b.input}
    if component == "output":
        return {"output": (a.end or {}).get("output")}, {"output": (b.end or {}).get("output")}
    if component == "routing":
        return {"routing": a.routing}, {"routing": b.routing}
    if component != "effects":
        return None
    step = difference["step"]
    ea, eb = a.effects.get(step, {}), b.effects.get(step, {})
    field = _VALUE_FIELDS.get(str(difference.get("field")))
    if field is not None:
        return {field: ea.get(field)}, {field: eb.get(field)}
    return (
        {key: ea.get(key) for key in ("kind", "name", "args")},
        {key: eb.get(key) for key in ("kind", "name", "args")},
    )


def step_table(a: RunRecord, b: RunRecord) -> list[dict[str, Any]]:
    """Step by step: each step's projection in both runs and which fields differ."""
    rows = []
    for step in sorted(set(a.effects) | set(b.effects)):
        pa = effect_projection(a.effects[step]) if step in a.effects else None
        pb = effect_projection(b.effects[step]) if step in b.effects else None
        if pa is None or pb is None:
            differing = ["missing" if pb is None else "added"]
        else:
            differing = [field for field, _ in _EFFECT_FIELDS if _differs(pa.get(field), pb.get(field))]
            if _model_changed(a.effects[step], b.effects[step]):
                differing.append("model")
        label_a = f"{pa['kind']} {pa['name']}" if pa else "-"
        label_b = f"{pb['kind']} {pb['name']}" if pb else "-"
        rows.append({"step": step, "a": label_a, "b": label_b, "same": not differing, "differs": differing,
                     "outcome_a": pa and pa["outcome"], "outcome_b": pb and pb["outcome"]})
    return rows
