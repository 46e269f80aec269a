"""The runs behind the golden fingerprint vectors in ``conformance/fingerprint/``.

``python conformance/generate_fingerprint.py`` records each case in a fresh store with a
fixed clock and fixed run ids and writes the journal lines, the entry hashes and the
fingerprint. ``tests/core/test_fingerprint_conformance.py`` recomputes everything from the
vector files with its own code, and re-records each case to check the bytes are unchanged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracelock.core.fingerprint import value_hash
from tracelock.evidence.redaction import redact
from tracelock.runtime.errors import StepError
from tracelock.runtime.provenance.identity import distributions_digest, engine_identity
from tracelock.runtime.provenance.record import NO_PROVENANCE, Provenance
from tracelock.runtime.replay.replay import replay_run
from tracelock.runtime.runs.engine import RunResult
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Intent, Toolkit, agent_name
from tracelock.runtime.tools.tools import RetryPolicy
from tracelock.storage.directory import DirectoryStore

POLICY_TOOLS: list[dict[str, Any]] = [
    {"name": "lookup", "args": {"key": {"type": "string", "max_length": 16}}},
    {"name": "store_note"},
]
POLICY = {
    "version": 1,
    "tools": POLICY_TOOLS,
    "llm": {"allow": True, "models": ["fixed-model"]},
}

kit = Toolkit(llm=lambda request: {"content": "use lookup", "usage": {"input_tokens": 7, "output_tokens": 3}})


@kit.tool(side_effect="read_only", timeout=None)
def lookup(key: str) -> dict[str, Any]:
    return {"key": key, "value": len(key)}


@kit.tool(side_effect="idempotent", timeout=None)
def store_note(text: str) -> str:
    return "stored:" + text


@kit.tool(side_effect="irreversible", timeout=None)
def wire_money(amount: int) -> str:
    return "never allowed"


@kit.agent("conformance-agent")
def agent(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
    plan = ctx.llm(model="fixed-model", prompt=request["question"], max_tokens=32)
    found = ctx.call("lookup", key=request["key"])
    note = ctx.call("store_note", text=plan["content"])
    draw = ctx.random()
    ident = str(ctx.uuid())
    ctx.now()
    try:
        ctx.call("wire_money", amount=10)
    except StepError as denied:
        refusal = denied.step_code
    proposal = ctx.submit(
        {"schema_version": 1, "id": "p-1", "action": "lookup", "args": {"key": "zz"}, "reasoning": "check zz"}
    )
    return {"found": found, "note": note, "draw": draw, "id": ident, "refusal": refusal, "proposal": proposal}


def failing_agent(ctx: Any, request: dict[str, Any]) -> Any:
    ctx.call("lookup", key="x" * 40)  # violates max_length: DENIED, uncaught


# -- Cases beyond the first two: routing, gather, retries, timeouts, every outcome ---------
#
# Each is a deterministic run: tools that fail do so by step count, never by chance, and the
# gather's completion order is forced (the second member finishes first).


class _Flaky:
    """``flaky_store`` fails its first two attempts of each recording, then succeeds."""

    attempts = 0


_first_done = threading.Event()


@kit.tool(side_effect="idempotent", timeout=None, retry=RetryPolicy(max_attempts=3, delays_ms=(0, 0)))
def flaky_store(text: str) -> str:
    _Flaky.attempts += 1
    if _Flaky.attempts < 3:
        raise ConnectionError(f"attempt {_Flaky.attempts} failed")
    return "stored:" + text


@kit.tool(side_effect="read_only", timeout=None)
def fast_lookup(key: str) -> str:
    _first_done.set()
    return "fast:" + key


@kit.tool(side_effect="read_only", timeout=None)
def slow_lookup(key: str) -> str:
    _first_done.wait(5)
    time.sleep(0.2)  # fast_lookup's step is journaled first: the recorded order is fixed
    return "slow:" + key


@kit.tool(side_effect="read_only", timeout=0.05)
def sleepy(ms: int) -> str:
    time.sleep(ms / 1000)
    return "woke"


@kit.agent("gather-agent")
def gather_agent(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
    gathered = ctx.gather(ctx.task("slow_lookup", key=request["a"]), ctx.task("fast_lookup", key=request["b"]))
    stored = ctx.call("flaky_store", text="note")
    try:
        ctx.call("sleepy", ms=500)
        woke = "woke"
    except StepError as late:
        woke = late.step_code
    return {"gathered": gathered, "stored": stored, "sleepy": woke}


@kit.agent("primary", intents=[Intent("summarize", priority=10)])
def primary(ctx: Any, request: dict[str, Any]) -> Any:
    return ctx.call("wire_money", amount=1)  # DENIED by the policy: the router falls back


@kit.agent("backup", intents=[Intent("summarize", priority=5, version=2)])
def backup(ctx: Any, request: dict[str, Any]) -> Any:
    return {"summary": ctx.call("lookup", key=request["key"]), "draw": ctx.random(), "id": str(ctx.uuid())}


def invalid_agent(ctx: Any, request: dict[str, Any]) -> Any:
    ctx.call("lookup", key=12)  # not a string: VALIDATION_ERROR, uncaught


def timeout_agent(ctx: Any, request: dict[str, Any]) -> Any:
    ctx.call("sleepy", ms=500)  # TOOL_TIMEOUT: EXECUTION_ERROR, uncaught


def _intent(intent: str) -> Callable[[Runtime, Any], RunResult]:
    return lambda runtime, payload: runtime.send_intent(intent, payload)


#: name -> (agent, input), or (a function given the runtime and the input, input): the
#: latter runs through the runtime's own entry point (``send_intent``) with its default seed.
CASES: dict[str, tuple[Callable[..., Any], Any]] = {
    "agent-success": (agent, {"question": "what is k1?", "key": "k1"}),
    "agent-denied": (failing_agent, {"question": "q"}),
    "gather-retry-timeout": (gather_agent, {"a": "g1", "b": "g2"}),
    "routing-fallback": (_intent("summarize"), {"key": "k9"}),
    "outcome-validation-error": (invalid_agent, {}),
    "outcome-execution-error": (timeout_agent, {}),
}
ROUTED = {"routing-fallback"}

#: The policy of the later cases: the first one's, with their tools allowed (the first two
#: cases keep the first policy, so their vectors stay as first made).
POLICY_MORE = {
    **POLICY,
    "tools": [*POLICY_TOOLS, *({"name": name} for name in ("flaky_store", "fast_lookup", "slow_lookup", "sleepy"))],
}


class FixedClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    def __call__(self) -> int:
        self.now += 7
        return self.now


def case_seed(func: Any, payload: Any) -> str:
    """The seed the cases are recorded with, given explicitly (a run's default seed comes
    from its run id): ``H({"agent", "input": H(input)})``, so the vectors stay as first made."""
    return value_hash({"agent": agent_name(func), "input": value_hash(payload)})


def _redact_llm_args(store: DirectoryStore, run_id: str) -> None:
    """A field redaction of the LLM step's arguments (the prompt), as `tracelock redact
    RUN 0 --field args` makes it."""
    redact(store, run_id, 0, by="dpo@example.com", reason="the prompt names a person", fields=["args"])


def _nothing(store: DirectoryStore, run_id: str) -> None:
    pass


#: name -> (the case it records, what is done to the store afterwards).
DERIVED: dict[str, tuple[str, Callable[[DirectoryStore, str], None]]] = {
    "agent-success-redacted": ("agent-success", _redact_llm_args),
    "agent-success-provenance": ("agent-success", _nothing),
}

#: The engine the provenance case records: fixed strings, so that the vector is the same on
#: every machine (the code and tool digests come from this file and the tools' definitions).
CONFORMANCE_ENGINE = engine_identity(
    tracelock="0.0.0-conformance",
    python="3.11.0",
    implementation="cpython",
    platform="conformance-x86_64",
    distributions=distributions_digest([("tracelock", "0.0.0-conformance")]),
)
WITH_PROVENANCE = {"agent-success-provenance"}


def record_case(name: str, directory: Path) -> tuple[list[bytes], str]:
    """Record one case; return the journal's lines and the run id."""
    base, after = DERIVED.get(name, (name, None))
    func, payload = CASES[base]
    clock = FixedClock()
    store = DirectoryStore(directory, clock=clock, store_id=lambda: "conformance")
    policy = POLICY if base in ("agent-success", "agent-denied") else POLICY_MORE
    provenance = Provenance(CONFORMANCE_ENGINE) if name in WITH_PROVENANCE else NO_PROVENANCE
    runtime = Runtime(store, policy, toolkits=(kit,), clock=clock, ids=lambda: f"run-{base}", provenance=provenance)
    _Flaky.attempts = 0
    _first_done.clear()
    try:
        if base in ROUTED:
            result = func(runtime, payload)
        else:
            result = runtime.run(func, payload, seed=case_seed(func, payload))
        runtime.close()
        if after is not None:
            after(store, result.run_id)
    finally:
        runtime.close()
        store.close()
    lines = (directory / "journal.log").read_bytes().splitlines()
    return lines, result.run_id


#: Every vector ``generate_fingerprint.py`` writes.
ALL_CASES = [*CASES, *DERIVED]


# -- Replay divergence reports -------------------------------------------------------------


def agent_changed_prompt(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
    """``agent`` after a code change that asks the LLM another question: a replay of the
    ``agent-success`` recording must stop at step 0 and name ``/args/prompt``."""
    plan = ctx.llm(model="fixed-model", prompt=request["question"] + " (be brief)", max_tokens=32)
    return {"plan": plan["content"]}


#: name -> (the recorded case, the changed agent replayed against it).
DIVERGENCES: dict[str, tuple[str, Callable[..., Any]]] = {
    "divergence-prompt": ("agent-success", agent_changed_prompt),
}


def replay_case(name: str, directory: Path) -> dict[str, Any]:
    """Record the case, replay it with the changed agent; the replay report (a dict)."""
    base, changed = DIVERGENCES[name]
    _, run_id = record_case(base, directory)
    store = DirectoryStore(directory, clock=FixedClock(), store_id=lambda: "conformance")
    runtime = Runtime(store, POLICY, toolkits=(kit,), provenance=NO_PROVENANCE)
    try:
        report: dict[str, Any] = replay_run(runtime, run_id, changed).to_dict()
    finally:
        runtime.close()
        store.close()
    return report
