"""What one run's pipeline holds: its environment, its recording and what it has done."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tracelock.runtime.daily.ledger import DailyLedger, RunDaily
from tracelock.runtime.pipeline.held import HeldAnswers
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.policy.sandbox import Sandbox
from tracelock.runtime.records import RunJournal, RunRecord
from tracelock.runtime.stops.board import StopBoard
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.runtime.tools.tools import Tool

if TYPE_CHECKING:
    from tracelock.runtime.pipeline.request import StepRequest

__all__ = ["Environment", "OpenStream", "ParentPrefix", "RunObserver", "RunState"]


class Environment:
    """What the pipeline needs from the runtime that runs it. The runtime builds one; a test
    or another host can build its own. ``clock_ms`` and ``sleep`` are the injected clock and
    sleeper, ``invoke(tool, kwargs)`` runs a tool's function under its timeout,
    ``ask(provider, request)`` calls the LLM provider (default: a plain call), gathers run
    on ``gather_pool``, and ``sandbox`` (or None) is the sandboxed filesystem whose state is
    recorded around every ``fs`` and proposal step. ``observer`` (or None) is told of every
    run and step (:class:`RunObserver`). ``stops`` (or None) is the emergency-stop board
    consulted at AUTHORIZE; ``held`` (or None) answers LLM steps from another run's record
    (``drift --hold-llm``)."""

    __slots__ = (
        "ask",
        "clock_ms",
        "gather_pool",
        "held",
        "invoke",
        "ledger",
        "observer",
        "sandbox",
        "sleep",
        "stops",
        "toolkit",
        "tools",
    )

    def __init__(
        self,
        *,
        toolkit: Toolkit,
        clock_ms: Callable[[], int],
        sleep: Callable[[float], None],
        invoke: Callable[[Tool, dict[str, Any]], Any],
        gather_pool: concurrent.futures.Executor,
        sandbox: Sandbox | None = None,
        ask: Callable[[Callable[[dict[str, Any]], Any], dict[str, Any]], Any] | None = None,
    ) -> None:
        self.toolkit = toolkit
        self.ask = ask if ask is not None else _plain_call
        self.tools: dict[str, Tool] = toolkit.tools
        self.clock_ms = clock_ms
        self.sleep = sleep
        self.invoke = invoke
        self.gather_pool = gather_pool
        self.sandbox = sandbox
        self.observer: RunObserver | None = None
        self.stops: StopBoard | None = None
        self.held: HeldAnswers | None = None
        #: The daily budgets' ledger (None: no run is judged against daily budgets).
        self.ledger: DailyLedger | None = None


def _plain_call(provider: Callable[[dict[str, Any]], Any], request: dict[str, Any]) -> Any:
    return provider(request)


@dataclass(frozen=True)
class ParentPrefix:
    """A fork child's steps before its fork point (``before``): answered from the parent's
    record (``run``), and copied into the child's journal, marked with their origin, unless
    the child's journal already holds the copy (``copied``: a resumed child)."""

    run: str
    before: int
    copied: frozenset[int] = frozenset()


class OpenStream(Protocol):
    """A step whose result is still being read by the caller (a captured live stream,
    ``tracelock/integrations/http/live.py``)."""

    def before_step(self) -> None:
        """Finish the stream (read it to its end and record the step) before another
        step of the run starts, so that steps are journaled in order."""

    def abandon(self) -> None:
        """Record the stream as closed where the caller left it (the run ends)."""


class RunObserver(Protocol):
    """An onlooker of runs (tracing), installed as :attr:`Environment.observer`. The pipeline
    calls it around every step, the engine around every run it drives (record, resume, fork,
    replay). Nothing it returns is read: it cannot change a step, a journal entry or a
    fingerprint. Each call must return quickly and not raise."""

    def run_started(self, run: RunState, agent: str) -> None:
        """The agent ``agent`` starts (or resumes, or is replayed) as ``run``."""

    def step_started(self, run: RunState, step: int, request: StepRequest) -> None:
        """Step ``step`` was numbered and enters the pipeline."""

    def step_ended(
        self, run: RunState, step: int, request: StepRequest, effect: Mapping[str, Any] | None
    ) -> None:
        """Step ``step`` left the pipeline; ``effect`` is its effect document (None when it
        has none: a divergence, or a suspension before it was recorded)."""

    def run_ended(self, run: RunState, end: Mapping[str, Any]) -> None:
        """The run ended or suspended: ``end`` holds ``status``, ``outcome``, ``code``,
        ``fingerprint`` and ``error`` (None where there is none)."""


class RunState:
    """One run's pipeline state. The mode is given by what it is built with: no recording
    records; a recording with a journal resumes (``prefix``: a fork child's parent steps);
    ``replay_only`` replays (writes nothing); ``fork_before`` answers only the steps before
    the fork point from the recording."""

    __slots__ = (
        "cost_micro_usd",
        "daily",
        "divergence",
        "effect_count",
        "effects",
        "env",
        "fork_before",
        "hashes",
        "inherited",
        "journal",
        "llm_calls",
        "lock",
        "next_step",
        "open_stream",
        "patches",
        "policy",
        "prefix",
        "recording",
        "replay_only",
        "reused",
        "routing",
        "run_id",
        "seed",
        "start_ms",
        "tokens",
    )

    def __init__(
        self,
        env: Environment,
        *,
        run_id: str,
        seed: str,
        policy: Policy,
        journal: RunJournal | None,
        recording: RunRecord | None = None,
        replay_only: bool = False,
        fork_before: int | None = None,
        prefix: ParentPrefix | None = None,
        start_ms: int = 0,
        daily: RunDaily | None = None,
    ) -> None:
        self.env = env
        #: The run's day, agent, tenant and rank, for its daily budgets (None: none apply).
        self.daily = daily
        self.run_id = run_id
        self.policy = policy
        self.seed = bytes.fromhex(seed)
        self.journal = journal
        self.recording = recording
        self.replay_only = replay_only
        self.fork_before = fork_before
        if prefix is None and fork_before is not None and recording is not None:
            prefix = ParentPrefix(recording.run_id, fork_before)
        self.prefix = prefix
        self.start_ms = start_ms
        self.next_step = 0
        self.lock = threading.Lock()
        # Usage counted for the policy's budgets.
        self.llm_calls = 0
        self.tokens = 0
        self.cost_micro_usd = 0
        self.effect_count = 0
        #: The part of those counters a fork child's reused steps brought from its parent
        #: (llm_calls, tokens, cost_micro_usd, effects): the parent's daily spend has it.
        self.inherited: tuple[int, int, int, int] = (0, 0, 0, 0)
        #: The effect document of every step answered so far (the step's outcome).
        self.effects: dict[int, dict[str, Any]] = {}
        self.routing: list[dict[str, Any]] = []
        self.reused: list[int] = []
        #: H(args), H(result) (or None: computed from the effect) by step, for the fingerprint.
        self.hashes: dict[int, tuple[str, str | None]] = {}
        self.patches: set[str] = set()
        #: The first divergence from the recording: the run's verdict once set.
        self.divergence: dict[str, Any] | None = None
        #: A captured response being read by the caller while its step is in EXECUTE.
        self.open_stream: OpenStream | None = None

    def counters(self) -> tuple[int, int, int, int]:
        """llm_calls, tokens, cost_micro_usd and effects so far (the caller holds the lock)."""
        return (self.llm_calls, self.tokens, self.cost_micro_usd, self.effect_count)

    def inherit(self, before: tuple[int, int, int, int]) -> None:
        """Count what the counters grew by since ``before`` as inherited (the caller holds
        the lock)."""
        calls, tokens, cost, effects = self.counters()
        held = self.inherited
        self.inherited = (
            held[0] + calls - before[0], held[1] + tokens - before[1], held[2] + cost - before[2], held[3] + effects - before[3]
        )

    def daily_usage(self) -> dict[str, int]:
        """What the run consumed itself, for its daily budgets (the caller holds the lock):
        its counters less what a fork child inherited with its parent's steps."""
        own = [now - before for now, before in zip(self.counters(), self.inherited, strict=True)]
        return {"llm_calls": own[0], "tokens": own[1], "cost_micro_usd": own[2], "effects": own[3]}

    def is_usable(self, step: int) -> bool:
        """Whether the recording answers ``step`` (a fork reuses only the steps before its
        fork point)."""
        return self.recording is not None and (self.fork_before is None or step < self.fork_before)
