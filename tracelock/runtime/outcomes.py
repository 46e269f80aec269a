"""Step phases, outcomes and the registry of stable step error codes.

Every effect and proposal passes the same seven phases. A failure ends the step with one of
three failure outcomes and a code from this registry; the code says what went wrong, the
outcome says which kind of failure it is, and the record names the phase it happened in.
Codes are listed in ``docs/errors.md`` (a test keeps the two in step) and never change
meaning once published.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tracelock.errors import TracelockError

__all__ = ["Phase", "Outcome", "StepCode", "StepFailure", "register_code", "lookup_code", "all_codes"]


class Phase(enum.StrEnum):
    RECEIVE = "RECEIVE"
    PARSE = "PARSE"
    VALIDATE = "VALIDATE"
    AUTHORIZE = "AUTHORIZE"
    EXECUTE = "EXECUTE"
    RECORD = "RECORD"
    RESPOND = "RESPOND"


class Outcome(enum.StrEnum):
    SUCCESS = "SUCCESS"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    DENIED = "DENIED"
    EXECUTION_ERROR = "EXECUTION_ERROR"


@dataclass(frozen=True)
class StepCode:
    """One registered step error code."""

    code: str
    outcome: Outcome
    summary: str


_REGISTRY: dict[str, StepCode] = {}


def register_code(code: str, outcome: Outcome, summary: str) -> StepCode:
    """Register a step error code once; registering the same code differently is a bug."""
    if outcome is Outcome.SUCCESS:
        raise ValueError("SUCCESS carries no error code")
    entry = StepCode(code, outcome, summary)
    existing = _REGISTRY.get(code)
    if existing is not None and existing != entry:
        raise ValueError(f"step code {code} registered twice with different meanings")
    _REGISTRY[code] = entry
    return entry


def lookup_code(code: str) -> StepCode:
    return _REGISTRY[code]


def all_codes() -> list[StepCode]:
    return sorted(_REGISTRY.values(), key=lambda c: c.code)


class StepFailure(TracelockError):
    """Raised inside the step pipeline (by validation, policy, the sandbox or a tool wrapper)
    to end the step with a registered code. The gateway records it; it never escapes ``run``."""

    code = "STEP_FAILED"

    def __init__(self, step_code: StepCode, message: str, **details: Any) -> None:
        super().__init__(message, details=details)
        self.step_code = step_code

    @property
    def outcome(self) -> Outcome:
        return self.step_code.outcome
