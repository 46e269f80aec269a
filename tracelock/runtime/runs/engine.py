"""The engine: starts, drives and resumes runs; each run's agent reaches the world through
its context, whose pipeline journals every step. :class:`tracelock.Runtime` adds replay and
recovery on top."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib
import inspect
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

import orjson

from tracelock.core.canonical import CanonicalError, dumps, loads
from tracelock.core.entry import ADMIN_RUN, POLICY_KIND, PROVENANCE_KIND, valid_run_id
from tracelock.core.fingerprint import fingerprint, run_projection, value_hash
from tracelock.runtime import bridge
from tracelock.runtime.bridge import bridged
from tracelock.runtime.daily.journal import refresh_ledger, write_spend
from tracelock.runtime.daily.ledger import DailyLedger, RunDaily, utc_day
from tracelock.runtime.doors.context import AsyncRunContext, RunContext
from tracelock.runtime.doors.current import running
from tracelock.runtime.doors.files import sandbox_tools
from tracelock.runtime.doors.routing import IntentRouter, candidates_for
from tracelock.runtime.doors.workflow import Workflow, WorkflowAgent
from tracelock.runtime.errors import (
    AgentDefinitionError,
    AwaitRequiredError,
    DivergenceError,
    RunStateError,
    StepError,
    Suspend,
)
from tracelock.runtime.outcomes import Outcome, register_code
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.state import Environment
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.policy.sandbox import Sandbox
from tracelock.runtime.provenance.record import Provenance
from tracelock.runtime.records import RunJournal, RunRecord, audit_traceback, load_run
from tracelock.runtime.runs.admission import Admission
from tracelock.runtime.runs.lifecycle import TERMINAL_STATES, check_transition
from tracelock.runtime.runs.ownership import RunOwner
from tracelock.runtime.runs.prefix import child_recording
from tracelock.runtime.stops.board import Stop, StopBoard
from tracelock.runtime.stops.journal import StopWatch, lift_stop, refresh_stops, set_stop
from tracelock.runtime.strict import guard as strict_mode
from tracelock.runtime.strict.guard import NondeterminismError
from tracelock.runtime.tools.invoke import ToolInvoker, is_async_callable
from tracelock.runtime.tools.toolkit import AgentSpec, LlmProvider, Toolkit, agent_name
from tracelock.runtime.tools.tools import Tool
from tracelock.storage.backend import Store
from tracelock.storage.defaults import wall_clock_ms
from tracelock.storage.errors import (
    RunNotFoundError,
    StoreError,
    StoreFormatError,
    StorePermissionError,
)
from tracelock.storage.open import open_store
from tracelock.storage.ownership import DEFAULT_LEASE_MS, Presence

__all__ = [
    "ApprovalExpiredError",
    "Engine",
    "RunExistsError",
    "RunResult",
    "AsyncRunContext",
    "default_seed",
    "keyed_run_id",
    "seed_of",
    "resolve_agent_path",
    "result_from_record",
]

AGENT_RAISED = register_code("AGENT_RAISED", Outcome.EXECUTION_ERROR, "the agent raised an exception that was not a step failure")
OUTPUT_NOT_JSON = register_code("OUTPUT_NOT_JSON", Outcome.EXECUTION_ERROR, "the agent returned a value that is not canonical JSON")

NONDETERMINISM = register_code(
    "NONDETERMINISM_DETECTED",
    Outcome.EXECUTION_ERROR,
    "strict mode: agent code reached for nondeterminism outside the ctx doors",
)

F = TypeVar("F", bound=Callable[..., Any])

#: Strict mode for runtimes that do not say (the test suite turns it on).
STRICT_BY_DEFAULT = False


class ApprovalExpiredError(RunStateError):
    """An approval was given after the step's approval window (its TTL) closed."""

    code = "RUN_APPROVAL_EXPIRED"


class RunExistsError(RunStateError):
    """A new run was asked for under the id of a run the store already holds."""

    code = "RUN_ALREADY_EXISTS"


def seed_of(text: str) -> str:
    """The recorded form of a seed given by a caller: 64 lowercase hex digits are taken as
    they are (so a recorded seed given again is the same seed); any other non-empty
    string ``s`` becomes ``H({"seed": s})``."""
    if not isinstance(text, str) or not text:
        raise AgentDefinitionError("a seed is a non-empty string")
    if len(text) == 64 and all(char in "0123456789abcdef" for char in text):
        return text
    return value_hash({"seed": text})


def keyed_run_id(agent: str, key: str) -> str:
    """The id of ``agent``'s run under idempotency key ``key``: the same in every process,
    so that a key given twice (to ``run`` or ``submit``, anywhere) names one run."""
    return "idem-" + value_hash({"agent": agent, "key": key})[:40]


def default_seed(run_id: str) -> str:
    """The seed of a run that was given none: ``H({"run": run_id})``. The run id comes from
    the runtime's injected id source (or the caller), so every run draws other values from
    ``ctx.random()`` and ``ctx.uuid()``, and the seed is a pure function of the id."""
    return value_hash({"run": run_id})


def _exists_message(record: RunRecord) -> str:
    run_id = record.run_id
    if record.status in TERMINAL_STATES:
        how = (
            f"it has ended ({record.status}); `tracelock retrieve {run_id}` shows its result, "
            f"`tracelock fork {run_id} --at STEP` continues it as a new run; or choose another --run-id"
        )
    else:
        how = f"it is {record.status}; `tracelock resume {run_id}` continues it (Runtime.resume in Python)"
    return f"run {run_id!r} already exists: {how}"


def _open_location(location: str | os.PathLike[str]) -> Store:
    try:
        return open_store(location)
    except (FileExistsError, NotADirectoryError):
        raise StoreFormatError(
            f"{os.fspath(location)} is not a store: a file is in the way of the store directory"
        ) from None
    except PermissionError as exc:
        raise StorePermissionError(f"cannot open the store at {os.fspath(location)}: {exc.strerror}") from None
    except OSError as exc:
        raise StoreFormatError(f"cannot open the store at {os.fspath(location)}: {exc.strerror or exc}") from None


@dataclass
class RunResult:
    """What a run came to. ``status`` is the lifecycle state; ``outcome`` is set once the
    run has ended (``SUCCESS`` or the failing step's outcome)."""

    run_id: str
    status: str
    outcome: str | None
    code: str | None
    output: Any
    fingerprint: str | None
    error: str | None = None
    waiting_step: int | None = None
    parent: dict[str, Any] | None = None
    effects: list[dict[str, Any]] = field(default_factory=list)
    #: The agent's traceback when it raised (audit only: journaled as a ``run.traceback``
    #: entry, never hashed into the fingerprint).
    traceback: str | None = None
    seed: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "SUCCESS"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "outcome": self.outcome,
            "code": self.code,
            "output": self.output,
            "fingerprint": self.fingerprint,
            "error": self.error,
            "waiting_step": self.waiting_step,
            "parent": self.parent,
            "traceback": self.traceback,
            "seed": self.seed,
        }


def _default_ids() -> str:
    return "run-" + os.urandom(10).hex()  # tracelock: allow TL-RAND-004 -- run ids are names, excluded from every determinism hash


def _real_sleep(seconds: float) -> None:
    if bridge.active():
        bridge.wait(asyncio.sleep(seconds))  # an async caller's run: the loop goes on
    else:
        time.sleep(seconds)


def _sleeper(sleep: Callable[[float], Any] | None) -> Callable[[float], None]:
    """The runtime's sleep: the real one, or an injected one (``async def`` ones are
    awaited on the caller's loop in an async caller's run)."""
    if sleep is None:
        return _real_sleep
    if not is_async_callable(sleep):
        return sleep

    def sleep_awaited(seconds: float) -> None:
        if bridge.active():
            bridge.wait(sleep(seconds))
        else:
            asyncio.run(sleep(seconds))

    return sleep_awaited


class Engine:
    """Runs agents deterministically against a store and a policy (the part of
    :class:`tracelock.Runtime` that replay, forks and recovery build on).

    ``store`` is a store or a path (default ``./.tracelock``); ``policy`` a :class:`Policy`,
    a path to a policy file, a mapping, or None for the empty policy (which denies every
    tool and LLM call). ``clock`` (ms), ``sleep`` and ``ids`` are injected; their defaults
    read the real world. ``provenance`` says what each run records of the engine and code
    that produced it (default: this process's engine, the agent's modules, the tools'
    definitions; :class:`Provenance`). ``lease_ms``: how long the lease of a run this runtime
    executes lasts without its heartbeat; ``busy_timeout``: how long a ``run`` with an
    idempotency key waits (seconds) for another owner of its run before ``RUN_BUSY``
    (docs/recovery.md, "One owner per run"). ``loop_lag_ms``: an event-loop lag awaited
    runs are admitted against, so that a loop running many stays responsive at the cost of
    throughput (None, the default: every awaited run starts at once; docs/async.md).
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        policy: Policy | str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        llm: LlmProvider | None = None,
        sandbox: str | os.PathLike[str] | None = None,
        toolkits: tuple[Toolkit, ...] = (),
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], Any] | None = None,
        ids: Callable[[], str] | None = None,
        durability: str = "auto",
        max_workers: int = 16,
        strict: bool | None = None,
        checkpointer: Callable[[Store], object] | None = None,
        provenance: Provenance | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        busy_timeout: float = 60.0,
        loop_lag_ms: float | None = None,
    ) -> None:
        if durability not in ("auto", "strict"):
            raise ValueError("durability is 'auto' or 'strict'")
        if lease_ms < 100:
            raise AgentDefinitionError("a run's lease lasts at least 100 ms")
        self._owns_store = not isinstance(store, Store)
        self.store: Store = (
            store if isinstance(store, Store) else _open_location(store if store is not None else ".tracelock")
        )
        self.policy = _load_policy(policy)
        self.toolkit = Toolkit(llm=llm)
        for toolkit in toolkits:
            self.toolkit.merge(toolkit)
        self._clock_ms = clock or wall_clock_ms
        self._sleep = _sleeper(sleep)
        self._ids = ids or _default_ids
        # An injected id source may repeat itself; the default one cannot, in practice.
        self._check_generated_ids = ids is not None
        self.strict_durability = durability == "strict"
        self._tool_pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tracelock-tool")
        self._gather_pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tracelock-gather")
        self._tool_invoker = ToolInvoker(self._tool_pool)
        self._policies_recorded: set[str] = set()
        self._provenance_recorded: set[str] = set()
        #: Called with the store once a run's run.end is durable (e.g. an evidence
        #: ``Checkpointer`` that signs a checkpoint covering the run).
        self.checkpointer = checkpointer
        #: Strict mode: nondeterminism reached outside the ctx doors raises in agent code.
        self.strict = STRICT_BY_DEFAULT if strict is None else strict
        if self.strict:
            strict_mode.install()
        self._batch = False
        self.sandbox: Sandbox | None = None
        if sandbox is not None:
            Path(sandbox).mkdir(parents=True, exist_ok=True)
            self.sandbox = Sandbox(Path(sandbox), self.policy.sandbox_limits())
            self._register_sandbox(self.sandbox)
        #: What every run's pipeline reads from this runtime.
        self.environment = Environment(
            toolkit=self.toolkit,
            clock_ms=self._clock_ms,
            sleep=self._sleep,
            invoke=self._invoke,
            gather_pool=self._gather_pool,
            sandbox=self.sandbox,
            ask=self._tool_invoker.ask,
        )
        #: What each run records of what produced it (outside the fingerprint).
        self.provenance = provenance if provenance is not None else Provenance()
        #: The emergency stops in force in the store (the admin chain's stop entries).
        self.stops = StopBoard()
        self.environment.stops = self.stops
        self._stop_watch = StopWatch()
        self.stops.refresher = self._poll_stops
        refresh_stops(self.store, self.stops)
        #: What each run of recent days consumed, for the policy's daily budgets (folded
        #: from the admin chain's budget.spend entries; kept only when some are set).
        self.ledger = DailyLedger()
        self._ledger_watch = StopWatch()
        self.ledger.refresher = self._poll_ledger
        if self.policy.has_daily_budgets:
            self.environment.ledger = self.ledger
            refresh_ledger(self.store, self.ledger)
        token = os.urandom(6).hex()  # tracelock: allow TL-RAND-004 -- names this runtime in lease rows and a lock file, decides nothing
        pid = os.getpid()  # tracelock: allow TL-ENV-002 -- names this runtime for operators, decides nothing
        #: This runtime's mark on the store while it lives, so that a recovery in another
        #: process does not take over runs it may be executing (:mod:`tracelock.storage.ownership`).
        self._presence: Presence | None = None
        if not self.store.read_only:
            try:
                self._presence = self.store.ownership().announce(token, pid)
            except (OSError, StoreError):
                self._presence = None  # a store it cannot mark (read-only files): recovery elsewhere cannot see it
        #: The leases of the runs this runtime executes (:mod:`tracelock.runtime.runs.ownership`):
        #: one owner per run, whoever calls. Its name is its mark's (``<pid>-<token>``), which
        #: lets another process see at once that a lease's owner died; a runtime without a
        #: mark is named otherwise, and its leases last until they expire.
        self.owner = RunOwner(self.store, f"{pid}-{token}" if self._presence is not None else f"{pid}-{token}-unmarked", lease_ms)
        #: How long a ``run`` with an idempotency key waits for another owner of its run.
        self.busy_timeout = busy_timeout
        #: How many awaited runs each event loop executes at once (:mod:`.admission`).
        self.admission = Admission(loop_lag_ms)

    # -- registration ------------------------------------------------------------------
    @property
    def tools(self) -> dict[str, Tool]:
        return self.toolkit.tools

    @property
    def llm_provider(self) -> LlmProvider | None:
        return self.toolkit.llm

    def tool(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        """Register a tool on this runtime (see :meth:`Toolkit.tool`; the decorated function
        keeps its type)."""
        return self.toolkit.tool(*args, **kwargs)

    def agent(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        """Register an agent on this runtime (see :meth:`Toolkit.agent`)."""
        return self.toolkit.agent(*args, **kwargs)

    def use(self, toolkit: Toolkit) -> None:
        self.toolkit.merge(toolkit)

    def _register_sandbox(self, sandbox: Sandbox) -> None:
        for tool in sandbox_tools(sandbox):
            self.toolkit.add(tool)

    # -- running -----------------------------------------------------------------------
    def new_run_id(self) -> str:
        """A run id from the runtime's id source, for a caller that must name a run before
        it starts (the CLI, to say which run an interrupt left unfinished)."""
        return self._ids()

    def run(
        self,
        agent: Callable[..., Any] | str,
        input: Any = None,
        *,
        run_id: str | None = None,
        seed: str | None = None,
        idempotency_key: str | None = None,
        tenant: str | None = None,
        _annotations: dict[str, Any] | None = None,
    ) -> RunResult:
        """Run ``agent(ctx, input)`` as a new recorded run.

        ``seed`` feeds ``ctx.random()`` and ``ctx.uuid()``; it is part of the run's
        configuration and recorded in its start. Without one, the seed is derived from the
        run id (:func:`default_seed`), so every run gets its own values.

        With ``idempotency_key``, submitting the same key again never starts a second run:
        it returns the result of the run the key started (if it ended) or continues it (if
        it is unfinished). The run id is derived from the agent and the key.

        ``tenant`` is a key of the caller's (a customer, a team), recorded in the run's
        start; the policy's ``daily_budgets.tenant`` limits what its runs consume per day.
        """
        func, name = self._resolve_agent(agent)
        try:
            input_hash = hashlib.sha256(dumps(input)).hexdigest()
        except CanonicalError as exc:
            raise AgentDefinitionError(f"the run input is not canonical JSON: {exc.message}") from None
        if seed is not None:
            seed = seed_of(seed)
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise AgentDefinitionError("a tenant is a non-empty string")
        if idempotency_key is not None:
            derived = keyed_run_id(name, idempotency_key)
            if run_id is not None and run_id != derived:
                raise AgentDefinitionError("give run_id or idempotency_key, not both")
            # One owner per run: a second caller with the key waits for the first's result
            # (or takes the run over once its owner is gone), never executes beside it.
            with self.owner.owning(derived, wait_s=self.busy_timeout):
                self.store.catch_up()  # what the previous owner appended
                existing = self._existing(derived)
                if existing is None:
                    return self._start(func, name, input, derived, seed, tenant, _annotations, input_hash)
                if dumps(existing.input) != dumps(input):
                    raise RunStateError(
                        f"idempotency key {idempotency_key!r} was used for run {derived} with a different input"
                    )
                if existing.start.get("tenant") != tenant:
                    raise RunStateError(
                        f"idempotency key {idempotency_key!r} was used for run {derived} with "
                        f"{_tenant_text(existing.start.get('tenant'))}, this call gives {_tenant_text(tenant)}",
                        details={"run": derived},
                    )
                if existing.status in TERMINAL_STATES:
                    return result_from_record(existing)
                return self._resume_owned(derived, func, existing)
        if run_id is not None:
            if (clash := self._existing(run_id)) is not None:
                raise RunExistsError(_exists_message(clash), details={"run": run_id, "status": clash.status})
            if not valid_run_id(run_id) or run_id == ADMIN_RUN:
                raise AgentDefinitionError(f"invalid run id {run_id!r}")
            with self.owner.owning(run_id, busy=_starting_elsewhere):
                self.store.catch_up()
                if (clash := self._existing(run_id)) is not None:  # started and let go meanwhile
                    raise RunExistsError(_exists_message(clash), details={"run": run_id, "status": clash.status})
                return self._start(func, name, input, run_id, seed, tenant, _annotations, input_hash)
        run_id = self._ids()
        if self._check_generated_ids and self._existing(run_id) is not None:
            raise AgentDefinitionError(f"the injected id source repeated the run id {run_id!r}")
        # The default source writes "run-" and hex digits: a valid id, never the admin run.
        if self._ids is not _default_ids and (not valid_run_id(run_id) or run_id == ADMIN_RUN):
            raise AgentDefinitionError(f"invalid run id {run_id!r}")
        # An id of the default (random) source is fresh: nobody else can ask for the run
        # before its start is written, so its lease is the cheap one.
        with self.owner.owning(run_id, busy=_starting_elsewhere, fresh=self._ids is _default_ids):
            return self._start(func, name, input, run_id, seed, tenant, _annotations, input_hash)

    async def arun(
        self,
        agent: Callable[..., Any] | str,
        input: Any = None,
        *,
        run_id: str | None = None,
        seed: str | None = None,
        idempotency_key: str | None = None,
        tenant: str | None = None,
    ) -> RunResult:
        """:meth:`run`, awaited on the caller's event loop (same arguments, same result).

        An ``async def`` agent runs on this loop; where the run waits (a durable journal
        append, the LLM provider, a tool, a sleep, another owner of the run), the loop goes
        on with its other tasks, and the runs waiting on durable appends share one commit.
        A sync agent works too (its doors wait the same way). Cancelling the awaiting task
        stops the run where it is, as a crash would: it stays unfinished for ``recover``."""
        return await self.admission.run(
            lambda: bridged(
                self.run, agent, input, run_id=run_id, seed=seed, idempotency_key=idempotency_key, tenant=tenant
            )
        )

    def _start(
        self,
        func: Callable[..., Any],
        name: str,
        input: Any,
        run_id: str,
        seed: str | None,
        tenant: str | None,
        _annotations: dict[str, Any] | None,
        input_hash: str,
    ) -> RunResult:
        """Start and drive a new run, under its lease."""
        seed = seed if seed is not None else default_seed(run_id)
        daily = None
        if self.environment.ledger is not None:
            # The run's day is a clock reading, recorded in its start with its rank.
            self._poll_ledger()
            daily = self.ledger.open_run(run_id, utc_day(self._clock_ms()), name, tenant)
        self._record_policy()
        provenance = self._record_provenance(self.provenance.reference(func, self.toolkit))
        journal = RunJournal(self.store, run_id, strict=self.strict_durability)
        start_ms = journal.start(
            {
                "agent": name,
                "entry": f"{func.__module__}:{func.__qualname__}",
                "input": input,
                "policy": self.policy.hash,
                "seed": seed,
                "parent": None,
            }
            | ({"annotations": _annotations} if _annotations else {})
            | ({"provenance": provenance} if provenance is not None else {})
            | ({"tenant": tenant} if tenant is not None else {})
            | ({"daily": daily.start_document()} if daily is not None else {}),
            agent=name,
            parent=None,
        )
        if daily is not None:
            write_spend(self.store, self.ledger, daily, {})
        # After the start: its append has read what other writers appended (their stops).
        self._poll_stops()
        pipeline = Pipeline(
            self.environment,
            run_id=run_id,
            seed=seed,
            policy=self.policy,
            journal=journal,
            start_ms=start_ms,
            daily=daily,
        )
        ctx = RunContext(pipeline, input=input, annotations=_annotations)
        result = self._drive(ctx, func, name, input, journal, status="running", input_hash=input_hash)
        result.seed = seed
        return result

    def send_intent(self, intent: str, payload: Any = None, *, run_id: str | None = None) -> RunResult:
        """Route ``payload`` to the agents that handle ``intent`` (priority, then version,
        then name), falling back in that order on failure; every decision is recorded."""
        router = IntentRouter(intent, candidates_for(self.toolkit.agents, intent))
        return self.run(router, payload, run_id=run_id)

    def run_workflow(self, workflow: Workflow, input: Any = None, *, run_id: str | None = None) -> RunResult:
        """Run a declared DAG of steps in topological order (ties broken by step name)."""
        return self.run(WorkflowAgent(workflow), input, run_id=run_id)

    def step(self, proposal: Any, *, run_id: str | None = None) -> RunResult:
        """Take one LLM action proposal through the seven phases, as a one-step run.

        The proposal (a dict, or JSON text or bytes) is the run's input. One that is not
        even JSON still gets its recorded VALIDATION_ERROR: the run's input then records only
        its type, and the proposal itself goes to the PARSE phase, which rejects it.
        """
        if isinstance(proposal, bytes):
            with contextlib.suppress(UnicodeDecodeError):
                proposal = proposal.decode("utf-8")
        if isinstance(proposal, str):
            with contextlib.suppress(CanonicalError):
                proposal = loads(proposal)  # text that is not JSON fails in PARSE, recorded
        try:
            dumps(proposal)
        except CanonicalError:
            unparsable = proposal

            def submit_unparsable(ctx: RunContext, input: Any) -> Any:
                return ctx.submit(unparsable)

            submit_unparsable.__tracelock_agent__ = AgentSpec("tracelock:step", submit_unparsable)  # type: ignore[attr-defined]
            return self.run(submit_unparsable, {"unserializable": type(proposal).__name__}, run_id=run_id)
        # The reasoning is kept out of the run's input, so that it cannot reach the
        # fingerprint; it is recorded with the run (and with the step) for audit.
        annotations = None
        if isinstance(proposal, dict) and "reasoning" in proposal:
            annotations = {"reasoning": proposal["reasoning"]}
            proposal = {key: value for key, value in proposal.items() if key != "reasoning"}
        return self.run(_proposal_agent, {"proposal": proposal}, run_id=run_id, _annotations=annotations)

    def _drive(
        self,
        ctx: RunContext,
        func: Callable[..., Any],
        name: str,
        input: Any,
        journal: RunJournal | None,
        *,
        status: str,
        routing: list[dict[str, Any]] | None = None,
        input_hash: str | None = None,
    ) -> RunResult:
        """Run the agent to its end or suspension. ``input_hash`` is ``H(input)`` when the
        caller has it already."""
        observer = ctx.pipeline.env.observer
        if observer is None:
            return self._drive_agent(ctx, func, name, input, journal, status=status, routing=routing, input_hash=input_hash)
        observer.run_started(ctx.pipeline, name)
        end: dict[str, Any] = {"status": "failed", "outcome": None, "code": None, "fingerprint": None, "error": None}
        try:
            result = self._drive_agent(ctx, func, name, input, journal, status=status, routing=routing, input_hash=input_hash)
            end = {
                "status": result.status,
                "outcome": result.outcome,
                "code": result.code,
                "fingerprint": result.fingerprint,
                "error": result.error,
            }
            return result
        except BaseException as exc:
            end["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            observer.run_ended(ctx.pipeline, end)

    def _drive_agent(
        self,
        ctx: RunContext,
        func: Callable[..., Any],
        name: str,
        input: Any,
        journal: RunJournal | None,
        *,
        status: str,
        routing: list[dict[str, Any]] | None = None,
        input_hash: str | None = None,
    ) -> RunResult:
        outcome, code, output, error = "SUCCESS", None, None, None
        output_hash = None
        trace: str | None = None
        if self.strict:
            strict_mode.install()  # guards modules imported since the last run
        try:
            output = _judged_call(func, ctx, input, strict=self.strict)
            try:
                canonical = dumps(output)
                # The caller gets the JSON form, exactly what retrieve() will return later.
                # Canonical JSON is idempotent: these bytes are also those of that form.
                output = orjson.loads(canonical)
                output_hash = hashlib.sha256(canonical).hexdigest()
            except CanonicalError as exc:
                outcome, code, error, output = "EXECUTION_ERROR", OUTPUT_NOT_JSON.code, exc.message, None
        except Suspend as suspend:
            if journal is not None:
                self._spend(ctx)
                check_transition(status, suspend.status)
                journal.state(suspend.status, {"step": suspend.step, "reason": suspend.reason} | (suspend.details or {}))
            return RunResult(
                run_id=ctx.run_id,
                status=suspend.status,
                outcome=None,
                code=None,
                output=None,
                fingerprint=None,
                error=suspend.reason,
                waiting_step=suspend.step,
                effects=[ctx.effects[s] for s in sorted(ctx.effects)],
            )
        except StepError as exc:
            outcome, code, error = exc.outcome.value, exc.step_code, exc.message
        except NondeterminismError as exc:
            outcome, code, error = "EXECUTION_ERROR", NONDETERMINISM.code, exc.message
        except DivergenceError:
            if journal is not None:
                journal.interrupted()
            raise
        except StoreError:
            # The store failed (a full disk, a lost connection), not the agent: nothing is
            # recorded (it could not be), the run stays unfinished for `recover`.
            raise
        except Exception as exc:
            outcome, code, error = "EXECUTION_ERROR", AGENT_RAISED.code, f"{type(exc).__name__}: {exc}"
            trace = audit_traceback(exc)
            if journal is not None:
                journal.traceback({"step": None, "where": "agent", "exception": type(exc).__name__, "traceback": trace})
        except BaseException:
            # Interrupted (a cancelled task, KeyboardInterrupt): the run stays unfinished,
            # with what it recorded written, for `recover` or `resume`.
            if journal is not None:
                journal.interrupted()
            raise
        effects = [ctx.effects[s] for s in sorted(ctx.effects)]
        projection = run_projection(
            agent=name,
            input=input,
            policy_hash=ctx.policy.hash,
            effects=effects,
            routing=routing if routing is not None else ctx.routing,
            output=output,
            outcome=outcome,
            code=code,
            hashes=ctx.hashes,
            input_hash=input_hash,
            output_hash=output_hash,
        )
        digest = fingerprint(projection)
        final = "completed" if outcome == "SUCCESS" else "failed"
        if journal is not None:
            self._spend(ctx)
            check_transition(status, final)
            journal.end(
                final,
                {"outcome": outcome, "code": code, "output": output, "fingerprint": digest, "error": error},
            )
            if self.checkpointer is not None:
                self.checkpointer(self.store)
        return RunResult(
            run_id=ctx.run_id,
            status=final,
            outcome=outcome,
            code=code,
            output=output,
            fingerprint=digest,
            error=error,
            effects=effects,
            traceback=trace,
        )

    def _spend(self, ctx: RunContext) -> None:
        """Journal what a run under daily budgets has consumed so far (before its state
        change or end, whose durable append covers it)."""
        state = ctx.pipeline
        daily = state.daily
        if daily is None or self.environment.ledger is None:
            return
        with state.lock:
            usage = state.daily_usage()
        write_spend(self.store, self.ledger, daily, usage)

    def _poll_ledger(self) -> None:
        """Fold in the spend entries written since the last look, at most every quarter
        second (a run's start and each step under daily budgets ask)."""
        if self._ledger_watch.due():
            refresh_ledger(self.store, self.ledger)

    def _existing(self, run_id: str) -> RunRecord | None:
        try:
            return load_run(self.store, run_id)
        except RunNotFoundError:
            return None

    def _record_policy(self, policy: Policy | None = None) -> None:
        """Keep a policy document in the store once (its hash is in every run)."""
        policy = policy or self.policy
        if policy.hash in self._policies_recorded:
            return
        if self.store.payload_state(policy.hash) == "missing":
            self.store.append(ADMIN_RUN, POLICY_KIND, payload=policy.document, durable=False)
        self._policies_recorded.add(policy.hash)

    def _record_provenance(self, reference: tuple[str, dict[str, Any]] | None) -> str | None:
        """Keep a provenance document in the store once; a run's start names its hash (it is
        the same for every run of an agent in a process, and would otherwise be most of the
        bytes of a small run)."""
        if reference is None:
            return None
        digest, document = reference
        if digest not in self._provenance_recorded:
            if self.store.payload_state(digest) == "missing":
                self.store.append(ADMIN_RUN, PROVENANCE_KIND, payload=document, durable=False)
            self._provenance_recorded.add(digest)
        return digest

    def agent_for(self, record: RunRecord, agent: Callable[..., Any] | str | None = None) -> tuple[Callable[..., Any], str]:
        """The code to resume or replay a recorded run with."""
        if agent is not None:
            return self._resolve_agent(agent)
        if record.agent.startswith("intent:"):
            intent = record.agent.split(":", 1)[1]
            router = IntentRouter(intent, candidates_for(self.toolkit.agents, intent))
            return router, record.agent
        if record.agent in self.toolkit.agents:
            return self._resolve_agent(record.agent)
        return self._resolve_agent(record.entry)

    def _resolve_agent(self, agent: Callable[..., Any] | str) -> tuple[Callable[..., Any], str]:
        if callable(agent):
            func, name = agent, agent_name(agent)
        elif (spec := self.toolkit.agents.get(agent)) is not None:
            func, name = spec.func, spec.name
        else:
            func = resolve_agent_path(agent)
            name = agent_name(func)
        if asyncio._get_running_loop() is not None and not bridge.active() and inspect.iscoroutinefunction(func):
            # Checked before anything is written: asyncio.run cannot nest in a running loop.
            raise AwaitRequiredError(
                f"agent {name!r} is async and this thread runs an event loop: await its run "
                "(`await runtime.arun(...)`, `aresume`, `areplay`, `arecover`) instead of calling "
                "the sync method",
                details={"agent": name},
            )
        return func, name

    def _invoke(self, tool: Tool, kwargs: dict[str, Any]) -> Any:
        """Run a tool's function, under its timeout when it has one."""
        return self._tool_invoker(tool, kwargs)

    # -- answering for runs --------------------------------------------------------------
    def retrieve(self, run_id: str) -> RunResult:
        """The stored response of a run, from the journal alone: no agent code, no model."""
        record = load_run(self.store, run_id)
        return result_from_record(record)

    # -- emergency stops -----------------------------------------------------------------
    def _poll_stops(self) -> None:
        """Fold in the stops written since the last look, at most every quarter second
        (one index lookup; the pipeline asks before each step that can change the world)."""
        if self._stop_watch.due():
            refresh_stops(self.store, self.stops)

    def stop_tool(self, tool: str | None = None, *, side_effect: str | None = None, by: str, reason: str) -> Stop:
        """Prohibit ``tool`` (or every tool of class ``side_effect``, e.g. ``"irreversible"``)
        in every run of the store, runs under way included: the next step that reaches it
        ends ``DENIED [TOOL_STOPPED]``. Journaled in the admin chain, durably."""
        return set_stop(self.store, self.stops, tool=tool, side_effect=side_effect, by=by, reason=reason)

    def lift_stop(self, tool: str | None = None, *, side_effect: str | None = None, by: str, reason: str) -> Stop:
        """Lift the stop on ``tool`` (or on class ``side_effect``); journaled like the stop."""
        return lift_stop(self.store, self.stops, tool=tool, side_effect=side_effect, by=by, reason=reason)

    def approve(self, run_id: str, step: int, *, by: str, reason: str = "") -> None:
        """Record a human's approval of the step a run waits on."""
        self._decide(run_id, step, "approved", by, reason)

    def reject(self, run_id: str, step: int, *, by: str, reason: str = "") -> None:
        """Record a human's rejection of the step a run waits on."""
        self._decide(run_id, step, "rejected", by, reason)

    def _decide(self, run_id: str, step: int, decision: str, by: str, reason: str) -> None:
        with self.owner.owning(run_id):
            self.store.catch_up()
            self._decide_owned(run_id, step, decision, by, reason)

    def _decide_owned(self, run_id: str, step: int, decision: str, by: str, reason: str) -> None:
        record = load_run(self.store, run_id)
        if record.status != "awaiting_approval" or record.waiting_step != step:
            raise RunStateError(
                f"run {run_id} is {record.status}"
                + (f" (waiting on step {record.waiting_step})" if record.waiting_step is not None else "")
                + f"; it does not wait for approval of step {step}"
            )
        if step in record.approvals:
            raise RunStateError(
                f"step {step} of run {run_id} was already {record.approvals[step].get('decision')} "
                f"by {record.approvals[step].get('by')}; a decision is final"
            )
        if not by:
            raise RunStateError("an approval must name who decided (by=...)")
        expires = record.approval_expiry.get(step)
        if decision == "approved" and expires is not None:
            # A courtesy to the approver: the step's outcome is decided on resume, from the
            # journaled times (an approval journaled late is refused there as well).
            now = self._clock_ms()
            if now > expires:
                raise ApprovalExpiredError(
                    f"the approval window of step {step} of run {run_id} closed at {expires} "
                    f"(now {now}); nothing was recorded. `tracelock resume {run_id}` ends the step "
                    "DENIED [APPROVAL_EXPIRED]",
                    details={"run": run_id, "step": step, "expires_ms": expires, "now_ms": now},
                )
        RunJournal(self.store, run_id).approval(
            {"step": step, "decision": decision, "by": by, "reason": reason}
        )

    def resume(
        self,
        run_id: str,
        agent: Callable[..., Any] | str | None = None,
        *,
        record: RunRecord | None = None,
    ) -> RunResult:
        """Continue an unfinished run from its journal: recorded steps are answered from
        it, the rest runs live and is appended to the same run. ``record`` is the run's
        record when the caller has just loaded it.

        A fork child's steps before its fork point are answered from its parent's record
        (see :func:`child_recording`). When the code diverges from the record, nothing more
        runs: a run resumed from ``awaiting_approval`` or ``blocked`` is returned to that
        state (journaled, with the divergence) and :class:`DivergenceError` is raised.

        The run's lease is taken first (:mod:`tracelock.runtime.runs.ownership`): while
        another caller, in this process or another, executes it, this raises
        :class:`RunBusyError` and runs nothing."""
        with self.owner.owning(run_id):
            # Read under the lease: an owner that just let go may have moved the run on.
            self.store.catch_up()
            if record is None or record.run_id != run_id or record.entries[-1].seq != self.store.run_info(run_id).last_seq:
                record = load_run(self.store, run_id)
            return self._resume_owned(run_id, agent, record)

    async def aresume(self, run_id: str, agent: Callable[..., Any] | str | None = None) -> RunResult:
        """:meth:`resume`, awaited on the caller's event loop (see :meth:`arun`)."""
        return await self.admission.run(lambda: bridged(self.resume, run_id, agent))

    def _resume_owned(self, run_id: str, agent: Callable[..., Any] | str | None, record: RunRecord) -> RunResult:
        if record.status in TERMINAL_STATES:
            return result_from_record(record)
        func, _ = self.agent_for(record, agent)
        name = record.agent
        recording, prefix = (record, None) if record.parent is None else child_recording(self.store, record)
        journal = RunJournal(self.store, run_id, strict=self.strict_durability, batch=self._batch)
        status = record.status
        if status in ("awaiting_approval", "blocked"):
            check_transition(status, "running")
            journal.state("running", {"step": record.waiting_step, "reason": "resumed"})
            status = "running"
        # Unpaced, and after the state change, whose append has read what other writers
        # appended: a run that waited for approval meets a stop set while it waited.
        refresh_stops(self.store, self.stops)
        pipeline = Pipeline(
            self.environment,
            run_id=run_id,
            seed=str(record.start.get("seed")),
            journal=journal,
            recording=recording,
            prefix=prefix,
            start_ms=record.entries[0].ts,
            policy=self.policy_of(record),
            daily=RunDaily.from_start(run_id, record.start) if self.environment.ledger is not None else None,
        )
        ctx = RunContext(pipeline, input=record.input, annotations=record.annotations)
        try:
            result = self._drive(ctx, func, name, record.input, journal, status=status)
        except DivergenceError as exc:
            if status != record.status:
                _return_to_waiting(journal, record, exc.report)
            raise
        if prefix is not None:
            result.parent = {"run": prefix.run, "step": prefix.before, "reused_steps": sorted(ctx.reused)}
        result.seed = str(record.start.get("seed"))
        return result

    def policy_of(self, record: RunRecord) -> Policy:
        """The policy a run was recorded under (kept in the store by its hash)."""
        wanted = record.policy_hash
        if wanted is None or wanted == self.policy.hash:
            return self.policy
        if self.store.payload_state(wanted) != "present":
            raise RunStateError(f"run {record.run_id} was recorded under policy {wanted}, which is not in the store")
        policy = Policy.from_mapping(self.store.get_payload(wanted))
        if policy.hash != wanted:
            raise RunStateError(f"the stored policy {wanted} no longer hashes to its name")
        return policy

    def close(self) -> None:
        self.owner.close()
        if self._presence is not None:
            self._presence.release(leave_mark=bool(self.owner.stranded))
            self._presence = None
        self._tool_invoker.close()
        self._tool_pool.shutdown(wait=False, cancel_futures=True)
        self._gather_pool.shutdown(wait=False, cancel_futures=True)
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _proposal_agent(ctx: RunContext, input: Any) -> Any:
    proposal = input["proposal"]
    if isinstance(proposal, dict) and "reasoning" in ctx.annotations:
        proposal = proposal | {"reasoning": ctx.annotations["reasoning"]}
    return ctx.submit(proposal)


_proposal_agent.__tracelock_agent__ = AgentSpec("tracelock:step", _proposal_agent)  # type: ignore[attr-defined]


def _judged_call(func: Callable[..., Any], ctx: RunContext, input: Any, *, strict: bool) -> Any:
    """Call the agent; once the context has detected a divergence, that first divergence is
    the verdict, however the agent ended (returned, raised something else, suspended)."""
    try:
        with running(ctx.pipeline):  # doors made outside the run find it (HTTP capture)
            output = _call_agent(func, ctx, input, strict=strict)
    except KeyboardInterrupt:
        raise
    except BaseException:
        if ctx.divergence is not None:
            raise DivergenceError(ctx.divergence) from None
        raise
    if ctx.divergence is not None:
        raise DivergenceError(ctx.divergence)
    return output


def _call_agent(func: Callable[..., Any], ctx: RunContext, input: Any, *, strict: bool) -> Any:
    if inspect.iscoroutinefunction(func):
        if not strict:
            coroutine = func(AsyncRunContext(ctx), input)
        else:

            async def guarded() -> Any:
                # Only the agent's own task runs as agent code; the event loop's machinery
                # (which reads the clock) runs in the caller's context.
                with strict_mode.agent_code():
                    return await func(AsyncRunContext(ctx), input)

            coroutine = guarded()
        if bridge.active():
            # An awaited run (``arun``): the agent runs on the caller's loop, and its doors
            # bridge back into this run's pipeline.
            return bridge.wait(coroutine)
        return asyncio.run(coroutine)
    if not strict:
        return func(ctx, input)
    with strict_mode.agent_code():
        return func(ctx, input)


def resolve_agent_path(path: str) -> Callable[..., Any]:
    """Import ``module:qualname`` (or ``module.attr``) and return the callable."""
    module_name, sep, qualname = path.partition(":")
    if not sep:
        module_name, _, qualname = path.rpartition(".")
    if not module_name or not qualname:
        raise AgentDefinitionError(f"agent {path!r} is not of the form module:function")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentDefinitionError(f"cannot import {module_name!r}: {exc}") from None
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AgentDefinitionError(f"{module_name} has no attribute {qualname!r}")
    if not callable(target):
        raise AgentDefinitionError(f"{path} is not callable")
    return target  # type: ignore[no-any-return]


def _starting_elsewhere(run: str, holder: object) -> RunExistsError:
    return RunExistsError(
        f"run {run!r} is being started by another caller right now; choose another run id",
        details={"run": run, "status": "running"},
    )


def _tenant_text(tenant: object) -> str:
    return "no tenant" if tenant is None else f"tenant {tenant!r}"


def _return_to_waiting(journal: RunJournal, record: RunRecord, divergence: dict[str, Any]) -> None:
    """Put a resumed run that diverged back in the state it waited in, so that nothing runs
    it live until its code reproduces the record again."""
    check_transition("running", record.status)
    message = str(divergence.get("message", "the code diverged from the record"))
    try:
        dumps(divergence)
        kept = divergence
    except CanonicalError:
        kept = {key: divergence.get(key) for key in ("message", "step", "kind")}
    journal.state(
        record.status,
        {"step": record.waiting_step, "reason": f"resume diverged: {message}", "divergence": kept},
    )


def result_from_record(record: RunRecord) -> RunResult:
    end = record.end or {}
    return RunResult(
        run_id=record.run_id,
        status=record.status,
        outcome=end.get("outcome"),
        code=end.get("code"),
        output=end.get("output"),
        fingerprint=end.get("fingerprint"),
        error=end.get("error") if record.end else (record.states[-1].get("reason") if record.states else None),
        waiting_step=record.waiting_step,
        parent=record.parent,
        effects=[record.effects[s] for s in sorted(record.effects)],
        traceback=record.agent_traceback,
        seed=record.start.get("seed") if isinstance(record.start.get("seed"), str) else None,
    )


def _load_policy(policy: Policy | str | os.PathLike[str] | Mapping[str, Any] | None) -> Policy:
    if isinstance(policy, Policy):
        return policy
    if policy is None:
        return Policy.from_mapping({"version": 1})
    if isinstance(policy, Mapping):
        return Policy.from_mapping(dict(policy))
    return Policy.load(Path(policy))
