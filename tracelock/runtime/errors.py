"""Errors of the runtime layer."""

from __future__ import annotations

from typing import Any, ClassVar

from tracelock.errors import ReplayError, RuntimeFault, TracelockError
from tracelock.runtime.outcomes import Outcome, Phase

__all__ = [
    "StepError",
    "AgentDefinitionError",
    "LifecycleError",
    "RunStateError",
    "DivergenceError",
    "Diverged",
    "Suspend",
    "ToolNotFoundError",
]


class StepError(TracelockError):
    """Raised into agent code when one of its steps fails.

    The agent may catch it and carry on (a denied action is information); if it does not,
    the run ends with this step's outcome and code.
    """

    code = "STEP_ERROR"

    def __init__(
        self,
        *,
        outcome: Outcome,
        step_code: str,
        phase: Phase,
        step: int,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"step {step} {outcome.value} [{step_code}] in {phase.value}: {message}", details=details)
        self.outcome = outcome
        self.step_code = step_code
        self.phase = phase
        self.step = step
        self.reason = message


class AgentDefinitionError(RuntimeFault):
    """An agent cannot be used (not callable, cannot be imported by name, bad intents)."""

    code = "AGENT_INVALID"


class AwaitRequiredError(AgentDefinitionError):
    """An ``async def`` agent was given to a sync entry point (``run``, ``resume``,
    ``replay``, ``recover``) by code running an event loop: its run must be awaited
    (``arun``, ``aresume``, ``areplay``, ``arecover``)."""

    code = "RUN_AWAIT_REQUIRED"


class ToolNotFoundError(RuntimeFault):
    """A tool name given to the runtime's API is not registered."""

    code = "TOOL_NOT_FOUND"


class LifecycleError(RuntimeFault):
    """An illegal run state transition was attempted: a bug, never silently applied."""

    code = "LIFECYCLE_ILLEGAL_TRANSITION"


class RunStateError(RuntimeFault):
    """The operation does not fit the run's current state (e.g. approving a step nobody waits on)."""

    code = "RUN_STATE_INVALID"


class RunBusyError(RunStateError):
    """Another process (or another caller of this one) is continuing the run right now
    (``resume``, ``recover``): continuing it here too would execute its next effects twice."""

    code = "RUN_BUSY"


class DivergenceError(ReplayError):
    """Code requested an effect that does not match the recorded one at that step."""

    code = "REPLAY_DIVERGED"

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__(report.get("message", "replay diverged"), details=report)
        self.report = report


class Diverged(BaseException):
    """Raised into agent code when a request does not match the recording.

    Not a :class:`TracelockError`: like ``Suspend`` it derives from BaseException, so that an
    agent's ``except Exception`` (a fallback, a retry loop) cannot catch it. The context also
    remembers the first divergence: an agent that catches this anyway and carries on gets it
    again from every later door, and the run's verdict is that first divergence, raised to the
    caller as :class:`DivergenceError`.
    """

    code: ClassVar[str] = DivergenceError.code

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__(report.get("message", "replay diverged"))
        self.report = report


class Suspend(BaseException):
    """Unwinds the agent when the run must wait (approval) or is blocked. Not an error:
    it derives from BaseException so that an agent's ``except Exception`` cannot swallow it."""

    def __init__(self, status: str, step: int, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.step = step
        self.reason = reason
        #: Journaled with the state change beside ``step`` and ``reason`` (an approval's
        #: expiry: ``ttl_ms`` and ``expires_ms``).
        self.details = details
