"""tracelock: provably deterministic execution for AI agents.

The public API is what this module exports; everything else is private by convention.
``tracelock.canonical`` (RFC 8785) and ``tracelock.merkle`` (RFC 9162 proofs) are public
modules too, and so is ``tracelock.integrations.http`` (HTTP capture; ``capture_http`` here
is its ``capture``).
"""

from tracelock.errors import TracelockError
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
