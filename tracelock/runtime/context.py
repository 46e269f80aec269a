"""The run context: the only door between an agent and the outside world.

Every door (``call``, ``llm``, ``submit``, ``now``, ``random``, ``uuid``, ``sleep``,
``gather``) turns the request into a numbered *step* that passes the same seven phases:

RECEIVE   the step gets its number (in the order the agent asks; a gather numbers its
          members in argument order before any of them runs)
PARSE     the request must be canonical JSON (a proposal is parsed strictly)
VALIDATE  the tool must exist and the arguments must satisfy its schema
AUTHORIZE the policy decides (deny by default; budgets; human approval)
EXECUTE   the tool runs, with its timeout and retry policy
RECORD    the result must be canonical JSON; it is journaled
RESPOND   the agent gets the result, or a :class:`StepError`

When the context carries a recording (resume, replay, fork), a step that was recorded is
answered from it instead: the request must match the recorded one in kind, name and
canonical arguments, or the run stops with a divergence report. The first divergence is
final: it is raised as :class:`Diverged` (which ``except Exception`` does not catch), kept by
the context, and raised again by every later door, so agent code can neither turn it into a
match nor move it. A gather is judged member by member in the order the code lists them.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import threading
import uuid as uuid_module
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from tracelock.core.canonical import CanonicalError, dumps, loads
from tracelock.core.jsondiff import diff
from tracelock.runtime.errors import Diverged, StepError
from tracelock.runtime.outcomes import Outcome, Phase, StepFailure, register_code
from tracelock.runtime.policy import AuthorizationRequest, Decision, Policy, Usage
from tracelock.runtime.records import RunJournal, RunRecord
from tracelock.runtime.strict import door
from tracelock.runtime.tools import Tool

if TYPE_CHECKING:
    from tracelock.runtime.runtime import Runtime

__all__ = ["RunContext", "Task", "Suspend", "ParentPrefix"]

V = Outcome.VALIDATION_ERROR
D = Outcome.DENIED
X = Outcome.EXECUTION_ERROR

TOOL_UNKNOWN = register_code("TOOL_UNKNOWN", V, "the requested tool is not registered")
ARGS_NOT_JSON = register_code("ARGS_NOT_JSON", V, "the arguments are not canonical JSON (NaN, non-string keys, unsupported types...)")
ARGS_SCHEMA = register_code("ARGS_SCHEMA_MISMATCH", V, "the arguments do not satisfy the tool's JSON Schema")
PROPOSAL_NOT_JSON = register_code("PROPOSAL_NOT_JSON", V, "the proposal text is not strict JSON")
PROPOSAL_NOT_OBJECT = register_code("PROPOSAL_NOT_OBJECT", V, "the proposal is not a JSON object")
PROPOSAL_UNKNOWN_FIELD = register_code("PROPOSAL_UNKNOWN_FIELD", V, "the proposal has a top-level member outside {schema_version, id, action, args, reasoning}")
PROPOSAL_MISSING_FIELD = register_code("PROPOSAL_MISSING_FIELD", V, "the proposal lacks schema_version, id, action or args (nothing is generated for it)")
PROPOSAL_BAD_FIELD = register_code("PROPOSAL_BAD_FIELD", V, "a proposal member has the wrong type or form")
PROPOSAL_VERSION = register_code("PROPOSAL_SCHEMA_VERSION", V, "the proposal's schema_version is not supported")
LLM_REQUEST_INVALID = register_code("LLM_REQUEST_INVALID", V, "the LLM request is malformed (model, prompt/messages, max_tokens)")
APPROVAL_REJECTED = register_code("APPROVAL_REJECTED", D, "a human rejected the step that required approval")
TOOL_RAISED = register_code("TOOL_RAISED", X, "the tool raised an exception")
TOOL_TIMEOUT = register_code("TOOL_TIMEOUT", X, "the tool did not finish within its timeout")
RESULT_NOT_JSON = register_code("RESULT_NOT_JSON", X, "the tool returned a value that is not canonical JSON")
LLM_NOT_CONFIGURED = register_code("LLM_NOT_CONFIGURED", X, "the runtime has no LLM provider")
LLM_PROVIDER_ERROR = register_code("LLM_PROVIDER_ERROR", X, "the LLM provider raised an exception")
LLM_RESPONSE_INVALID = register_code("LLM_RESPONSE_INVALID", X, "the LLM provider's response is not a JSON object with a string 'content'")
OPERATOR_RESOLVED_FAILURE = register_code("OPERATOR_RESOLVED_FAILURE", X, "an operator recorded that the step failed")

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


class Suspend(BaseException):
    """Unwinds the agent when the run must wait (approval) or is blocked. Not an error:
    it derives from BaseException so that an agent's ``except Exception`` cannot swallow it."""

    def __init__(self, status: str, step: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.step = step
        self.reason = reason


@dataclass(frozen=True)
class Task:
    """A deferred effect for :meth:`RunContext.gather`."""

    kind: str
    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class ParentPrefix:
    """A fork child's steps before its fork point (``before``): answered from the parent's
    record (``run``), and copied into the child's journal, marked with their origin, unless
    the child's journal already holds the copy (``copied``: a resumed child)."""

    run: str
    before: int
    copied: frozenset[int] = frozenset()


@dataclass(slots=True)
class _Request:
    kind: str
    name: str
    args: Any
    side_effect: str = "read_only"
    tool: Tool | None = None


@dataclass(slots=True)
class _Counters:
    llm_calls: int = 0
    tokens: int = 0
    cost_micro_usd: int = 0
    effects: int = 0


def _now_value(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


class RunContext:
    """What an agent receives. Create runs through :class:`tracelock.Runtime`, not directly."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        run_id: str,
        input: Any,
        seed: str,
        journal: RunJournal | None,
        recording: RunRecord | None = None,
        replay_only: bool = False,
        fork_before: int | None = None,
        prefix: ParentPrefix | None = None,
        start_ms: int = 0,
        policy: Policy | None = None,
        annotations: dict[str, Any] | None = None,
    ) -> None:
        self.run_id = run_id
        self.input = input
        #: What the run recorded beside its input (e.g. a proposal's reasoning): audit only,
        #: never part of the fingerprint.
        self.annotations: dict[str, Any] = dict(annotations or {})
        self._runtime = runtime
        self.policy = policy if policy is not None else runtime.policy
        self._seed = bytes.fromhex(seed)
        self._journal = journal
        self._recording = recording
        self._replay_only = replay_only
        self._fork_before = fork_before
        if prefix is None and fork_before is not None and recording is not None:
            prefix = ParentPrefix(recording.run_id, fork_before)
        self._prefix = prefix
        self._start_ms = start_ms
        self._next_step = 0
        self._lock = threading.Lock()
        self._counters = _Counters()
        self.effects: dict[int, dict[str, Any]] = {}
        self.routing: list[dict[str, Any]] = []
        self.reused: list[int] = []
        #: H(args), H(result) of steps executed live, computed once for the fingerprint.
        self.hashes: dict[int, tuple[str, str | None]] = {}
        self._patches: set[str] = set()
        self._divergence: dict[str, Any] | None = None

    @property
    def divergence(self) -> dict[str, Any] | None:
        """The first divergence from the recording, once one was detected: the run's verdict."""
        return self._divergence

    # -- doors -------------------------------------------------------------------------
    @door
    def call(self, tool: str | Callable[..., Any], /, **args: Any) -> Any:
        """Call a registered tool (by name or by the decorated function)."""
        return self._step(self._tool_request(tool, args))

    @door
    def llm(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]] | None = None,
        prompt: str | None = None,
        max_tokens: int = 1024,
        **params: Any,
    ) -> dict[str, Any]:
        """Call the runtime's LLM provider. Returns the provider's response document
        (at least ``{"content": str}``)."""
        args: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
        if messages is not None:
            args["messages"] = messages
        if prompt is not None:
            args["prompt"] = prompt
        if params:
            args["params"] = params
        result: dict[str, Any] = self._step(_Request("llm", "llm", args))
        return result

    @door
    def submit(self, proposal: Any) -> Any:
        """Submit an LLM's action proposal ``{schema_version, id, action, args, reasoning}``
        (a dict or JSON text) as a step. Its reasoning is recorded and never read."""
        return self._step(_Request("proposal", "", proposal))

    @door
    def now(self) -> datetime.datetime:
        """The current time (UTC), read through the runtime's clock and recorded."""
        ms: int = self._step(_Request("clock.now", "now", {}))
        return _now_value(ms)

    @door
    def random(self) -> float:
        """A float in [0, 1), derived from the run's seed and the step number, recorded."""
        value: float = self._step(_Request("random", "random", {}))
        return value

    @door
    def uuid(self) -> uuid_module.UUID:
        """A version-4-shaped UUID derived from the run's seed and the step number, recorded."""
        text: str = self._step(_Request("uuid", "uuid", {}))
        return uuid_module.UUID(text)

    @door
    def sleep(self, seconds: float) -> None:
        """Sleep through the runtime's sleeper; replay does not sleep."""
        self._step(_Request("sleep", "sleep", {"ms": round(seconds * 1000)}))

    @door
    def task(self, tool: str | Callable[..., Any], /, **args: Any) -> Task:
        """A tool call to run inside :meth:`gather`."""
        request = self._tool_request(tool, args)
        return Task(request.kind, request.name, args)

    @door
    def gather(self, *tasks: Task) -> list[Any]:
        """Run several tool calls concurrently. Results come back in argument order; the
        order in which they completed is recorded, and replayed exactly.

        Against a recording, every member is judged before any of them runs, in argument
        order: the first member whose request differs is the divergence, and then a member
        count different from the recorded gather's."""
        if self._divergence is not None:
            raise Diverged(self._divergence)
        with self._lock:
            first = self._next_step
            self._next_step += len(tasks)
        requests = [self._tool_request(task.name, dict(task.args)) for task in tasks]
        steps = list(range(first, first + len(tasks)))
        outcomes: dict[int, tuple[bool, Any]] = {}
        recorded_order = None
        if self._recording is not None:
            self._judge_gather(first, requests)
            if self._is_usable(first):
                recorded_order = self._recording.gather_orders.get(first)
        if recorded_order is not None and all(self._is_recorded(step) for step in steps):
            for step in recorded_order:
                outcomes[step] = self._capture(step, requests[step - first])
            order = list(recorded_order)
        else:
            order = []
            pool = self._runtime._gather_pool
            futures = {
                pool.submit(self._capture, step, request): step
                for step, request in zip(steps, requests, strict=True)
            }
            # Every member finishes (and is journaled) before gather returns or raises: a
            # member that suspends the run (approval) must not leave its siblings running
            # past the suspension. The lowest such step (argument order) is raised.
            escaped: dict[int, BaseException] = {}
            for future in concurrent.futures.as_completed(futures):
                step = futures[future]
                try:
                    outcomes[step] = future.result()
                except BaseException as exc:  # re-raised below, once every member is done
                    escaped[step] = exc
                    continue
                order.append(step)
            if self._divergence is not None:
                raise Diverged(self._divergence)
            if escaped:
                raise escaped[min(escaped)]
        if self._journal is not None and not self._replay_only:
            self._journal.gather_order(first, order)
        results = []
        for step in steps:
            ok, value = outcomes[step]
            if not ok:
                raise value
            results.append(value)
        return results

    def _judge_gather(self, first: int, requests: list[_Request]) -> None:
        """Compare a gather's members with the recording in argument order (never in the
        recorded completion order, which depends on timing), then its member count."""
        recording = self._recording
        assert recording is not None
        order = recording.gather_orders.get(first) if self._is_usable(first) else None
        judged = len(requests) if order is None else min(len(requests), len(order))
        for offset in range(judged):
            step = first + offset
            if not self._is_usable(step):
                return  # a fork's live part: nothing to match
            self._judge(step, requests[offset])
        if order is None or sorted(order) == list(range(first, first + len(requests))):
            return
        if not self._is_usable(first + judged):
            return  # the counts differ only in a fork's live part
        members = sorted(order)
        was = [
            {key: recording.effects.get(step, {}).get(key) for key in ("kind", "name", "args")}
            for step in members
        ]
        now = [_describe(request) for request in requests]
        self._diverge(
            {
                "message": f"step {first + judged}: the gather at step {first} has "
                f"{len(requests)} members; the recorded one has {len(order)} members",
                "step": first + judged,
                "kind": "changed_gather",
                "gather": first,
                "fields": ["members"],
                "diff": diff({"members": was}, {"members": now}),
                "requested": {"members": now},
                "recorded": {"members": was},
            }
        )

    @door
    def route(self, decision: dict[str, Any]) -> None:
        """Record a routing decision (replay: it must equal the recorded one)."""
        if self._divergence is not None:
            raise Diverged(self._divergence)
        position = len(self.routing)
        if self._recording is not None and self._fork_before is None:
            recorded = self._recording.routing
            if position < len(recorded):
                if dumps(recorded[position]) != dumps(decision):
                    self._diverge(
                        {
                            "message": f"routing decision {position} differs from the recorded one",
                            "step": None,
                            "kind": "changed_routing",
                            "recorded": recorded[position],
                            "requested": decision,
                        }
                    )
                self.routing.append(decision)
                return
            if self._replay_only:
                self._diverge(
                    {
                        "message": f"routing decision {position} was not recorded",
                        "step": None,
                        "kind": "added_routing",
                        "recorded": None,
                        "requested": decision,
                    }
                )
        self.routing.append(decision)
        if self._journal is not None:
            self._journal.route(decision)

    @door
    def patched(self, change_id: str) -> bool:
        """True when this run follows the code path introduced by ``change_id``.

        A deliberate code change is accepted by the replay gate when guarded like this::

            if ctx.patched("refund-v2"):
                new behaviour
            else:
                old behaviour

        A new run takes the new path and records the marker; a run recorded before the change
        has no marker, so its replay (or resumption) takes the old path and still matches.
        """
        if self._divergence is not None:
            raise Diverged(self._divergence)
        recording = self._recording
        if recording is not None and self._fork_before is None:
            return change_id in recording.patches
        if self._journal is not None and change_id not in self._patches:
            self._journal.mark("patch", {"id": change_id})
        self._patches.add(change_id)
        return True

    @door
    def mark(self, kind: str, doc: dict[str, Any]) -> None:
        """Journal an informational entry (not an effect; not part of the fingerprint)."""
        if self._divergence is not None:
            raise Diverged(self._divergence)
        if self._journal is not None and not self._replay_only and not self._is_replaying_marks():
            self._journal.mark(kind, doc)

    def _is_replaying_marks(self) -> bool:
        # While a resumed run is still answered from its recording, its marks exist already.
        recording = self._recording
        return recording is not None and self._fork_before is None and self._next_step <= max(
            recording.effects, default=-1
        )

    # -- plumbing ----------------------------------------------------------------------
    def _tool_request(self, tool: str | Callable[..., Any], args: dict[str, Any]) -> _Request:
        name = tool if isinstance(tool, str) else getattr(tool, "__tracelock_tool__", None)
        if not isinstance(name, str):
            name = getattr(tool, "__name__", repr(tool))
        registered = self._runtime.tools.get(name)
        kind = "fs" if name.startswith("fs.") else "tool"
        side_effect = registered.side_effect if registered is not None else "read_only"
        return _Request(kind, name, args, side_effect, registered)

    def _capture(self, step: int, request: _Request) -> tuple[bool, Any]:
        try:
            return True, self._step(request, step=step)
        except StepError as exc:
            return False, exc

    def _is_usable(self, step: int) -> bool:
        """Whether the recording answers ``step`` (a fork reuses only the steps before its
        fork point)."""
        return self._recording is not None and (self._fork_before is None or step < self._fork_before)

    def _is_recorded(self, step: int) -> bool:
        recording = self._recording
        if recording is None or (self._fork_before is not None and step >= self._fork_before):
            return False
        return step in recording.effects

    def _step(self, request: _Request, *, step: int | None = None) -> Any:
        if self._divergence is not None:
            raise Diverged(self._divergence)
        if step is None:
            with self._lock:
                step = self._next_step
                self._next_step += 1
        recording = self._recording
        usable = recording is not None and (self._fork_before is None or step < self._fork_before)
        if usable and recording is not None:
            if step in recording.effects:
                return self._answer_recorded(step, request, recording.effects[step])
            if step in recording.pending and not self._replay_only:
                return self._resume_pending(step, request, recording.pending[step])
        if self._replay_only:
            self._added(step, request)
        return self._live(step, request)

    def _judge(self, step: int, request: _Request) -> None:
        """Raise the divergence that answering ``step`` with the recording would raise,
        without answering it."""
        recording = self._recording
        if recording is not None and self._is_usable(step):
            if step in recording.effects:
                self._mismatch(step, request, recording.effects[step])
                return
            if step in recording.pending and not self._replay_only:
                self._mismatch(step, request, recording.pending[step])
                return
        if self._replay_only:
            self._added(step, request)

    def _added(self, step: int, request: _Request) -> NoReturn:
        self._diverge(
            {
                "message": f"step {step}: the code requests an effect the recording does not have",
                "step": step,
                "kind": "added_effect",
                "requested": _describe(request),
                "recorded": None,
            }
        )

    def _diverge(self, report: dict[str, Any]) -> NoReturn:
        """Keep the first divergence (the verdict) and unwind the agent with it."""
        with self._lock:
            if self._divergence is None:
                self._divergence = report
            first = self._divergence
        raise Diverged(first)

    # -- answering from a recording ------------------------------------------------------
    def _mismatch(self, step: int, request: _Request, recorded: Mapping[str, Any]) -> None:
        requested = _describe(request)
        was = {key: recorded.get(key) for key in ("kind", "name", "args")}
        if _same_json(requested, was):
            return
        changes = diff(was, requested)
        fields = sorted({change["path"].split("/")[1] for change in changes})
        kind = "changed_effect"
        elsewhere = self._recorded_step_like(requested, step)
        if elsewhere is not None:
            kind = "reordered_effect"
        self._diverge(
            {
                "message": f"step {step}: requested {requested['kind']} {requested['name']!r} "
                f"does not match the recorded {was['kind']} {was['name']!r} "
                f"(differs in {', '.join(fields)})"
                + (f"; it was recorded at step {elsewhere}" if elsewhere is not None else ""),
                "step": step,
                "kind": kind,
                "fields": fields,
                "diff": changes,
                "requested": requested,
                "recorded": was,
                "recorded_at": elsewhere,
            }
        )

    def _recorded_step_like(self, requested: Mapping[str, Any], step: int) -> int | None:
        recording = self._recording
        if recording is None:
            return None
        try:
            wanted = dumps(requested)
            for other, doc in sorted(recording.effects.items()):
                if other != step and dumps({key: doc.get(key) for key in ("kind", "name", "args")}) == wanted:
                    return other
        except CanonicalError:
            return None
        return None

    def _answer_recorded(self, step: int, request: _Request, recorded: dict[str, Any]) -> Any:
        self._mismatch(step, request, recorded)
        self._count(recorded)
        self.effects[step] = recorded
        prefix = self._prefix
        if prefix is not None and step < prefix.before and self._journal is not None and not self._replay_only:
            if step not in prefix.copied:
                # A fork copies the reused prefix into its own journal, marked with its origin.
                reused = dict(recorded)
                reused["reused_from"] = {"run": prefix.run, "step": step}
                self._journal.effect(reused)
            self.reused.append(step)
        return self._respond(step, recorded)

    def _respond(self, step: int, doc: Mapping[str, Any]) -> Any:
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

    def _resume_pending(self, step: int, request: _Request, intent: dict[str, Any]) -> Any:
        """An intent without a result: the process died while the effect ran."""
        self._mismatch(step, request, intent)
        if intent.get("class") == "irreversible" and step not in recording_retries(self._recording):
            raise Suspend(
                "blocked",
                step,
                f"irreversible effect {intent.get('name')!r} at step {step} may or may not "
                "have happened; an operator must resolve it",
            )
        key = intent.get("idempotency_key")
        return self._live(step, request, intent_written=True, idempotency_key=key)

    # -- the live pipeline ---------------------------------------------------------------
    def _live(
        self,
        step: int,
        request: _Request,
        *,
        intent_written: bool = False,
        idempotency_key: str | None = None,
    ) -> Any:
        kind = request.kind
        doc: dict[str, Any] = {"step": step, "kind": kind, "name": request.name}
        sandbox = self._runtime.sandbox if kind == "fs" or kind == "proposal" else None
        if sandbox is not None:
            # Same proposal + same policy + same filesystem state = same outcome: the state
            # is part of the record of every filesystem and proposal step.
            doc["sandbox"] = {"before": sandbox.state_hash(), "after": None}
        journal = self._journal
        phase = _PARSE
        try:
            # PARSE
            if kind == "proposal":
                request = self._parse_proposal(request, doc)
                doc["name"] = request.name
                kind = request.kind
            side_effect = request.side_effect
            args = request.args
            doc["class"] = side_effect
            try:
                args_hash = _sha256(dumps(args)).hexdigest()
            except CanonicalError as exc:
                doc["args"] = {"__unserializable__": exc.message}
                raise StepFailure(ARGS_NOT_JSON, exc.message) from None
            doc["args"] = args
            # VALIDATE
            phase = _VALIDATE
            self._validate(request)
            tool = request.tool
            doc["timeout_ms"] = tool.timeout_ms if tool is not None else None
            # AUTHORIZE
            phase = _AUTHORIZE
            self._authorize(step, request, doc)
            # EXECUTE
            phase = _EXECUTE
            if side_effect != "read_only" and journal is not None:
                if side_effect == "idempotent":
                    idempotency_key = idempotency_key or _idempotency_key(self.run_id, step, args)
                    doc["idempotency_key"] = idempotency_key
                if not intent_written:
                    journal.intent(doc)
                    intent_written = True
            result, attempts = self._execute(step, request, doc, idempotency_key)
            doc["attempts"] = attempts
            if sandbox is not None and kind == "fs":
                doc["sandbox"]["after"] = sandbox.state_hash()
            # RECORD
            phase = _RECORD
            try:
                result_hash = _sha256(dumps(result)).hexdigest()
            except CanonicalError as exc:
                raise StepFailure(RESULT_NOT_JSON, f"result of {request.name!r}: {exc.message}") from None
            doc["outcome"] = "SUCCESS"
            doc["code"] = None
            doc["phase"] = None
            doc["result"] = result
            doc["error"] = None
            self.hashes[step] = (args_hash, result_hash)
        except StepFailure as failure:
            doc.setdefault("class", request.side_effect)
            doc.setdefault("args", request.args if _is_json(request.args) else None)
            if phase is _EXECUTE:
                # The effect was tried: record how many times (a resume counts it in the
                # budgets again only when attempts > 0, as the live run did at AUTHORIZE).
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
        # RECORD (the outcome, whatever it is)
        if journal is not None:
            if intent_written:
                self._record_result(journal, doc)
            else:
                journal.effect(doc)
        self.effects[step] = doc
        # RESPOND
        if doc["outcome"] == "SUCCESS":
            return doc["result"]
        return self._respond(step, doc)

    def _record_result(self, journal: RunJournal, doc: dict[str, Any]) -> None:
        """The result of an effect whose intent is in the journal already."""
        result_doc = {
            key: doc.get(key) for key in ("step", "outcome", "code", "phase", "result", "error", "attempts")
        }
        if "sandbox" in doc:
            result_doc["sandbox"] = doc["sandbox"]
        journal.result(result_doc, durable=doc.get("class") == "irreversible")

    def _parse_proposal(self, request: _Request, doc: dict[str, Any]) -> _Request:
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
        return self._tool_request(raw["action"], raw["args"])

    def _validate(self, request: _Request) -> None:
        if request.kind in ("tool", "fs"):
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

    def _authorize(self, step: int, request: _Request, doc: dict[str, Any]) -> None:
        kind = request.kind
        if kind == "llm":
            args = request.args
            decision = self.policy.static_decision("llm", "llm", "read_only", args["model"], args["max_tokens"])
        elif kind == "tool" or kind == "fs":
            decision = self.policy.static_decision(kind, request.name, request.side_effect)
        else:
            return
        if decision is None:
            decision = self._decide(request, doc)
        if not decision.allowed:
            raise decision.failure()
        if decision.requires_approval:
            self._check_approval(step, request, doc, decision)
        with self._lock:
            counters = self._counters
            counters.effects += 1
            if kind == "llm":
                counters.llm_calls += 1

    def _decide(self, request: _Request, doc: dict[str, Any]) -> Decision:
        """The policy's decision when the arguments or the usage may matter (budgets,
        argument constraints)."""
        policy = self.policy
        counters = self._counters
        elapsed = 0
        if policy.budget("wall_time_ms") is not None:
            elapsed = max(0, self._runtime._clock_ms() - self._start_ms)
            doc["elapsed_ms"] = elapsed
        usage = Usage(
            llm_calls=counters.llm_calls,
            tokens=counters.tokens,
            cost_micro_usd=counters.cost_micro_usd,
            effects=counters.effects,
            elapsed_ms=elapsed,
        )
        if request.kind == "llm":
            auth = AuthorizationRequest(
                kind="llm",
                name="llm",
                args={},
                model=request.args["model"],
                max_tokens=request.args["max_tokens"],
            )
        else:
            auth = AuthorizationRequest(
                kind="fs" if request.kind == "fs" else "tool",
                name=request.name,
                args=request.args,
                side_effect=request.side_effect,  # type: ignore[arg-type]
            )
        return policy.authorize(auth, usage)

    def _check_approval(self, step: int, request: _Request, doc: dict[str, Any], decision: Decision) -> None:
        # A fork's live steps are not the parent's: a human's approval in the parent is no
        # approval of them.
        recording = self._recording
        approval = recording.approvals.get(step) if recording is not None and self._is_usable(step) else None
        if approval is None:
            doc["awaiting_approval"] = True
            raise Suspend(
                "awaiting_approval",
                step,
                f"step {step} ({request.name}) requires human approval: {decision.reason}",
            )
        doc["approval"] = {"by": approval.get("by"), "decision": approval.get("decision")}
        if approval.get("decision") != "approved":
            raise StepFailure(
                APPROVAL_REJECTED,
                f"step {step} ({request.name}) was rejected by {approval.get('by')}: "
                f"{approval.get('reason', '')}",
            )

    def _count(self, doc: Mapping[str, Any]) -> None:
        """Account a replayed effect in the budgets, as the live one was."""
        if doc.get("kind") not in ("tool", "fs", "llm") or doc.get("attempts", 0) == 0:
            return
        with self._lock:
            self._counters.effects += 1
            if doc.get("kind") == "llm":
                self._counters.llm_calls += 1
                self._account_llm(doc.get("result"))

    def _account_llm(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        usage = response.get("usage")
        if isinstance(usage, dict):
            tokens = 0
            for key, value in usage.items():
                if key in ("input_tokens", "output_tokens") and isinstance(value, int):
                    tokens += value
            self._counters.tokens += tokens
        cost = response.get("cost_micro_usd")
        if isinstance(cost, int) and not isinstance(cost, bool):
            self._counters.cost_micro_usd += cost

    def _execute(self, step: int, request: _Request, doc: dict[str, Any], key: str | None) -> tuple[Any, int]:
        kind = request.kind
        if kind == "tool" or kind == "fs":
            tool = request.tool
            assert tool is not None
            return self._run_tool(tool, request.args, key)
        runtime = self._runtime
        if kind == "llm":
            provider = runtime.llm_provider
            if provider is None:
                raise StepFailure(LLM_NOT_CONFIGURED, "Runtime(llm=...) was not given a provider")
            try:
                response = provider(dict(request.args))
            except Exception as exc:
                raise StepFailure(LLM_PROVIDER_ERROR, f"{type(exc).__name__}: {exc}", exception=type(exc).__name__) from None
            if not isinstance(response, dict) or not isinstance(response.get("content"), str):
                raise StepFailure(LLM_RESPONSE_INVALID, "the provider must return {'content': str, ...}")
            with self._lock:
                self._account_llm(response)
            return response, 1
        if kind == "clock.now":
            return runtime._clock_ms(), 1
        if kind == "random":
            digest = hashlib.sha256(self._seed + b"random" + step.to_bytes(8, "big")).digest()
            return (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53), 1
        if kind == "uuid":
            raw = bytearray(hashlib.sha256(self._seed + b"uuid" + step.to_bytes(8, "big")).digest()[:16])
            raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
            raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
            return str(uuid_module.UUID(bytes=bytes(raw))), 1
        if kind == "sleep":
            runtime._sleep(request.args["ms"] / 1000)
            return None, 1
        raise AssertionError(f"no executor for step kind {kind!r}")  # every kind is above

    def _run_tool(self, tool: Tool, args: Mapping[str, Any], key: str | None) -> tuple[Any, int]:
        runtime = self._runtime
        policy = tool.retry
        last: StepFailure | None = None
        for attempt in range(1, policy.max_attempts + 1):
            if attempt > 1:
                runtime._sleep(policy.delay_before(attempt) / 1000)
            kwargs = dict(args)
            if tool.wants_idempotency_key:
                kwargs["idempotency_key"] = key
            try:
                return runtime._invoke(tool, kwargs), attempt
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
                retryable = isinstance(exc, policy.retry_on)
            if not retryable:
                break
        assert last is not None
        raise last


def recording_retries(recording: RunRecord | None) -> set[int]:
    """Steps an operator explicitly allowed to run once more (``tracelock resolve --retry``)."""
    return recording.retries if recording is not None else set()


def _idempotency_key(run_id: str, step: int, args: Any) -> str:
    """Stable across re-executions of the same step: derived from run, step and arguments."""
    material = dumps({"run": run_id, "step": step, "args": args})
    return "tlk-" + hashlib.sha256(material).hexdigest()[:40]


def _same_json(a: Any, b: Any) -> bool:
    """Whether two values have the same canonical JSON form.

    Equal orjson texts mean equal JSON values, hence equal canonical forms: the common case
    costs two fast serializations. Different texts may still be the same value (``1.0`` and
    ``1``), so only then is the canonical form compared.
    """
    try:
        if orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS):
            return True
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        return dumps(a) == dumps(b)
    except CanonicalError:
        return False


def _describe(request: _Request) -> dict[str, Any]:
    if request.kind == "proposal":
        raw = request.args
        if isinstance(raw, (str, bytes)):
            try:
                raw = loads(raw)
            except CanonicalError:
                return {"kind": "proposal", "name": "", "args": None}
        if isinstance(raw, dict):
            return {"kind": "proposal", "name": raw.get("action"), "args": raw.get("args")}
        return {"kind": "proposal", "name": "", "args": None}
    return {"kind": request.kind, "name": request.name, "args": request.args}


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
