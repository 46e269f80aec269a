"""tracelock: provably deterministic execution for AI agents.

The public API is what this module exports; everything else is private by convention.
``tracelock.canonical`` (RFC 8785) and ``tracelock.merkle`` (RFC 9162 proofs) are public
modules too, and so is ``tracelock.integrations.http`` (HTTP capture; ``capture_http`` here
is its ``capture``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from tracelock.errors import TracelockError

if TYPE_CHECKING:
    from tracelock.integrations.http import capture as capture_http
    from tracelock.runtime.doors.context import RunContext, Task
    from tracelock.runtime.doors.workflow import Workflow, WorkflowStep
    from tracelock.runtime.errors import DivergenceError, StepError
    from tracelock.runtime.outcomes import Outcome, Phase
    from tracelock.runtime.policy.policy import Policy
    from tracelock.runtime.provenance.record import NO_PROVENANCE, Provenance
    from tracelock.runtime.queue import RunHandle, Worker
    from tracelock.runtime.runtime import AsyncRunContext, RunResult, Runtime
    from tracelock.runtime.tools.toolkit import Intent, Toolkit
    from tracelock.runtime.tools.tools import RetryPolicy
    from tracelock.storage.open import open_store

#: Where each public name lives. They are imported when first used (PEP 562), so that a
#: program (or a command) that needs only part of the package loads only that part:
#: verifying a bundle offline loads no storage backend and no runtime.
_PUBLIC = {
    "AsyncRunContext": ("tracelock.runtime.runtime", "AsyncRunContext"),
    "capture_http": ("tracelock.integrations.http", "capture"),
    "DivergenceError": ("tracelock.runtime.errors", "DivergenceError"),
    "Intent": ("tracelock.runtime.tools.toolkit", "Intent"),
    "NO_PROVENANCE": ("tracelock.runtime.provenance.record", "NO_PROVENANCE"),
    "open_store": ("tracelock.storage.open", "open_store"),
    "Outcome": ("tracelock.runtime.outcomes", "Outcome"),
    "Phase": ("tracelock.runtime.outcomes", "Phase"),
    "Policy": ("tracelock.runtime.policy.policy", "Policy"),
    "Provenance": ("tracelock.runtime.provenance.record", "Provenance"),
    "RetryPolicy": ("tracelock.runtime.tools.tools", "RetryPolicy"),
    "RunContext": ("tracelock.runtime.doors.context", "RunContext"),
    "RunHandle": ("tracelock.runtime.queue", "RunHandle"),
    "RunResult": ("tracelock.runtime.runtime", "RunResult"),
    "Runtime": ("tracelock.runtime.runtime", "Runtime"),
    "StepError": ("tracelock.runtime.errors", "StepError"),
    "Task": ("tracelock.runtime.doors.context", "Task"),
    "Toolkit": ("tracelock.runtime.tools.toolkit", "Toolkit"),
    "Worker": ("tracelock.runtime.queue", "Worker"),
    "Workflow": ("tracelock.runtime.doors.workflow", "Workflow"),
    "WorkflowStep": ("tracelock.runtime.doors.workflow", "WorkflowStep"),
}


def __getattr__(name: str) -> Any:
    place = _PUBLIC.get(name)
    if place is None:
        raise AttributeError(f"module 'tracelock' has no attribute {name!r}")
    value = getattr(importlib.import_module(place[0]), place[1])
    globals()[name] = value
    return value


__all__ = [
    "AsyncRunContext",
    "DivergenceError",
    "Intent",
    "NO_PROVENANCE",
    "Outcome",
    "Phase",
    "Policy",
    "Provenance",
    "RetryPolicy",
    "RunContext",
    "RunHandle",
    "RunResult",
    "Runtime",
    "StepError",
    "Task",
    "Toolkit",
    "TracelockError",
    "Worker",
    "Workflow",
    "WorkflowStep",
    "capture_http",
    "open_store",
]
__version__ = "0.1.0"
