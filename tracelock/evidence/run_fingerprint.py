"""Recomputing the fingerprint of a run in a store from its stored entries (docs/spec.md
5.4), as bundle verification does offline: ``tracelock verify RUN``.

The recomputation itself is :func:`tracelock.core.fingerprint.fingerprint_of_documents`;
this module reads the documents from the store. Where a field redaction replaced a member
by its marker, the marker's hash stands for ``H(member)``; where a payload the projection
needs is wholly redacted (or a marker sits where the projection needs the value itself),
the fingerprint is reported as not recomputable (``redacted``), which is not a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracelock.core.fingerprint import (
    PROJECTED_KINDS,
    HiddenValue,
    NotRecomputable,
    fingerprint_of_documents,
    is_redaction_marker,
)
from tracelock.runtime.records import redaction_copy
from tracelock.storage.backend import Store
from tracelock.storage.errors import PayloadMissingError, PayloadRedactedError

__all__ = ["FingerprintCheck", "recompute_fingerprint"]


@dataclass
class FingerprintCheck:
    """``status``: ``match``, ``mismatch``, ``redacted`` (not recomputable) or
    ``not_ended``."""

    run: str
    status: str
    recorded: str | None
    recomputed: str | None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "mismatch"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "status": self.status,
            "recorded": self.recorded,
            "recomputed": self.recomputed,
            "detail": self.detail,
        }


def _document(store: Store, digest: str) -> dict[str, Any]:
    try:
        doc = store.get_payload(digest)
    except PayloadRedactedError:
        copy = redaction_copy(store, digest)
        if copy is None:
            raise NotRecomputable(f"payload {digest} is wholly redacted") from None
        return {key: HiddenValue(value["hash"]) if is_redaction_marker(value) else value for key, value in copy.items()}
    except PayloadMissingError:
        raise NotRecomputable(f"payload {digest} is missing") from None
    if not isinstance(doc, dict):
        raise NotRecomputable(f"payload {digest} is not a JSON object")
    return doc


def recompute_fingerprint(store: Store, run_id: str) -> FingerprintCheck:
    """Recompute run ``run_id``'s fingerprint from its entries and compare it with the one
    its ``run.end`` records."""
    entries = store.entries(run_id)
    recorded: str | None = None
    try:
        documents: list[tuple[str, dict[str, Any]]] = []
        for entry in entries:
            if entry.kind not in PROJECTED_KINDS or entry.payload is None:
                continue
            if entry.kind == "run.end":
                try:
                    end_doc = store.get_payload(entry.payload)
                except (PayloadRedactedError, PayloadMissingError):
                    end_doc = redaction_copy(store, entry.payload)
                found = end_doc.get("fingerprint") if isinstance(end_doc, dict) else None
                recorded = found if isinstance(found, str) else None
            documents.append((entry.kind, _document(store, entry.payload)))
        recomputed = fingerprint_of_documents(documents)
        if recomputed is None:
            return FingerprintCheck(run_id, "not_ended", recorded, None, "the run has not ended")
    except NotRecomputable as exc:
        return FingerprintCheck(run_id, "redacted", recorded, None, f"not recomputable: {exc}")
    except (KeyError, TypeError, AttributeError) as exc:
        return FingerprintCheck(
            run_id, "mismatch", recorded, None, f"the run's payloads lack the members a fingerprint needs ({exc!r})"
        )
    if recorded is None:
        return FingerprintCheck(run_id, "redacted", None, recomputed, "the run.end payload is redacted")
    status = "match" if recomputed == recorded else "mismatch"
    return FingerprintCheck(run_id, status, recorded, recomputed)
