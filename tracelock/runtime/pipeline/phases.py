"""The seven phases of a step, each a function of the run's state and the request.

RECEIVE   :func:`receive` numbers the step (in the order the agent asks; a gather numbers
          its members in argument order before any of them runs). The request arrives
          canonicalized (:class:`StepRequest`).
PARSE     :func:`parse`: a proposal is read strictly into the tool request it proposes;
          arguments must be canonical JSON.
VALIDATE  :func:`validate`: the tool must exist and the arguments satisfy its schema.
AUTHORIZE :func:`authorize`: the policy decides (deny by default; budgets; human approval).
EXECUTE   :func:`execute`: the tool, the LLM provider, the clock... runs, with the tool's
          timeout and retry policy; an idempotent or irreversible effect's intent is
          journaled first.
RECORD    :func:`record`: the result must be canonical JSON; the outcome is journaled.
RESPOND   :func:`respond`: the door gets the result, or a :class:`StepError`.

:func:`live` runs them in that order for a step the recording does not answer.
"""

from __future__ import annotations

import datetime
import hashlib
import urllib.parse
import uuid as uuid_module
from collections.abc import Mapping
from typing import Any

from tracelock.core.canonical import CanonicalError, Encoded, dumps, loads
from tracelock.runtime.errors import StepError, Suspend
from tracelock.runtime.outcomes import Outcome, Phase, StepFailure
from tracelock.runtime.pipeline.codes import (
    APPROVAL_EXPIRED,
    APPROVAL_REJECTED,
    ARGS_NOT_JSON,
    ARGS_SCHEMA,
    HTTP_REQUEST_INVALID,
    HTTP_TRANSPORT_ERROR,
    LLM_COST_UNKNOWN,
    LLM_NOT_CONFIGURED,
    LLM_PROVIDER_ERROR,
    LLM_REQUEST_INVALID,
    LLM_RESPONSE_INVALID,
    LLM_USAGE_UNKNOWN,
    PROPOSAL_BAD_FIELD,
    PROPOSAL_MISSING_FIELD,
    PROPOSAL_NOT_JSON,
    PROPOSAL_NOT_OBJECT,
    PROPOSAL_UNKNOWN_FIELD,
    PROPOSAL_VERSION,
    RESULT_CONTRACT,
    RESULT_NOT_JSON,
    TOOL_RAISED,
    TOOL_TIMEOUT,
    TOOL_UNKNOWN,
)
from tracelock.runtime.pipeline.held import answered_model
from tracelock.runtime.pipeline.request import StepRequest, idempotency_key, tool_request
from tracelock.runtime.pipeline.state import RunState
from tracelock.runtime.pipeline.usage import cost_of, tokens_of
from tracelock.runtime.policy.policy import LLM_MAX_TOKENS, AuthorizationRequest, Decision, Usage
from tracelock.runtime.records import RunJournal, audit_traceback
from tracelock.runtime.tools.tools import Tool

__all__ = [
    "receive",
    "parse",
    "validate",
    "authorize",
    "execute",
    "record",
    "respond",
    "live",
    "now_value",
]

_sha256 = hashlib.sha256
# Enum members looked up once: the pipeline names its phase at every step.
_PARSE, _VALIDATE, _AUTHORIZE, _EXECUTE, _RECORD = (
    Phase.PARSE,
    Phase.VALIDATE,
    Phase.AUTHORIZE,
    Phase.EXECUTE,
    Phase.RECORD,
)

PROPOSAL_FIELDS = frozenset({"schema_version", "id", "action", "args", "reasoning"})
PROPOSAL_REQUIRED = ("schema_version", "id", "action", "args")
PROPOSAL_VERSIONS = frozenset({1})

#: Step kinds answered inside the process: nothing of the run reaches the world through
#: them, so they need no earlier result to be durable first (docs/spec.md 3.4).
_LOCAL_KINDS = frozenset({"clock.now", "random", "uuid", "sleep"})


def now_value(ms: int) -> datetime.datetime:
    """The datetime a ``clock.now`` step's result (ms since the epoch) stands for."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


# -- RECEIVE -------------------------------------------------------------------------------
def receive(state: RunState, count: int = 1) -> int:
    """Number ``count`` steps (a gather's members, or one step); returns the first number."""
    with state.lock:
        first = state.next_step
        state.next_step = first + count
    return first


# -- the live pipeline ---------------------------------------------------------------------
def live(
    state: RunState,
    step: int,
    request: StepRequest,
    *,
    intent_written: bool = False,
    key: str | None = None,
) -> Any:
    """PARSE to RESPOND for a step answered by the world (recording, or resuming an effect
    whose intent is journaled: ``intent_written``, with the ``key`` it was first given)."""
    kind = request.kind
    doc: dict[str, Any] = {"step": step, "kind": kind, "name": request.name}
    sandbox = state.env.sandbox if kind == "fs" or kind == "proposal" else None
    if sandbox is not None:
        # Same proposal + same policy + same filesystem state = same outcome: the state
        # is part of the record of every filesystem and proposal step.
        doc["sandbox"] = {"before": sandbox.state_hash(), "after": None}
    journal = state.journal
    phase = _PARSE
    result: Any = None
    result_canonical: bytes | None = None
    try:
        request = parse(state, request, doc)
        kind = request.kind
        side_effect = request.side_effect
        phase = _VALIDATE
        validate(request)
        tool = request.tool
        doc["timeout_ms"] = tool.timeout_ms if tool is not None else None
        phase = _AUTHORIZE
        authorize(state, step, request, doc)
        phase = _EXECUTE
        if side_effect != "read_only" and journal is not None:
            if side_effect == "idempotent":
                canonical = request.canonical
                assert canonical is not None  # PARSE checked it
                key = key or idempotency_key(state.run_id, step, canonical)
                doc["idempotency_key"] = key
            if not intent_written:
                journal.intent(doc, _known_args(request, doc))
                intent_written = True
        if journal is not None and kind not in _LOCAL_KINDS:
            # An earlier irreversible result is durable before this step leaves the process
            # (a no-op when the intent's durable append above already covered it).
            journal.settle()
        result, attempts = execute(state, step, request, key)
        doc["attempts"] = attempts
        if sandbox is not None and kind == "fs":
            doc["sandbox"]["after"] = sandbox.state_hash()
        phase = _RECORD
        if type(result) is Encoded:
            # A door that serialized its result already (a captured exchange).
            result, result_canonical = result.value, result.data
        else:
            try:
                result_canonical = dumps(result)
            except CanonicalError as exc:
                raise StepFailure(RESULT_NOT_JSON, f"result of {request.name!r}: {exc.message}") from None
        result_hash = _sha256(result_canonical).hexdigest()
        if tool is not None and tool.result_schema is not None:
            problem = tool.validate_result(result)
            if problem is not None:
                # A contract drift: the result is journaled only by its hash, never passed on.
                raise StepFailure(
                    RESULT_CONTRACT,
                    f"result of {request.name!r} breaks its output contract: {problem}",
                    tool=request.name,
                    result_hash=result_hash,
                )
        if kind == "llm":
            model = answered_model(result)
            if model is not None:
                doc["model"] = model
        doc["outcome"] = "SUCCESS"
        doc["code"] = None
        doc["phase"] = None
        doc["result"] = result
        doc["error"] = None
        args_hash = request.args_hash
        assert args_hash is not None  # PARSE checked it
        state.hashes[step] = (args_hash, result_hash)
    except StepFailure as failure:
        _failed(doc, request, phase, failure)
        if journal is not None and isinstance(failure.__cause__, Exception):
            journal.traceback(
                {"step": step, "where": "tool", "exception": type(failure.__cause__).__name__,
                 "traceback": audit_traceback(failure.__cause__)}
            )
    known = _known_args(request, doc)
    if result_canonical is not None and doc["result"] is result:
        known["result"] = result_canonical
    record(state, journal, doc, intent_written, known)
    if doc["outcome"] == "SUCCESS":
        return doc["result"]
    return respond(step, doc)


def _known_args(request: StepRequest, doc: dict[str, Any]) -> dict[str, bytes]:
    """The members of ``doc`` serialized already: its arguments, when they are the
    request's (canonicalized when the request was made)."""
    canonical = request.canonical
    if canonical is not None and doc.get("args") is request.args:
        return {"args": canonical}
    return {}


def _failed(doc: dict[str, Any], request: StepRequest, phase: Phase, failure: StepFailure) -> None:
    """Fill the effect document of a step that ended with ``failure`` in ``phase``."""
    doc.setdefault("class", request.side_effect)
    if "args" not in doc:
        json_args = request.canonical is not None if request.kind != "proposal" else _is_json(request.args)
        doc["args"] = request.args if json_args else None
    if phase is _EXECUTE:
        # The effect was tried: record how many times (a resume counts it in the budgets
        # again only when attempts > 0, as the live run did at AUTHORIZE).
        attempt = failure.details.get("attempt")
        tried = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0 else 1
        doc.setdefault("attempts", tried)
    doc.setdefault("attempts", 0)
    doc.setdefault("timeout_ms", None)
    doc.update(
        outcome=failure.outcome.value,
        code=failure.step_code.code,
        phase=phase.value,
        result=None,
        error={"message": failure.message, "details": _jsonable(failure.details)},
    )


# -- PARSE ---------------------------------------------------------------------------------
def parse(state: RunState, request: StepRequest, doc: dict[str, Any]) -> StepRequest:
    """A proposal becomes the tool request it proposes; the arguments must be canonical
    JSON (checked once, when the request was made)."""
    if request.kind == "proposal":
        request = parse_proposal(state, request, doc)
        doc["name"] = request.name
    doc["class"] = request.side_effect
    if request.canonical is None:
        problem = request.problem or "not canonical JSON"
        doc["args"] = {"__unserializable__": problem}
        raise StepFailure(ARGS_NOT_JSON, problem)
    doc["args"] = request.args
    return request


def parse_proposal(state: RunState, request: StepRequest, doc: dict[str, Any]) -> StepRequest:
    """Read ``{schema_version, id, action, args, reasoning}`` strictly."""
    raw = request.args
    if isinstance(raw, (str, bytes)):
        try:
            raw = loads(raw)
        except CanonicalError as exc:
            doc["args"] = None
            raise StepFailure(PROPOSAL_NOT_JSON, exc.message) from None
    if not isinstance(raw, dict):
        raise StepFailure(PROPOSAL_NOT_OBJECT, f"a proposal is a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - PROPOSAL_FIELDS)
    if unknown:
        raise StepFailure(PROPOSAL_UNKNOWN_FIELD, f"unknown proposal member(s) {unknown}", fields=unknown)
    missing = [name for name in PROPOSAL_REQUIRED if name not in raw]
    if missing:
        raise StepFailure(PROPOSAL_MISSING_FIELD, f"missing proposal member(s) {missing}", fields=missing)
    version = raw["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise StepFailure(PROPOSAL_BAD_FIELD, "schema_version must be an integer", field="schema_version")
    if version not in PROPOSAL_VERSIONS:
        raise StepFailure(PROPOSAL_VERSION, f"schema_version {version} is not supported", supported=sorted(PROPOSAL_VERSIONS))
    if not isinstance(raw["id"], str) or not raw["id"]:
        raise StepFailure(PROPOSAL_BAD_FIELD, "id must be a non-empty string", field="id")
    if not isinstance(raw["action"], str) or not raw["action"]:
        raise StepFailure(PROPOSAL_BAD_FIELD, "action must be a non-empty string", field="action")
    if not isinstance(raw["args"], dict):
        raise StepFailure(PROPOSAL_BAD_FIELD, "args must be a JSON object", field="args")
    reasoning = raw.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        raise StepFailure(PROPOSAL_BAD_FIELD, "reasoning must be a string", field="reasoning")
    # The reasoning is recorded for audit only: it is never passed to a decision.
    doc["proposal"] = {"id": raw["id"], "schema_version": version, "reasoning": reasoning}
    return tool_request(state.env.tools, raw["action"], raw["args"])


# -- VALIDATE ------------------------------------------------------------------------------
def validate(request: StepRequest) -> None:
    if request.perform is not None:
        # A captured HTTP exchange (kind http, or llm when it is a recognised LLM API call).
        args = request.args
        if not isinstance(args, dict) or not isinstance(args.get("method"), str) or not isinstance(args.get("url"), str):
            raise StepFailure(HTTP_REQUEST_INVALID, "a captured request needs a method and a URL")
        if request.kind == "llm" and (not isinstance(args.get("model"), str) or not args["model"]):
            raise StepFailure(LLM_REQUEST_INVALID, "the LLM request names no model")
    elif request.kind in ("tool", "fs"):
        if request.tool is None:
            raise StepFailure(TOOL_UNKNOWN, f"no tool named {request.name!r} is registered", tool=request.name)
        problem = request.tool.validate(request.args)
        if problem is not None:
            raise StepFailure(ARGS_SCHEMA, f"{request.name}: {problem}", tool=request.name)
    elif request.kind == "llm":
        args = request.args
        if not isinstance(args.get("model"), str) or not args["model"]:
            raise StepFailure(LLM_REQUEST_INVALID, "model must be a non-empty string")
        max_tokens = args.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise StepFailure(LLM_REQUEST_INVALID, "max_tokens must be a positive integer")
        if ("messages" in args) == ("prompt" in args):
            raise StepFailure(LLM_REQUEST_INVALID, "give exactly one of messages= or prompt=")


# -- AUTHORIZE -----------------------------------------------------------------------------
def authorize(state: RunState, step: int, request: StepRequest, doc: dict[str, Any]) -> None:
    kind = request.kind
    decision: Decision | None
    if request.perform is not None:
        if kind != "llm":
            # A captured request that can change the world meets the class stops
            # (`tracelock stop --irreversible`) as a tool of its class does.
            _check_stops(state, request)
        # The host, method and path first: an LLM API call is an HTTP request too.
        http = _decide_http(state, request, doc)
        if not http.allowed:
            raise http.failure()
        if kind == "llm":
            model, max_tokens = _llm_limits(state, request)
            decision = state.policy.static_decision("llm", "llm", "read_only", model, max_tokens)
        else:
            decision = http
    elif kind == "llm":
        args = request.args
        decision = state.policy.static_decision("llm", "llm", "read_only", args["model"], args["max_tokens"])
    elif kind == "tool" or kind == "fs":
        _check_stops(state, request)
        decision = state.policy.static_decision(kind, request.name, request.side_effect)
    else:
        return
    if decision is None:
        decision = _decide(state, request, doc)
    if not decision.allowed:
        raise decision.failure()
    if state.daily is not None:
        _check_daily(state, request, doc)
    if decision.requires_approval:
        _check_approval(state, step, request, doc, decision)
    with state.lock:
        state.effect_count += 1
        if kind == "llm":
            state.llm_calls += 1


def _decide(state: RunState, request: StepRequest, doc: dict[str, Any]) -> Decision:
    """The policy's decision when the arguments or the usage may matter (budgets,
    argument constraints)."""
    policy = state.policy
    usage = _usage(state, doc)
    if request.kind == "llm":
        model, max_tokens = _llm_limits(state, request)
        auth = AuthorizationRequest(kind="llm", name="llm", args={}, model=model, max_tokens=max_tokens)
    else:
        auth = AuthorizationRequest(
            kind="fs" if request.kind == "fs" else "tool",
            name=request.name,
            args=request.args,
            side_effect=request.side_effect,  # type: ignore[arg-type]
        )
    return policy.authorize(auth, usage)


def _check_daily(state: RunState, request: StepRequest, doc: dict[str, Any]) -> None:
    """The run's daily budgets (per agent, per tenant, across runs): decided against the
    store's ledger, and what the decision saw is recorded in the step (``daily``), so that
    replay answers it without the ledger."""
    ledger, daily = state.env.ledger, state.daily
    if ledger is None or daily is None or not state.policy.has_daily_budgets:
        return
    ledger.poll()
    requested = {"effects": 1}
    if request.kind == "llm":
        requested["llm_calls"] = 1
        requested["tokens"] = _llm_limits(state, request)[1]
    with state.lock:
        usage = state.daily_usage()
    doc["daily"] = {"day": daily.day}
    doc["daily"] = ledger.charge(daily, state.policy, usage, requested)


def _usage(state: RunState, doc: dict[str, Any]) -> Usage:
    elapsed = 0
    if state.policy.budget("wall_time_ms") is not None:
        elapsed = max(0, state.env.clock_ms() - state.start_ms)
        doc["elapsed_ms"] = elapsed
    return Usage(
        llm_calls=state.llm_calls,
        tokens=state.tokens,
        cost_micro_usd=state.cost_micro_usd,
        effects=state.effect_count,
        elapsed_ms=elapsed,
    )


def _check_stops(state: RunState, request: StepRequest) -> None:
    """The emergency stops (before the policy and any approval): DENIED [TOOL_STOPPED]."""
    stops = state.env.stops
    if stops is not None:
        if request.side_effect != "read_only":
            stops.poll()  # a stop another process wrote reaches runs in flight
        if stops.active:
            stops.check(request.name, request.side_effect)


def _decide_http(state: RunState, request: StepRequest, doc: dict[str, Any]) -> Decision:
    """The policy's ``[http]`` decision on a captured request's method, host and path."""
    parts = urllib.parse.urlsplit(request.args["url"])
    method, host, path = request.args["method"], parts.netloc.rpartition("@")[2].lower(), parts.path or "/"
    decision = state.policy.static_http_decision(method, host, path, request.side_effect)
    if decision is not None:
        return decision
    auth = AuthorizationRequest(
        kind="http",
        name=f"{method} {host}{path}",
        args={"method": method, "host": host, "path": path},
        side_effect=request.side_effect,  # type: ignore[arg-type]
    )
    return state.policy.authorize(auth, _usage(state, doc))


def _llm_limits(state: RunState, request: StepRequest) -> tuple[str, int]:
    """The model and token cap the policy judges an LLM step by. A captured call that sets
    no cap is judged as asking for none (0) unless the policy caps calls (llm.max_tokens):
    then it is denied, since nothing bounds what it may use."""
    args = request.args
    max_tokens = args.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        cap = state.policy.llm_max_tokens() if request.perform is not None else None
        if cap is not None:
            raise StepFailure(
                LLM_MAX_TOKENS,
                f"the call sets no max_tokens; llm.max_tokens is {cap}",
                requested=None,
                limit=cap,
            )
        max_tokens = 0
    return str(args["model"]), max_tokens


def _check_approval(state: RunState, step: int, request: StepRequest, doc: dict[str, Any], decision: Decision) -> None:
    # A fork's live steps are not the parent's: a human's approval in the parent is no
    # approval of them.
    recording = state.recording
    usable = recording is not None and state.is_usable(step)
    approval = recording.approvals.get(step) if recording is not None and usable else None
    ttl = state.policy.approval_ttl_ms(request.name)
    # The window was set (and journaled) when the run first began waiting on this step.
    expires = recording.approval_expiry.get(step) if recording is not None and usable and ttl is not None else None
    if approval is None:
        if expires is not None:
            # Resumed with no approval: judged by a clock reading that the step records.
            now = state.env.clock_ms()
            if now > expires:
                doc["approval"] = {"by": None, "decision": None, "expires_ms": expires, "checked_ms": now}
                raise StepFailure(
                    APPROVAL_EXPIRED,
                    f"step {step} ({request.name}): no approval arrived before its window closed "
                    f"(ttl {ttl} ms, closed at {expires}, checked at {now})",
                    ttl_ms=ttl,
                    expires_ms=expires,
                    checked_ms=now,
                )
        doc["awaiting_approval"] = True
        details = None
        if ttl is not None:
            details = {"ttl_ms": ttl, "expires_ms": expires if expires is not None else state.env.clock_ms() + ttl}
        raise Suspend(
            "awaiting_approval",
            step,
            f"step {step} ({request.name}) requires human approval: {decision.reason}",
            details,
        )
    doc["approval"] = {"by": approval.get("by"), "decision": approval.get("decision")}
    if expires is not None and recording is not None:
        # Judged by the approval entry's own journaled time: replay reads the same.
        at = recording.approval_ms.get(step, 0)
        doc["approval"].update(expires_ms=expires, at_ms=at)
        if at > expires and approval.get("decision") == "approved":
            raise StepFailure(
                APPROVAL_EXPIRED,
                f"step {step} ({request.name}): the approval by {approval.get('by')} arrived at {at}, "
                f"after its window closed at {expires} (ttl {ttl} ms)",
                ttl_ms=ttl,
                expires_ms=expires,
                approved_ms=at,
            )
    if approval.get("decision") != "approved":
        raise StepFailure(
            APPROVAL_REJECTED,
            f"step {step} ({request.name}) was rejected by {approval.get('by')}: "
            f"{approval.get('reason', '')}",
        )


def count_recorded(state: RunState, doc: Mapping[str, Any], *, inherited: bool = False) -> None:
    """Account a step answered from the recording in the budgets, as the live one was;
    ``inherited``: a fork child's step from its parent (see ``RunState.inherited``)."""
    if doc.get("kind") not in ("tool", "fs", "llm", "http") or doc.get("attempts", 0) == 0:
        return
    with state.lock:
        before = state.counters()
        state.effect_count += 1
        if doc.get("kind") == "llm":
            state.llm_calls += 1
            args = doc.get("args")
            model = args.get("model") if isinstance(args, dict) else None
            result = doc.get("result")
            if isinstance(args, dict) and "url" in args and isinstance(result, dict):
                result = result.get("llm")  # a captured call: its answer's part
            _account_llm(state, result, model if isinstance(model, str) else None)
        if inherited:
            state.inherit(before)


def _account_llm(state: RunState, response: Any, model: str | None) -> None:
    """Add an LLM response's tokens and cost to the run's counters (the caller holds the
    lock). Unknown figures add nothing: :func:`_check_usage` has failed the live step whose
    budget needed them."""
    tokens = tokens_of(response)
    if tokens is not None:
        state.tokens += tokens[0] + tokens[1]
    cost = cost_of(response, state.policy.price(model) if model is not None else None)
    if cost is not None:
        state.cost_micro_usd += cost


def _check_usage(state: RunState, response: Any, model: str | None) -> None:
    """An LLM response must say what a budget of the run needs (item: never a silent zero)."""
    policy = state.policy
    if policy.budget("tokens") is not None and tokens_of(response) is None:
        usage = response.get("usage") if isinstance(response, dict) else None
        raise StepFailure(
            LLM_USAGE_UNKNOWN,
            "a tokens budget is set and the response's usage is in no known shape "
            "(prompt_tokens/completion_tokens or input_tokens/output_tokens)",
            usage_keys=sorted(usage) if isinstance(usage, dict) else None,
        )
    if policy.budget("cost_micro_usd") is not None:
        price = policy.price(model) if model is not None else None
        if cost_of(response, price) is None:
            raise StepFailure(
                LLM_COST_UNKNOWN,
                f"a cost budget is set and neither the response nor llm.prices gives the cost of {model!r}",
                model=model,
            )


# -- EXECUTE -------------------------------------------------------------------------------
def execute(state: RunState, step: int, request: StepRequest, key: str | None) -> tuple[Any, int]:
    """Run the effect; returns its result and the number of attempts it took."""
    kind = request.kind
    env = state.env
    if kind == "tool" or kind == "fs":
        tool = request.tool
        assert tool is not None
        return _run_tool(state, tool, request.args, key)
    if kind == "llm" and env.held is not None:
        found, held = env.held.take(request.canonical)
        if found:
            answer = held.get("llm") if request.perform is not None and isinstance(held, dict) else held
            with state.lock:
                _account_llm(state, answer, request.args.get("model"))
            return held, 1
    perform = request.perform
    if perform is not None:
        try:
            result = perform()
        except StepFailure:
            raise
        except Exception as exc:
            raise StepFailure(HTTP_TRANSPORT_ERROR, f"{type(exc).__name__}: {exc}", exception=type(exc).__name__) from None
        # Only an answer carries usage (a 429 or a 5xx does not): it is under "llm".
        document = result.value if type(result) is Encoded else result
        llm_result = document.get("llm") if kind == "llm" and isinstance(document, dict) else None
        if llm_result is not None:
            model = request.args["model"]
            _check_usage(state, llm_result, model)
            with state.lock:
                _account_llm(state, llm_result, model)
        return result, 1
    if kind == "llm":
        provider = env.toolkit.llm
        if provider is None:
            raise StepFailure(LLM_NOT_CONFIGURED, "Runtime(llm=...) was not given a provider")
        try:
            response = env.ask(provider, dict(request.args))
        except Exception as exc:
            raise StepFailure(LLM_PROVIDER_ERROR, f"{type(exc).__name__}: {exc}", exception=type(exc).__name__) from None
        if not isinstance(response, dict) or not isinstance(response.get("content"), str):
            raise StepFailure(LLM_RESPONSE_INVALID, "the provider must return {'content': str, ...}")
        _check_usage(state, response, request.args["model"])
        with state.lock:
            _account_llm(state, response, request.args["model"])
        return response, 1
    if kind == "clock.now":
        return env.clock_ms(), 1
    if kind == "random":
        digest = _sha256(state.seed + b"random" + step.to_bytes(8, "big")).digest()
        return (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53), 1
    if kind == "uuid":
        raw = bytearray(_sha256(state.seed + b"uuid" + step.to_bytes(8, "big")).digest()[:16])
        raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
        raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
        return str(uuid_module.UUID(bytes=bytes(raw))), 1
    if kind == "sleep":
        env.sleep(request.args["ms"] / 1000)
        return None, 1
    raise AssertionError(f"no executor for step kind {kind!r}")  # every kind is above


def _run_tool(state: RunState, tool: Tool, args: Mapping[str, Any], key: str | None) -> tuple[Any, int]:
    env = state.env
    policy = tool.retry
    last: StepFailure | None = None
    for attempt in range(1, policy.max_attempts + 1):
        if attempt > 1:
            env.sleep(policy.delay_before(attempt) / 1000)
        kwargs = dict(args)
        if tool.wants_idempotency_key:
            kwargs["idempotency_key"] = key
        try:
            return env.invoke(tool, kwargs), attempt
        except TimeoutError:
            last = StepFailure(TOOL_TIMEOUT, f"{tool.name} did not finish within {tool.timeout_s}s", attempt=attempt)
            retryable = any(issubclass(TimeoutError, kind) for kind in policy.retry_on)
        except StepFailure as failure:  # a tool (e.g. the sandbox) ending the step itself
            failure.details.setdefault("attempt", attempt)
            raise
        except Exception as exc:
            last = StepFailure(
                TOOL_RAISED,
                f"{tool.name} raised {type(exc).__name__}: {exc}",
                exception=type(exc).__name__,
                attempt=attempt,
            )
            last.__cause__ = exc  # its traceback is journaled, audit only
            retryable = isinstance(exc, policy.retry_on)
        if not retryable:
            break
    assert last is not None
    raise last


# -- RECORD --------------------------------------------------------------------------------
def record(
    state: RunState,
    journal: RunJournal | None,
    doc: dict[str, Any],
    intent_written: bool,
    known: Mapping[str, bytes] | None = None,
) -> None:
    """Journal the step's outcome, whatever it is: as a result of the intent already in the
    journal, or as one effect entry. ``known``: the canonical bytes of members the step
    serialized already (``args``, ``result``), journaled as they are."""
    if journal is not None:
        if intent_written:
            result_doc = {
                key: doc.get(key) for key in ("step", "outcome", "code", "phase", "result", "error", "attempts")
            }
            if "sandbox" in doc:
                result_doc["sandbox"] = doc["sandbox"]
            journal.result(result_doc, irreversible=doc.get("class") == "irreversible", known=known)
        else:
            journal.effect(doc, known)
    state.effects[doc["step"]] = doc


# -- RESPOND -------------------------------------------------------------------------------
def respond(step: int, doc: Mapping[str, Any]) -> Any:
    """The step's result for the door, or the :class:`StepError` its failure becomes."""
    if doc.get("outcome") != "SUCCESS":
        error = doc.get("error") or {}
        raise StepError(
            outcome=Outcome(str(doc.get("outcome"))),
            step_code=str(doc.get("code")),
            phase=Phase(doc.get("phase") or "EXECUTE"),
            step=step,
            message=str(error.get("message", "")),
            details=error.get("details") if isinstance(error.get("details"), dict) else None,
        )
    return doc.get("result")


def _is_json(value: Any) -> bool:
    try:
        dumps(value)
    except CanonicalError:
        return False
    return True


def _jsonable(details: Mapping[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in details.items():
        clean[str(key)] = value if _is_json(value) else repr(value)
    return clean
