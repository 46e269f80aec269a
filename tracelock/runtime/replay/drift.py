"""Drift: run the same input N times live, in isolated runs, and compare fingerprints.

Each attempt records its run in a fresh store of its own (so no run can see another's
state); the stores live in a temporary directory removed afterwards. On a difference the
report names the first component and step that differ, the kind of drift, and the differing
leaves as JSON pointers (compared canonically).

An *attempt* is anything that records one run in a given store directory: in this process
(:func:`detect_drift`), or in a fresh interpreter with its own hash seed (the CLI's default,
see ``tracelock.cli.drift_processes``), which is the only way to see drift that depends on
string hashing, such as iterating over a set of strings. :func:`hash_seed` gives each
attempt its ``PYTHONHASHSEED``, from the attempt number alone.

With ``hold_llm``, every attempt after the first answers its LLM steps from the first
run's record (:class:`tracelock.runtime.pipeline.held.HeldAnswers`): the model's variance
is held fixed, so what still drifts is the code's doing. When it is not held, an LLM step
whose provider answered with another model is reported as a ``model`` difference.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelock.core.fingerprint import value_hash
from tracelock.runtime.pipeline.held import HeldAnswers
from tracelock.runtime.records import RunRecord, load_run
from tracelock.runtime.replay.compare import run_difference
from tracelock.storage.backend import Store
from tracelock.storage.open import open_store

__all__ = ["Attempt", "DriftReport", "compare_attempts", "detect_drift", "drift_run_id", "hash_seed"]

#: ``attempt(number, store_dir)`` records one run in a new store at ``store_dir`` and
#: returns its run id.
Attempt = Callable[[int, Path], str]


@dataclass
class DriftReport:
    runs: int
    fingerprints: list[str | None]
    drift: dict[str, Any] | None
    mode: str = "in-process"
    hash_seeds: list[int] | None = None
    #: Whether LLM answers were held fixed (answered from the first run).
    held_llm: bool = False

    @property
    def drifted(self) -> bool:
        return self.drift is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "mode": self.mode,
            "hash_seeds": self.hash_seeds,
            "held_llm": self.held_llm,
            "fingerprints": self.fingerprints,
            "drifted": self.drifted,
            "drift": self.drift,
        }


def drift_run_id(agent: str, input: Any) -> str:
    """The run id every attempt of a drift of ``agent`` on ``input`` records its run under
    (each in its own store): ``"drift-"`` and 40 hex digits of ``H({"agent", "input"})``.
    One id makes one default seed and one idempotency key per step for all attempts, so
    neither ``ctx.random()``/``ctx.uuid()`` nor a tool echoing its key is seen as drift."""
    return "drift-" + value_hash({"agent": agent, "input": input})[:40]


def hash_seed(attempt: int) -> int:
    """The ``PYTHONHASHSEED`` of attempt ``attempt`` (numbered from 0): distinct for every
    attempt, the same on every invocation, never 0 (which turns hash randomization off)."""
    if attempt < 0:
        raise ValueError("attempts are numbered from 0")
    return attempt + 1


def compare_attempts(
    attempt: Attempt,
    n: int,
    *,
    progress: Callable[[int, str | None], None] | None = None,
    mode: str = "in-process",
    hash_seeds: list[int] | None = None,
) -> DriftReport:
    """Run ``attempt`` for attempts ``0 .. n-1``, each in a fresh store, and compare each
    run with the first."""
    if n < 2:
        raise ValueError("drift needs at least 2 runs")
    fingerprints: list[str | None] = []
    first: RunRecord | None = None
    drift: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="tracelock-drift-") as tmp:
        for number in range(n):
            location = Path(tmp) / f"run-{number}"
            run_id = attempt(number, location)
            store = open_store(location, create=False)
            try:
                record = load_run(store, run_id)
            finally:
                store.close()
            digest = (record.end or {}).get("fingerprint")
            fingerprints.append(digest)
            if progress is not None:
                progress(number + 1, digest)
            if first is None:
                first = record
            elif drift is None and digest != fingerprints[0]:
                difference = run_difference(first, record)
                drift = {"run": number, **(difference or {"component": "unknown", "kind": "unknown"})}
    return DriftReport(n, fingerprints, drift, mode, hash_seeds)


def detect_drift(
    make_runtime: Callable[[Store], Any],
    agent: Callable[..., Any],
    input: Any,
    n: int,
    *,
    progress: Callable[[int, str | None], None] | None = None,
    seed: str | None = None,
    run_id: str | None = None,
    hold_llm: bool = False,
) -> DriftReport:
    """Every attempt in this process: ``make_runtime(store)`` builds a runtime over a fresh
    store for each run. Drift that depends on the process's hash seed cannot show here.
    Every attempt runs under one run id (``run_id``, by default :func:`drift_run_id` of the
    agent's qualified name) and one ``seed`` (by default the one that id gives). With
    ``hold_llm`` the attempts after the first answer their LLM steps from the first run."""
    same_id = run_id or drift_run_id(f"{agent.__module__}:{agent.__qualname__}", input)
    first: list[dict[str, Any]] = []

    def in_process(number: int, location: Path) -> str:
        store = open_store(location)
        runtime = make_runtime(store)
        try:
            if hold_llm and number > 0:
                runtime.environment.held = HeldAnswers(first)
            result = runtime.run(agent, input, run_id=same_id, seed=seed)
            if hold_llm and number == 0:
                first.extend(load_run(store, result.run_id).effects.values())
            return str(result.run_id)
        finally:
            runtime.close()
            store.close()

    report = compare_attempts(in_process, n, progress=progress)
    report.held_llm = hold_llm
    return report
