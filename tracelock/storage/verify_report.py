"""What a store verification reports (both backends' verifiers give it: ``storage/verify.py``
for the directory store, ``storage/postgres/verify.py`` for PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracelock.core.entry import ChainIssue

__all__ = ["INDEX_TAMPERED", "VerifyReport"]

#: The issue code of an index that contradicts the journal.
INDEX_TAMPERED = "STORE_INDEX_TAMPERED"


@dataclass
class VerifyReport:
    """The outcome of a verification: ``ok`` and, when not, the first problem found."""

    scope: str
    entries: int = 0
    payloads: int = 0
    redacted: int = 0
    runs: int = 0
    issue: ChainIssue | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.issue is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "scope": self.scope,
            "entries": self.entries,
            "payloads": self.payloads,
            "redacted": self.redacted,
            "runs": self.runs,
            "issue": None if self.issue is None else self.issue.to_dict(),
            "notes": list(self.notes),
        }
