"""Entries held in the run (``RunJournal``): the entries that need no durability of their
own (the start, effects that cannot change the world) are written in front of the run's
next write, in one ``append_many``; docs/spec.md 3.4 argues why a crash loses nothing the
guarantees need. These tests count the store's real work on a real store, and kill real
processes at the instants the argument is about."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.runtime._held_kill_child import POLICY, build
from tracelock import Runtime
from tracelock.core.canonical import CanonicalError
from tracelock.core.entry import Entry
from tracelock.errors import StoreError
from tracelock.runtime.records import RunJournal, load_run
from tracelock.storage.backend import NewEntry
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_store

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.runtime._held_kill_child"


class CountingStore(DirectoryStore):
    """A directory store that counts its appends (one per call, with the kinds each call
    carried) and the times it took the writer lock."""

    def __init__(self, path: Path) -> None:
        self.calls: list[list[str]] = []
        self.lock_takes = 0
        super().__init__(path)

    def append(self, run: str, kind: str, **kwargs: Any) -> Entry:
        self.calls.append([kind])
        return super().append(run, kind, **kwargs)

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        self.calls.append([item.kind for item in items])
        return super().append_many(items, durable=durable)

    def _hold_locked(self) -> None:
        if not self._held:
            self.lock_takes += 1
        super()._hold_locked()


def test_a_run_appends_once_per_entry_that_needs_its_own_write(tmp_path: Path) -> None:
    """The LLM call and the read-only tools ride in the next irreversible intent's append:
    a run of an LLM call, two lookups and two payments costs six appends (start, two
    intents, two results, end), each one hold of the writer lock, where each of its nine
    entries once cost one of each."""
    store = CountingStore(tmp_path / "store")
    kit = build(tmp_path)
    with Runtime(store, POLICY, toolkits=(kit,)) as runtime:
        agent = kit.agents["payer"].func
        runtime.run(agent, {"order": "warm-up"})
        store.calls.clear()
        store.lock_takes = 0
        result = runtime.run(agent, {"order": "o"})
        assert result.status == "completed"
        assert store.calls == [
            ["run.start"],
            ["effect", "effect", "effect.intent"],
            ["effect.result"],
            ["effect", "effect.intent"],
            ["effect.result"],
            ["run.end"],
        ]
        assert store.lock_takes == 6
        kinds = [entry.kind for entry in store.entries(result.run_id)]
        assert kinds == [
            "run.start", "effect", "effect", "effect.intent", "effect.result",
            "effect", "effect.intent", "effect.result", "run.end",
        ]
        assert verify_store(store).ok


def test_a_refused_write_writes_nothing_and_keeps_the_held_entries(tmp_path: Path) -> None:
    """A write the store refuses (here: the run was ended by another handle meanwhile)
    writes nothing of the batch, and the entries held before it stay held, in order."""
    with DirectoryStore(tmp_path / "store") as store:
        journal = RunJournal(store, "r")
        journal.start({"agent": "a"}, agent="a", parent=None)
        journal.effect({"step": 0, "kind": "llm", "name": "llm", "class": "read_only", "outcome": "SUCCESS"})
        journal.route({"intent": "x"})
        RunJournal(store, "r").end("aborted", {"outcome": None})
        with pytest.raises(StoreError, match="has ended"):
            journal.intent({"step": 1, "kind": "tool", "name": "pay", "class": "irreversible"})
        assert journal.held == 2
        assert [entry.kind for entry in store.entries("r")] == ["run.start", "run.end"]


def test_a_payload_that_is_not_json_fails_the_call_that_made_it(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path / "store") as store:
        journal = RunJournal(store, "r")
        journal.start({"agent": "a"}, agent="a", parent=None)
        with pytest.raises(CanonicalError):
            journal.route({"bad": float("nan")})
        assert journal.held == 0
        journal.route({"good": 1})
        journal.end("completed", {})
        assert [entry.kind for entry in store.entries("r")] == ["run.start", "route", "run.end"]


def _child(tmp_path: Path, when: str, kind: str, nth: int) -> tuple[Path, Path]:
    store, counters = tmp_path / "store", tmp_path / "counters"
    counters.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", CHILD, str(store), str(counters), when, kind, str(nth)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == -9, proc.stderr
    assert "DONE" not in proc.stdout
    return store, counters


def _ran(counters: Path, tool: str) -> list[str]:
    path = counters / f"{tool}.log"
    return path.read_text().splitlines() if path.exists() else []


def _recover(store: Path, counters: Path) -> tuple[list[dict[str, Any]], str, list[str]]:
    kit = build(counters)
    with Runtime(str(store), POLICY, toolkits=(kit,)) as runtime:
        report = runtime.recover()
        record = load_run(runtime.store, "run-1")
        assert verify_store(runtime.store).ok  # type: ignore[arg-type]
        return report.runs, record.status, [entry.kind for entry in record.entries]


def test_a_kill_after_a_read_only_tool_before_the_next_intent_reruns_only_it(tmp_path: Path) -> None:
    """Killed after the second read-only tool ran, before the second payment's intent was
    written: the read-only effect was held in the process and is lost with it; recovery
    runs it again (its class allows that), and nothing else: the LLM call, the first
    lookup and the first payment are answered from the journal."""
    store, counters = _child(tmp_path, "before", "effect.intent", 2)
    assert _ran(counters, "lookup") == ["o-1", "o-2"] and _ran(counters, "pay") == ["o-1"]
    with DirectoryStore(store, read_only=True) as opened:
        assert [entry.kind for entry in opened.entries("run-1")] == [
            "run.start", "effect", "effect", "effect.intent", "effect.result",
        ]
    runs, status, _ = _recover(store, counters)
    assert [(row["run"], row["to"]) for row in runs] == [("run-1", "completed")], runs
    assert status == "completed"
    assert _ran(counters, "llm") == ["o"]
    assert _ran(counters, "lookup") == ["o-1", "o-2", "o-2"]
    assert _ran(counters, "pay") == ["o-1", "o-2"]


def test_a_kill_before_the_first_intent_reruns_the_llm_call_and_the_lookup(tmp_path: Path) -> None:
    """Killed before the run's first intent: the store has its start alone (the LLM call
    and the lookup were held), and recovery runs the run from its start."""
    store, counters = _child(tmp_path, "before", "effect.intent", 1)
    assert _ran(counters, "lookup") == ["o-1"] and _ran(counters, "pay") == []
    with DirectoryStore(store, read_only=True) as opened:
        assert [entry.kind for entry in opened.entries("run-1")] == ["run.start"]
    runs, status, _ = _recover(store, counters)
    assert [(row["run"], row["to"]) for row in runs] == [("run-1", "completed")], runs
    assert status == "completed"
    assert _ran(counters, "llm") == ["o", "o"] and _ran(counters, "lookup") == ["o-1", "o-1", "o-2"]
    assert _ran(counters, "pay") == ["o-1", "o-2"]


def test_a_kill_after_an_irreversible_result_keeps_it_and_never_blocks(tmp_path: Path) -> None:
    """Killed right after the first payment's result was written (not yet synced), with the
    second lookup still to come: the result survives the process, so recovery answers the
    payment from the journal (never ``blocked``, never paid twice) and runs the rest."""
    store, counters = _child(tmp_path, "after", "effect.result", 1)
    assert _ran(counters, "pay") == ["o-1"]
    runs, status, kinds = _recover(store, counters)
    assert [(row["run"], row["to"]) for row in runs] == [("run-1", "completed")], runs
    assert status == "completed"
    assert kinds[:5] == ["run.start", "effect", "effect", "effect.intent", "effect.result"]
    assert _ran(counters, "pay") == ["o-1", "o-2"]
    assert _ran(counters, "lookup") == ["o-1", "o-2"]
    assert _ran(counters, "llm") == ["o"]
