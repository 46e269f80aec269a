"""Redaction: remove a payload's bytes from the store, recording who removed it and why.

A redaction is an entry of kind ``payload.redact`` in the ``tracelock:admin`` chain, with
``meta.payload`` = the hash of the removed payload, appended durably *before* the payload's
bytes are erased (so a crash in between leaves a recorded redaction still to complete, never
an unexplained hole). Its own payload is the redaction document::

    {"v": 1, "payload": <hash>, "run": <run id>, "step": <step | "start" | "end">,
     "kind": <entry kind>, "fields": [<member>, ...] | null, "copy": <object> | null,
     "by": <who>, "reason": <why>}

Without ``fields`` the whole payload is removed and ``copy`` is null. With ``fields`` (top
level members of the payload object, e.g. ``args`` of an LLM call holding personal data),
``copy`` is the payload with exactly those members replaced by a marker
``{"__tracelock__": "redacted", "hash": H(value)}``: the rest stays readable, and because
the fingerprint only uses ``H(args)``, ``H(result)``, ``H(input)`` and ``H(output)``, a run
whose redacted fields are among those still has a recomputable fingerprint.

Payloads are content-addressed: the same bytes referenced by several entries (of one run or
of many) are stored once, so redacting them removes them for every entry that refers to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, Entry
from tracelock.errors import EvidenceError
from tracelock.evidence.redaction_format import (
    MARKER_KEY,
    Redaction,
    RedactionFormatError,
    field_marker,
    is_field_marker,
    parse_redaction,
)
from tracelock.storage.backend import Store
from tracelock.storage.errors import RunNotFoundError

__all__ = [
    "MARKER_KEY",
    "REDACTABLE_KINDS",
    "RedactTargetError",
    "RedactedPayloadError",
    "Redaction",
    "RedactionFormatError",
    "RedactionResult",
    "field_marker",
    "is_field_marker",
    "parse_redaction",
    "redact",
]

#: Entry kinds whose payload ``redact`` can target by step number.
REDACTABLE_KINDS = ("effect", "effect.intent", "effect.result")
_STEP_WORDS = {"start": "run.start", "end": "run.end"}


class RedactTargetError(EvidenceError):
    """Nothing to redact where asked: no such step, no payload, or no such field."""

    code: ClassVar[str] = "EVIDENCE_REDACT_TARGET"


class RedactedPayloadError(EvidenceError):
    """The payload asked for was already redacted."""

    code: ClassVar[str] = "EVIDENCE_REDACT_ALREADY"


@dataclass
class RedactionResult:
    """What ``redact`` did: the redaction entries appended, and every entry of the store
    whose payload is now gone (content addressing shares payloads between entries)."""

    run: str
    step: int | str
    redactions: list[dict[str, Any]] = field(default_factory=list)
    affected: list[dict[str, Any]] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        """True when the removed bytes were also referenced outside the target entries."""
        targets = {(r["run"], r["i"]) for r in self.redactions}
        return any((a["run"], a["i"]) not in targets for a in self.affected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "run": self.run,
            "step": self.step,
            "redactions": self.redactions,
            "affected": self.affected,
            "shared": self.shared,
        }


def parse_step(text: str) -> int | str:
    """A STEP argument: a step number, ``start`` (the run.start entry) or ``end``."""
    if text in _STEP_WORDS:
        return text
    if text.isdigit():
        return int(text)
    raise RedactTargetError(
        f"STEP is a step number, 'start' or 'end', not {text!r}", details={"step": text}
    )


def _targets(store: Store, run: str, step: int | str) -> list[tuple[Entry, Any]]:
    """The run's entries that hold ``step``'s payloads, with their documents (None when
    already redacted)."""
    found: list[tuple[Entry, Any]] = []
    for entry in store.entries(run):
        if entry.payload is None:
            continue
        if isinstance(step, str):
            if entry.kind != _STEP_WORDS[step]:
                continue
            doc = store.get_payload(entry.payload) if store.payload_state(entry.payload) == "present" else None
            found.append((entry, doc))
            continue
        if entry.kind not in REDACTABLE_KINDS:
            continue
        if store.payload_state(entry.payload) != "present":
            continue
        doc = store.get_payload(entry.payload)
        if isinstance(doc, dict) and doc.get("step") == step:
            found.append((entry, doc))
    return found


def _recorded_redactions(store: Store) -> dict[str, tuple[int, Any]]:
    """Payload hash -> (seq, fields) of the redaction entries already in the admin chain."""
    try:
        admin = store.entries(ADMIN_RUN)
    except RunNotFoundError:
        return {}
    found: dict[str, tuple[int, Any]] = {}
    for entry in admin:
        target = (entry.meta or {}).get("payload")
        if entry.kind == REDACTION_KIND and isinstance(target, str):
            doc = (
                store.get_payload(entry.payload)
                if entry.payload and store.payload_state(entry.payload) == "present"
                else None
            )
            found[target] = (entry.seq, doc.get("fields") if isinstance(doc, dict) else None)
    return found


def redact(
    store: Store,
    run: str,
    step: int | str,
    *,
    by: str,
    reason: str,
    fields: Sequence[str] = (),
) -> RedactionResult:
    """Remove the payload(s) of ``step`` of ``run`` (``start``/``end`` for the run's first
    and last entries), or only the given top-level ``fields`` of them (see the module doc).

    Each removed payload gets its own ``payload.redact`` entry, made durable before its
    bytes are erased. Raises :class:`RedactTargetError` when there is nothing to remove and
    :class:`RedactedPayloadError` when it was already removed.
    """
    if run == ADMIN_RUN:
        raise RedactTargetError("the admin chain's payloads are not redacted through a run")
    if not by.strip() or not reason.strip():
        raise RedactTargetError("a redaction must say who made it (--by) and why (--reason)")
    wanted = list(dict.fromkeys(fields))
    candidates = _targets(store, run, step)
    if not candidates:
        already = isinstance(step, int) and any(
            entry.kind in REDACTABLE_KINDS
            and entry.payload is not None
            and store.payload_state(entry.payload) == "redacted"
            for entry in store.entries(run)
        )
        raise (RedactedPayloadError if already else RedactTargetError)(
            f"run {run} has no {'readable ' if already else ''}payload for step {step}"
            + (" (its payloads may already be redacted)" if already else ""),
            details={"run": run, "step": step},
        )
    plans: list[tuple[Entry, tuple[str, ...] | None, dict[str, Any] | None]] = []
    covered: set[str] = set()
    for entry, doc in candidates:
        if doc is None:
            raise RedactedPayloadError(
                f"the payload of run {run} entry {entry.i} ({entry.kind}) is already redacted",
                details={"run": run, "i": entry.i, "payload": entry.payload},
            )
        if not wanted:
            plans.append((entry, None, None))
            continue
        if not isinstance(doc, dict):
            continue
        present = tuple(name for name in wanted if name in doc)
        if not present:
            continue
        for name in present:
            if is_field_marker(doc[name]):
                raise RedactedPayloadError(
                    f"member {name!r} of run {run} entry {entry.i} is already a redaction marker"
                )
        redacted_copy = dict(doc)
        for name in present:
            redacted_copy[name] = field_marker(doc[name])
        covered.update(present)
        plans.append((entry, present, redacted_copy))
    missing = [name for name in wanted if name not in covered]
    if missing:
        available = sorted(
            {name for _, doc in candidates if isinstance(doc, dict) for name in doc}
        )
        raise RedactTargetError(
            f"no payload of step {step} of run {run} has the member(s) {missing}; "
            f"members there: {available}",
            details={"run": run, "step": step, "missing": missing, "available": available},
        )
    # Several target entries may share one payload: redact each hash once.
    by_hash: dict[str, tuple[Entry, tuple[str, ...] | None, dict[str, Any] | None]] = {}
    for plan in plans:
        assert plan[0].payload is not None
        by_hash.setdefault(plan[0].payload, plan)
    result = RedactionResult(run=run, step=step)
    targets = set(by_hash)
    for other in store.iter_entries():
        if other.payload in targets:
            result.affected.append(
                {"run": other.run, "i": other.i, "seq": other.seq, "kind": other.kind,
                 "payload": other.payload}
            )
    recorded = _recorded_redactions(store)
    for digest, (entry, names, copy) in by_hash.items():
        if digest in recorded:
            # An earlier redaction of these bytes was recorded but interrupted before the
            # erase: complete it rather than record it twice.
            store.erase_payload(digest)
            result.redactions.append(
                {"payload": digest, "run": run, "i": entry.i, "kind": entry.kind,
                 "fields": recorded[digest][1], "redaction_seq": recorded[digest][0],
                 "completed_earlier_redaction": True}
            )
            continue
        document: dict[str, Any] = {
            "v": 1,
            "payload": digest,
            "run": run,
            "step": step,
            "kind": entry.kind,
            "fields": list(names) if names is not None else None,
            "copy": copy,
            "by": by,
            "reason": reason,
        }
        record = store.append(
            ADMIN_RUN, REDACTION_KIND, payload=document, meta={"payload": digest}, durable=True
        )
        store.erase_payload(digest)
        result.redactions.append(
            {"payload": digest, "run": run, "i": entry.i, "kind": entry.kind,
             "fields": document["fields"], "redaction_seq": record.seq}
        )
    return result
