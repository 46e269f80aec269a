"""The execution fingerprint: SHA-256 over the canonical deterministic projection of a run.

Same input + same configuration + same recorded effects = same fingerprint, on every
machine. The projection keeps what decides the execution path and drops what does not:
timestamps, run ids, durations, logs, reasoning text, and the completion order of gathered
effects (gathered effects are listed by step, which is assigned in argument order).
See ``docs/spec.md`` section 5 for the normative definition.

:func:`fingerprint_of_documents` recomputes a recorded run's fingerprint from its entries'
payload documents (spec 5.4): the one recomputation every verifier uses (a bundle offline, a
run in a store, the web UI's run page). Where a field redaction replaced a member by its
marker, the member is a :class:`HiddenValue` whose hash stands for ``H(member)``; where the
projection needs a value a redaction removed, it raises :class:`NotRecomputable`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tracelock.core.canonical import CanonicalError, dumps

__all__ = [
    "FINGERPRINT_VERSION",
    "VALUE_EXCLUDED_KINDS",
    "value_hash",
    "effect_projection",
    "run_projection",
    "PROJECTED_KINDS",
    "projection_of_documents",
    "fingerprint",
    "HiddenValue",
    "NotRecomputable",
    "hidden_digest",
    "is_redaction_marker",
    "fingerprint_of_documents",
]

FINGERPRINT_VERSION = 1

#: Effect kinds whose recorded result is a wall-clock reading: it is replayed, but it is not
#: part of the fingerprint (a timestamp never reaches a hashed value).
VALUE_EXCLUDED_KINDS = frozenset({"clock.now"})


def value_hash(value: Any) -> str:
    """SHA-256 (hex) of a JSON value's canonical form."""
    return hashlib.sha256(dumps(value)).hexdigest()


def effect_projection(
    effect: Mapping[str, Any],
    hashes: tuple[str, str | None] | None = None,
    digest: Callable[[Any], str] = value_hash,
) -> dict[str, Any]:
    """The deterministic part of one recorded effect. ``hashes`` are ``H(args)`` and
    ``H(result)`` when the caller already has them (the runtime computes them once);
    ``digest`` computes ``H`` otherwise (a verifier of redacted evidence supplies one that
    knows the hashes of values it no longer has)."""
    kind = effect["kind"]
    get = effect.get
    outcome = get("outcome")
    args_hash, result_hash = hashes if hashes is not None else (None, None)
    projected: dict[str, Any] = {
        "step": effect["step"],
        "kind": kind,
        "name": effect["name"],
        "class": effect["class"],
        "args": args_hash or digest(get("args")),
        "result": (
            (result_hash or digest(get("result")))
            if outcome == "SUCCESS" and kind not in VALUE_EXCLUDED_KINDS
            else None
        ),
        "outcome": outcome,
        "code": get("code"),
        "attempts": get("attempts", 1),
        "timeout_ms": get("timeout_ms"),
    }
    sandbox = get("sandbox")
    if sandbox is not None:
        projected["sandbox"] = {"before": sandbox.get("before"), "after": sandbox.get("after")}
    return projected


def run_projection(
    *,
    agent: str,
    input: Any,
    policy_hash: str | None,
    effects: Iterable[Mapping[str, Any]],
    routing: Iterable[Mapping[str, Any]],
    output: Any,
    outcome: str,
    code: str | None,
    hashes: Mapping[int, tuple[str, str | None]] | None = None,
    digest: Callable[[Any], str] = value_hash,
    input_hash: str | None = None,
    output_hash: str | None = None,
) -> dict[str, Any]:
    """The canonical deterministic projection of a whole run. ``hashes`` (by step),
    ``input_hash`` and ``output_hash`` (``H(input)``, ``H(output)``) let a caller that
    already computed them skip recomputing; ``digest`` is ``H``."""
    known = hashes or {}
    return {
        "v": FINGERPRINT_VERSION,
        "agent": agent,
        "input": input_hash or digest(input),
        "policy": policy_hash,
        "effects": [
            effect_projection(effect, known.get(effect["step"]), digest)
            for effect in sorted(effects, key=lambda e: e["step"])
        ],
        "routing": [dict(decision) for decision in routing],
        "output": (output_hash or digest(output)) if outcome == "SUCCESS" else None,
        "outcome": outcome,
        "code": code,
    }


#: The entry kinds whose payloads a fingerprint is recomputed from (docs/spec.md 5.4).
PROJECTED_KINDS = frozenset({"run.start", "effect", "effect.intent", "effect.result", "route", "run.end"})


def projection_of_documents(
    documents: Iterable[tuple[str, Mapping[str, Any]]],
    digest: Callable[[Any], str] = value_hash,
) -> dict[str, Any] | None:
    """The projection of a run from its ``(kind, payload document)`` pairs of the
    :data:`PROJECTED_KINDS`, in journal order (docs/spec.md 5.4: an ``effect.result``
    completes the pending intent of its step; the last complete document of a step is its
    effect); None when the run has not ended. A document that lacks a member the projection
    needs raises ``KeyError`` or ``TypeError``: the caller says what that means."""
    start: Mapping[str, Any] | None = None
    end: Mapping[str, Any] | None = None
    effects: dict[Any, Mapping[str, Any]] = {}
    pending: dict[Any, Mapping[str, Any]] = {}
    routing: list[Mapping[str, Any]] = []
    for kind, doc in documents:
        if kind == "run.start":
            start = doc
        elif kind == "effect":
            effects[doc["step"]] = doc
        elif kind == "effect.intent":
            pending[doc["step"]] = doc
        elif kind == "effect.result":
            merged = dict(pending.pop(doc["step"], {"step": doc["step"]}))
            merged.update({key: value for key, value in doc.items() if key != "step"})
            effects[doc["step"]] = merged
        elif kind == "route":
            routing.append(doc)
        elif kind == "run.end":
            end = doc
    if start is None or end is None:
        return None
    return run_projection(
        agent=start["agent"],
        input=start.get("input"),
        policy_hash=start.get("policy"),
        effects=[effects[step] for step in sorted(effects)],
        routing=routing,
        output=end.get("output"),
        outcome=end["outcome"],
        code=end.get("code"),
        digest=digest,
    )


def fingerprint(projection: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical projection."""
    return hashlib.sha256(dumps(projection)).hexdigest()


class HiddenValue:
    """A redacted member: only the hash of its value is known (not JSON: a projection that
    needs the value itself cannot be serialized)."""

    __slots__ = ("hash",)

    def __init__(self, digest: str) -> None:
        self.hash = digest


class NotRecomputable(Exception):
    """A fingerprint needs a value a redaction removed."""


def hidden_digest(value: Any) -> str:
    """``H(value)``, or the hash a redaction marker kept for a :class:`HiddenValue`."""
    if isinstance(value, HiddenValue):
        return value.hash
    try:
        return value_hash(value)
    except CanonicalError:
        raise NotRecomputable("a redacted value is needed whole") from None


def is_redaction_marker(value: Any) -> bool:
    """Whether ``value`` is the marker a field redaction left in place of a member:
    ``{"__tracelock__": "redacted", "hash": H(member)}``."""
    return (
        isinstance(value, dict)
        and value.get("__tracelock__") == "redacted"
        and isinstance(value.get("hash"), str)
        and len(value) == 2
    )


def fingerprint_of_documents(documents: Iterable[tuple[str, Mapping[str, Any]]]) -> str | None:
    """The fingerprint of a run's ``(kind, document)`` pairs (redacted members as
    :class:`HiddenValue`); None when the run has not ended. Raises
    :class:`NotRecomputable` where a redaction took what the projection needs, ``KeyError``
    or ``TypeError`` where a document lacks a member the projection needs."""
    projection = projection_of_documents(documents, hidden_digest)
    if projection is None:
        return None
    try:
        return fingerprint(projection)
    except CanonicalError:
        raise NotRecomputable("a redacted member is part of the projection itself") from None
