"""Intent routing: agents declare the intents they handle; a router picks deterministically.

Candidates are ordered by priority (higher first), then version (higher first), then name.
The router tries them in that order, falls back to the next on failure, and records every
decision as a ``route`` entry. On replay each decision is recomputed and must equal the
recorded one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracelock.runtime.doors.context import RunContext
from tracelock.runtime.errors import AgentDefinitionError, StepError
from tracelock.runtime.outcomes import Outcome, Phase, register_code
from tracelock.runtime.tools.toolkit import AgentSpec, Intent

__all__ = ["candidates_for", "IntentRouter", "ROUTING_EXHAUSTED"]

ROUTING_EXHAUSTED = register_code(
    "ROUTING_EXHAUSTED", Outcome.EXECUTION_ERROR, "every agent that handles the intent failed"
)
NO_HANDLER = register_code(
    "ROUTING_NO_HANDLER", Outcome.VALIDATION_ERROR, "no registered agent handles the intent"
)


def candidates_for(agents: dict[str, AgentSpec], intent: str) -> list[tuple[AgentSpec, Intent]]:
    """The agents handling ``intent``, in routing order."""
    found = [
        (spec, declared)
        for spec in agents.values()
        for declared in spec.intents
        if declared.name == intent
    ]
    return sorted(found, key=lambda pair: (-pair[1].priority, -pair[1].version, pair[0].name))


class IntentRouter:
    """The agent of an intent run: tries each candidate until one succeeds."""

    def __init__(self, intent: str, candidates: list[tuple[AgentSpec, Intent]]) -> None:
        if not intent:
            raise AgentDefinitionError("an intent needs a name")
        self.intent = intent
        self.candidates = candidates
        self.__tracelock_agent__ = AgentSpec(f"intent:{intent}", self)
        self.__module__ = __name__
        self.__qualname__ = f"IntentRouter[{intent}]"

    def __call__(self, ctx: RunContext, payload: Any) -> Any:
        names = [spec.name for spec, _ in self.candidates]
        if not self.candidates:
            raise StepError(
                outcome=NO_HANDLER.outcome,
                step_code=NO_HANDLER.code,
                phase=Phase.VALIDATE,
                step=-1,
                message=f"no agent handles intent {self.intent!r}",
            )
        failures: list[dict[str, Any]] = []
        for attempt, (spec, declared) in enumerate(self.candidates):
            reason = "first in order" if attempt == 0 else f"fallback after {failures[-1]['agent']} failed [{failures[-1]['code']}]"
            ctx.route(
                {
                    "intent": self.intent,
                    "candidates": names,
                    "attempt": attempt,
                    "chosen": spec.name,
                    "version": declared.version,
                    "priority": declared.priority,
                    "reason": reason,
                }
            )
            try:
                return _call(spec.func, ctx, payload)
            except StepError as failure:
                failures.append({"agent": spec.name, "code": failure.step_code})
        ctx.route(
            {
                "intent": self.intent,
                "candidates": names,
                "attempt": len(self.candidates),
                "chosen": None,
                "version": None,
                "priority": None,
                "reason": "every candidate failed",
            }
        )
        raise StepError(
            outcome=ROUTING_EXHAUSTED.outcome,
            step_code=ROUTING_EXHAUSTED.code,
            phase=Phase.EXECUTE,
            step=-1,
            message=f"every agent for intent {self.intent!r} failed: {failures}",
            details={"failures": failures},
        )


def _call(func: Callable[..., Any], ctx: RunContext, payload: Any) -> Any:
    return func(ctx, payload)
