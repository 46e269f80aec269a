"""The format of a redaction record: the ``payload.redact`` entry's document, and the marker
a field redaction leaves in place of a member (see :mod:`tracelock.evidence.redaction`,
which makes redactions). Reading them needs no store: the offline bundle verifier does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar

from tracelock.core.canonical import dumps
from tracelock.core.entry import Entry
from tracelock.core.hashing import is_hex_digest
from tracelock.errors import EvidenceError

__all__ = [
    "MARKER_KEY",
    "Redaction",
    "RedactionFormatError",
    "field_marker",
    "is_field_marker",
    "parse_redaction",
]

#: Member name of the marker that stands in for a redacted value.
MARKER_KEY = "__tracelock__"


class RedactionFormatError(EvidenceError, ValueError):
    """A ``payload.redact`` entry or its document is malformed."""

    code: ClassVar[str] = "EVIDENCE_REDACTION_MALFORMED"


def _hash(value: Any) -> str:
    return hashlib.sha256(dumps(value)).hexdigest()


def field_marker(value: Any) -> dict[str, str]:
    """The marker replacing a redacted member: it keeps the hash of the value it hides."""
    return {MARKER_KEY: "redacted", "hash": _hash(value)}


def is_field_marker(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {MARKER_KEY, "hash"}
        and value[MARKER_KEY] == "redacted"
        and is_hex_digest(value["hash"])
    )


@dataclass(frozen=True)
class Redaction:
    """A parsed redaction document."""

    payload: str
    run: str | None
    step: int | str | None
    kind: str | None
    fields: tuple[str, ...] | None
    copy: dict[str, Any] | None
    by: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "payload": self.payload,
            "run": self.run,
            "step": self.step,
            "kind": self.kind,
            "fields": list(self.fields) if self.fields is not None else None,
            "by": self.by,
            "reason": self.reason,
        }


def parse_redaction(entry: Entry, doc: Any) -> Redaction:
    """Check a ``payload.redact`` entry and its (readable) document; ``doc`` None means the
    document itself is not available (then only ``meta.payload`` is known)."""
    target = (entry.meta or {}).get("payload")
    if not is_hex_digest(target):
        raise RedactionFormatError(
            f"redaction entry seq {entry.seq} has no meta.payload hash",
            details={"seq": entry.seq},
        )
    assert isinstance(target, str)
    if doc is None:
        return Redaction(target, None, None, None, None, None, "", "")
    if not isinstance(doc, dict) or doc.get("v") != 1 or doc.get("payload") != target:
        raise RedactionFormatError(
            f"redaction entry seq {entry.seq}: its document does not name payload {target}",
            details={"seq": entry.seq},
        )
    fields = doc.get("fields")
    copy = doc.get("copy")
    if fields is None:
        if copy is not None:
            raise RedactionFormatError(
                f"redaction entry seq {entry.seq}: a copy without redacted fields",
                details={"seq": entry.seq},
            )
        parsed_fields: tuple[str, ...] | None = None
    else:
        if (
            not isinstance(fields, list)
            or not fields
            or not all(isinstance(name, str) for name in fields)
            or len(set(fields)) != len(fields)
            or not isinstance(copy, dict)
        ):
            raise RedactionFormatError(
                f"redaction entry seq {entry.seq}: fields must be a list of distinct names "
                "with a copy object",
                details={"seq": entry.seq},
            )
        for name in fields:
            if not is_field_marker(copy.get(name)):
                raise RedactionFormatError(
                    f"redaction entry seq {entry.seq}: member {name!r} of the copy is not a "
                    "redaction marker",
                    details={"seq": entry.seq, "field": name},
                )
        parsed_fields = tuple(fields)
    step = doc.get("step")
    return Redaction(
        payload=target,
        run=doc.get("run") if isinstance(doc.get("run"), str) else None,
        step=step if isinstance(step, int | str) else None,
        kind=doc.get("kind") if isinstance(doc.get("kind"), str) else None,
        fields=parsed_fields,
        copy=copy if isinstance(copy, dict) else None,
        by=str(doc.get("by", "")),
        reason=str(doc.get("reason", "")),
    )
