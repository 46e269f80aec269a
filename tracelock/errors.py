"""The error hierarchy shared by every layer.

Every error tracelock raises on purpose is a :class:`TracelockError` with a stable,
documented ``code`` (see ``docs/errors.md``). Codes never change meaning once published;
messages may be reworded. Each layer defines its specific errors as subclasses of the
area bases declared here, so that this module has no dependencies of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class TracelockError(Exception):
    """Base class of every deliberate tracelock error."""

    code: ClassVar[str] = "TRACELOCK_ERROR"

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: ``{"code", "message", "details"}``."""
        return {"code": self.code, "message": self.message, "details": self.details}


class CanonicalError(TracelockError, ValueError):
    """A value cannot be canonicalized, or JSON text is not acceptable to the strict parser."""

    code: ClassVar[str] = "CANONICAL_ERROR"


class StoreError(TracelockError):
    """Base of storage errors (journal, payload store, index, backends)."""

    code: ClassVar[str] = "STORE_ERROR"


class ProofError(TracelockError):
    """A Merkle inclusion or consistency proof does not verify."""

    code: ClassVar[str] = "PROOF_INVALID"


class EvidenceError(TracelockError):
    """Base of key, checkpoint and bundle errors."""

    code: ClassVar[str] = "EVIDENCE_ERROR"


class PolicyError(TracelockError):
    """A policy file is malformed or inconsistent; it is rejected whole at load."""

    code: ClassVar[str] = "POLICY_INVALID"


class RuntimeFault(TracelockError):
    """Base of runtime errors that are not step outcomes (misuse of the API, bad agents)."""

    code: ClassVar[str] = "RUNTIME_ERROR"


class ReplayError(TracelockError):
    """Base of replay, fork and divergence errors."""

    code: ClassVar[str] = "REPLAY_ERROR"


class AnalysisError(TracelockError):
    """Base of entropy-scan errors (unreadable source, bad scan configuration)."""

    code: ClassVar[str] = "ANALYSIS_ERROR"


class UsageError(TracelockError):
    """Bad input given to a surface (CLI flag combination, missing file)."""

    code: ClassVar[str] = "USAGE_ERROR"
