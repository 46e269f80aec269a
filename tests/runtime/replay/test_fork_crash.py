"""A fork child cut short while it copied its parent's prefix: recovery answers every step
before the fork point from the parent's record (copying what the child's journal lacks),
never live, so an irreversible effect of the prefix does not run a second time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.runtime import _fork_crash_child as child
from tracelock.runtime.records import RunJournal, load_run
from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.runtime import Runtime
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_store

REPO = Path(__file__).resolve().parents[3]


def _lines(counters: Path, tool: str) -> list[str]:
    path = counters / f"{tool}.log"
    return path.read_text().splitlines() if path.exists() else []


def _reused(runtime: Runtime, run: str) -> dict[int, Any]:
    return {step: doc.get("reused_from") for step, doc in load_run(runtime.store, run).effects.items()}


@pytest.fixture
def counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "counters"
    path.mkdir()
    monkeypatch.setenv("TRACELOCK_CRASH_COUNTERS", str(path))
    return path


@pytest.fixture
def runtime(tmp_path: Path, counters: Path) -> Iterator[Runtime]:
    rt = child.make_runtime(str(tmp_path / "store"))
    yield rt
    rt.close()


def test_fork_killed_while_copying_its_prefix_recovers_without_rerunning_it(tmp_path: Path, counters: Path) -> None:
    store_dir = tmp_path / "store"
    env = dict(os.environ, TRACELOCK_CRASH_COUNTERS=str(counters))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.runtime._fork_crash_child", str(store_dir), "parent", "child"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert b"RECORDED" in proc.stdout and b"FORK ENDED" not in proc.stdout
    with DirectoryStore(store_dir, read_only=True) as store:
        crashed = load_run(store, "child")
    # The instant of the kill: the child exists; its copy of step 0 was held in the
    # process (written with the child's next write), and died with it.
    assert crashed.status == "running" and sorted(crashed.effects) == []
    assert crashed.parent == {"run": "parent", "step": child.FORK_AT}
    assert _lines(counters, "charge") == ["5"]

    runtime = child.make_runtime(str(store_dir))
    try:
        report = runtime.recover()
        assert [(row["run"], row["to"]) for row in report.runs] == [("child", "completed")], report.runs
        # The prefix (read-only and irreversible) ran once, in the parent; the child's
        # live step ran once.
        assert _lines(counters, "charge") == ["5"]
        assert _lines(counters, "fetch") == ["0", "2"]
        assert _lines(counters, "notify") == ["5", "5"]
        assert _reused(runtime, "child") == {
            0: {"run": "parent", "step": 0},
            1: {"run": "parent", "step": 1},
            2: {"run": "parent", "step": 2},
            3: None,
        }
        clean = fork_run(runtime, "parent", child.FORK_AT, new_run_id="clean")
        assert load_run(runtime.store, "child").end["fingerprint"] == clean.fingerprint  # type: ignore[index]
        assert verify_store(runtime.store).ok  # type: ignore[arg-type]
    finally:
        runtime.close()


def _copy_entries(runtime: Runtime, source: str, target: str, count: int) -> None:
    """Write the first ``count`` entries of ``source``'s journal as ``target``'s, through the
    journal API a fork writes with: the state a crash after those writes leaves."""
    journal = RunJournal(runtime.store, target)
    for entry in runtime.store.entries(source)[:count]:
        doc = runtime.store.get_payload(entry.payload) if entry.payload else None
        assert isinstance(doc, dict)
        if entry.kind == "run.start":
            journal.start(doc, agent=str(doc["agent"]), parent=doc["parent"]["run"])
        elif entry.kind == "effect":
            journal.effect(doc)
        elif entry.kind == "effect.intent":
            journal.intent(doc)
        elif entry.kind == "effect.result":
            journal.result(doc, irreversible=True)
        else:
            raise AssertionError(f"unexpected entry {entry.kind} before the end of a fork")
    # What the journal holds in the run reaches the store with its next write: the state
    # of a journal cut right after this entry.
    journal.write_held()


@pytest.mark.parametrize("written", [1, 2, 3, 4, 5, 6])
def test_fork_cut_after_any_entry_recovers_to_the_uninterrupted_fork(
    runtime: Runtime, counters: Path, written: int
) -> None:
    runtime.run(child.agent, {"amount": 7}, run_id="parent")
    reference = fork_run(runtime, "parent", child.FORK_AT, new_run_id="reference")
    kinds = [entry.kind for entry in runtime.store.entries("reference")]
    assert kinds == ["run.start", "effect", "effect", "effect", "effect.intent", "effect.result", "run.end"]
    before = {tool: _lines(counters, tool) for tool in ("fetch", "charge", "notify")}

    _copy_entries(runtime, "reference", "cut", written)
    report = runtime.recover()

    assert [(row["run"], row["to"]) for row in report.runs] == [("cut", "completed")], report.runs
    assert _lines(counters, "charge") == before["charge"] == ["7"]
    assert _lines(counters, "fetch") == before["fetch"]
    # The live step runs again only while its result is not in the child's journal (it is
    # idempotent: re-run with the key it was first given).
    assert len(_lines(counters, "notify")) == len(before["notify"]) + (1 if written < 6 else 0)
    assert _reused(runtime, "cut") == {
        0: {"run": "parent", "step": 0},
        1: {"run": "parent", "step": 1},
        2: {"run": "parent", "step": 2},
        3: None,
    }
    assert load_run(runtime.store, "cut").end["fingerprint"] == reference.fingerprint  # type: ignore[index]
    copies = [entry.kind for entry in runtime.store.entries("cut")].count("effect")
    assert copies == 3  # each prefix step copied exactly once


def test_a_copied_prefix_step_that_contradicts_the_parent_stops_recovery(runtime: Runtime, counters: Path) -> None:
    runtime.run(child.agent, {"amount": 7}, run_id="parent")
    fork_run(runtime, "parent", child.FORK_AT, new_run_id="reference")
    before = {tool: _lines(counters, tool) for tool in ("fetch", "charge", "notify")}
    _copy_entries(runtime, "reference", "forged", 2)
    copy = dict(load_run(runtime.store, "reference").effects[0])
    copy["step"] = 1
    copy["result"] = {"fetched": "not what the parent saw"}
    forged = RunJournal(runtime.store, "forged")
    forged.effect(copy)
    forged.write_held()

    report = runtime.recover()

    (row,) = report.runs
    assert row["run"] == "forged" and row["to"] == "running"
    assert row["error_kind"] == "FORK_PREFIX_INVALID" and "step 1" in row["reason"]
    assert {tool: _lines(counters, tool) for tool in before} == before
    record = load_run(runtime.store, "forged")
    assert record.status == "running" and sorted(record.effects) == [0, 1]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    step=st.integers(0, child.FORK_AT - 1),
    member=st.sampled_from(["result", "args", "name", "outcome", "class", "reused_from"]),
    value=st.one_of(st.integers(-3, 3), st.text(max_size=4), st.lists(st.booleans(), max_size=2)),
)
def test_any_change_to_a_copied_prefix_step_is_refused_and_runs_nothing(
    counters: Path, step: int, member: str, value: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rt = child.make_runtime(str(Path(tmp) / "store"))
        try:
            rt.run(child.agent, {"amount": 7}, run_id="parent")
            fork_run(rt, "parent", child.FORK_AT, new_run_id="reference")
            copy = dict(load_run(rt.store, "reference").effects[step])
            assume(copy.get(member) != value)
            copy[member] = value
            _copy_entries(rt, "reference", "cut", 1 + step)
            cut = RunJournal(rt.store, "cut")
            cut.effect(copy)
            cut.write_held()
            before = {tool: _lines(counters, tool) for tool in ("fetch", "charge", "notify")}

            (row,) = rt.recover().runs

            assert row["to"] == "running" and row["error_kind"] == "FORK_PREFIX_INVALID", row
            assert f"at step {step}" in row["reason"]
            assert {tool: _lines(counters, tool) for tool in before} == before
            assert sorted(load_run(rt.store, "cut").effects) == list(range(step + 1))
        finally:
            rt.close()
