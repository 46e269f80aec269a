"""The runs behind the golden fingerprint vectors in ``conformance/fingerprint/``.

``python conformance/generate_fingerprint.py`` records each case in a fresh store with a
fixed clock and fixed run ids and writes the journal lines, the entry hashes and the
fingerprint. ``tests/core/test_fingerprint_conformance.py`` recomputes everything from the
vector files with its own code, and re-records each case to check the bytes are unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracelock.core.fingerprint import value_hash
from tracelock.runtime.errors import StepError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit, agent_name
from tracelock.storage.directory import DirectoryStore

POLICY = {
    "version": 1,
    "tools": [
        {"name": "lookup", "args": {"key": {"type": "string", "max_length": 16}}},
        {"name": "store_note"},
    ],
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


CASES = {
    "agent-success": (agent, {"question": "what is k1?", "key": "k1"}),
    "agent-denied": (failing_agent, {"question": "q"}),
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


def record_case(name: str, directory: Path) -> tuple[list[bytes], str]:
    """Record one case; return the journal's lines and the run id."""
    func, payload = CASES[name]
    clock = FixedClock()
    store = DirectoryStore(directory, clock=clock, store_id=lambda: "conformance")
    runtime = Runtime(store, POLICY, toolkits=(kit,), clock=clock, ids=lambda: f"run-{name}")
    try:
        result = runtime.run(func, payload, seed=case_seed(func, payload))
    finally:
        runtime.close()
        store.close()
    lines = (directory / "journal.log").read_bytes().splitlines()
    return lines, result.run_id
