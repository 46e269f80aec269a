"""The span observer: a :class:`~tracelock.runtime.pipeline.observe.RunObserver` that turns
runs and steps into OpenTelemetry spans."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracelock.core.canonical import CanonicalError, dumps
from tracelock.integrations.otel import attributes as a
from tracelock.integrations.otel.errors import OtelNotInstalledError
from tracelock.runtime.pipeline.observe import run_mode
from tracelock.runtime.pipeline.usage import tokens_of

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from tracelock.runtime.pipeline.request import StepRequest
    from tracelock.runtime.pipeline.state import RunState

__all__ = ["SpanObserver", "instrument", "uninstrument"]

_SCOPE = "tracelock"

AttributeValue = str | bool | int | float


def _json(value: Any) -> str:
    try:
        return dumps(value).decode()
    except CanonicalError:
        return repr(value)


class SpanObserver:
    """Spans of runs (``invoke_agent {agent}``) and of their steps, children of the run's
    span. ``tracer_provider`` defaults to the global one. ``capture_content`` adds the
    messages, responses, tool arguments and results to the spans (off: they may hold
    personal data)."""

    def __init__(self, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise OtelNotInstalledError(
                f"the OpenTelemetry adapter needs {exc.name or 'opentelemetry'} (not installed): "
                "pip install 'tracelock[otel]'",
                details={"extra": "otel", "module": exc.name},
            ) from None

        self._trace = trace
        self.tracer: Tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self.capture_content = capture_content
        self._lock = threading.Lock()
        # Keyed by the run's state object (identity): a replay and its recording share a run id.
        self._runs: dict[RunState, Span] = {}
        self._steps: dict[tuple[RunState, int], Span] = {}

    # -- runs ----------------------------------------------------------------------------
    def run_started(self, run: RunState, agent: str) -> None:
        span = self.tracer.start_span(
            f"{a.OP_INVOKE_AGENT} {agent}",
            kind=self._trace.SpanKind.INTERNAL,
            attributes={
                a.GEN_AI_OPERATION_NAME: a.OP_INVOKE_AGENT,
                a.GEN_AI_PROVIDER_NAME: a.PROVIDER,
                a.GEN_AI_AGENT_NAME: agent,
                a.TRACELOCK_RUN_ID: run.run_id,
                a.TRACELOCK_MODE: run_mode(run),
            },
        )
        with self._lock:
            self._runs[run] = span

    def run_ended(self, run: RunState, end: Mapping[str, Any]) -> None:
        with self._lock:
            span = self._runs.pop(run, None)
        if span is None:
            return
        for key, name in (
            ("status", a.TRACELOCK_STATUS),
            ("outcome", a.TRACELOCK_OUTCOME),
            ("code", a.TRACELOCK_CODE),
            ("fingerprint", a.TRACELOCK_FINGERPRINT),
        ):
            if end.get(key) is not None:
                span.set_attribute(name, str(end[key]))
        outcome, error = end.get("outcome"), end.get("error")
        if (outcome is not None and outcome != "SUCCESS") or (outcome is None and end.get("status") == "failed"):
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error or end.get("code"))))
            span.set_attribute("error.type", str(end.get("code") or "error"))
        span.end()

    # -- steps ---------------------------------------------------------------------------
    def step_started(self, run: RunState, step: int, request: StepRequest) -> None:
        with self._lock:
            parent = self._runs.get(run)
        name, attributes = self._describe(request)
        attributes[a.TRACELOCK_RUN_ID] = run.run_id
        attributes[a.TRACELOCK_STEP] = step
        attributes[a.TRACELOCK_KIND] = request.kind
        attributes[a.TRACELOCK_MODE] = run_mode(run)
        # Explicit parent: gathered steps run on pool threads, outside the run's context.
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(name, context=context, kind=self._trace.SpanKind.INTERNAL, attributes=attributes)
        with self._lock:
            self._steps[(run, step)] = span

    def step_ended(self, run: RunState, step: int, request: StepRequest, effect: Mapping[str, Any] | None) -> None:
        with self._lock:
            span = self._steps.pop((run, step), None)
        if span is None:
            return
        if effect is None:
            divergence = run.divergence
            if divergence is not None:
                span.set_attribute(a.TRACELOCK_OUTCOME, "DIVERGED")
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(divergence.get("message"))))
            span.end()
            return
        outcome = effect.get("outcome")
        span.set_attribute(a.TRACELOCK_OUTCOME, str(outcome))
        if effect.get("code") is not None:
            span.set_attribute(a.TRACELOCK_CODE, str(effect["code"]))
        if effect.get("phase") is not None:
            span.set_attribute(a.TRACELOCK_PHASE, str(effect["phase"]))
        result = effect.get("result")
        if request.kind == "llm" and isinstance(result, dict):
            tokens = tokens_of(result)
            if tokens is not None:
                span.set_attribute(a.GEN_AI_USAGE_INPUT_TOKENS, tokens[0])
                span.set_attribute(a.GEN_AI_USAGE_OUTPUT_TOKENS, tokens[1])
            if isinstance(result.get("model"), str):
                span.set_attribute(a.GEN_AI_RESPONSE_MODEL, result["model"])
        if self.capture_content and outcome == "SUCCESS":
            key = a.GEN_AI_OUTPUT_MESSAGES if request.kind == "llm" else a.GEN_AI_TOOL_CALL_RESULT
            span.set_attribute(key, _json(result))
        if outcome != "SUCCESS":
            span.set_attribute("error.type", str(effect.get("code") or outcome))
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(effect.get("error") or effect.get("code"))))
        span.end()

    def _describe(self, request: StepRequest) -> tuple[str, dict[str, AttributeValue]]:
        args = request.args if isinstance(request.args, dict) else {}
        attributes: dict[str, AttributeValue] = {a.GEN_AI_PROVIDER_NAME: a.PROVIDER}
        if request.kind == "llm":
            model = args.get("model")
            attributes[a.GEN_AI_OPERATION_NAME] = a.OP_CHAT
            if isinstance(model, str):
                attributes[a.GEN_AI_REQUEST_MODEL] = model
            max_tokens = args.get("max_tokens")
            if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
                attributes[a.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
            if self.capture_content:
                prompt = args.get("messages", args.get("prompt"))
                if prompt is not None:
                    attributes[a.GEN_AI_INPUT_MESSAGES] = _json(prompt)
            return (f"{a.OP_CHAT} {model}" if isinstance(model, str) else a.OP_CHAT), attributes
        if request.kind in ("tool", "fs"):
            attributes[a.GEN_AI_OPERATION_NAME] = a.OP_EXECUTE_TOOL
            attributes[a.GEN_AI_TOOL_NAME] = request.name
            if self.capture_content:
                attributes[a.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(request.args)
            return f"{a.OP_EXECUTE_TOOL} {request.name}", attributes
        # Other kinds (clock, random, uuid, sleep, http, proposal) are named by kind only: a
        # name such as a URL would make span names unbounded.
        return f"tracelock.{request.kind}", attributes


def instrument(runtime: Any, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False) -> SpanObserver:
    """Install a :class:`SpanObserver` on ``runtime`` (a :class:`tracelock.Runtime` or
    anything with an ``environment``): its runs, and the replays it makes, emit spans."""
    observer = SpanObserver(tracer_provider, capture_content=capture_content)
    runtime.environment.observer = observer
    return observer


def uninstrument(runtime: Any) -> None:
    """Remove the observer from ``runtime``: its runs emit no spans again."""
    runtime.environment.observer = None
