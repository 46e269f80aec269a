"""The run's sync points (docs/spec.md 3.4): how many there are, and that a process killed
at any instant of a run still loses nothing acknowledged and never repeats the irreversible
effect.

The workload is the README's (an LLM call, a read-only tool, an irreversible tool), and a
variant with a read-only tool after the irreversible one. The kill test runs the workload in
a child process that SIGKILLs itself at instant k, for every k until the run completes, and
after each kill recovers the store in this process and checks the world's ledger.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runtime._sync_point_child import POLICY, build
from tracelock import Runtime
from tracelock.runtime.records import load_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_store

CHILD = Path(__file__).parent.parent / "_sync_point_child.py"
ROOT = Path(__file__).resolve().parents[3]


def _syncs_of_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: bool) -> int:
    """The syncs of one run on a warm store (the store already open and written): its
    fdatasync calls and its writes that return once durable (``RWF_DSYNC``, which the
    journal uses when everything before the write is durable already)."""
    kit = build(tmp_path / "ledger")
    calls = []
    real, real_pwritev = os.fdatasync, os.pwritev

    def pwritev(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        if flags & os.RWF_DSYNC:
            calls.append(fd)
        return real_pwritev(fd, buffers, offset, flags)

    with Runtime(str(tmp_path / "store"), POLICY, toolkits=(kit,)) as runtime:
        runtime.run(kit.agents["payer"].func, {"order": "warm-up", "after": after})
        monkeypatch.setattr(os, "fdatasync", lambda fd: calls.append(fd) or real(fd))
        monkeypatch.setattr(os, "pwritev", pwritev)
        result = runtime.run(kit.agents["payer"].func, {"order": "o2", "after": after})
        monkeypatch.setattr(os, "fdatasync", real)
        monkeypatch.setattr(os, "pwritev", real_pwritev)
    assert result.status == "completed"
    return len(calls)


def test_the_readme_workload_syncs_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The irreversible intent, and the end (which also makes the irreversible result
    durable): the floor the guarantees need."""
    assert _syncs_of_one_run(tmp_path, monkeypatch, after=False) == 2


def test_an_effect_after_an_irreversible_result_waits_for_its_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only tool after the irreversible one could carry its result outside: the
    result is synced before it runs, then the end: three syncs."""
    assert _syncs_of_one_run(tmp_path, monkeypatch, after=True) == 3


def _child(store: Path, ledger: Path, kill_at: int, after: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(CHILD), str(store), str(ledger), str(kill_at), "after" if after else "readme"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )


@pytest.mark.parametrize("after", [False, True], ids=["readme", "effect-after-irreversible"])
def test_a_kill_at_any_instant_loses_nothing_acknowledged_and_pays_once(tmp_path: Path, after: bool) -> None:
    whole = _child(tmp_path / "whole", tmp_path / "whole.ledger", 0, after)
    assert whole.returncode == 0, whole.stderr
    instants = int(whole.stdout.split("INSTANTS ")[1])
    assert instants > 12
    outcomes: dict[str, int] = {}
    for kill_at in range(1, instants + 1):
        store, ledger = tmp_path / f"store-{kill_at}", tmp_path / f"ledger-{kill_at}"
        child = _child(store, ledger, kill_at, after)
        assert child.returncode == -9, (kill_at, child.returncode, child.stderr)
        acknowledged = child.stdout.split("DONE ")[1].split()[0] if "DONE " in child.stdout else None
        if not (store / "store.json").exists():
            outcomes["no store"] = outcomes.get("no store", 0) + 1
            continue
        kit = build(ledger)
        with DirectoryStore(store) as opened:
            with Runtime(opened, POLICY, toolkits=(kit,)) as runtime:
                runtime.recover()
            assert verify_store(opened).ok
            runs = [info.run for info in opened.runs()]
            record = load_run(opened, "run-1") if "run-1" in runs else None
        paid = ledger.read_text().splitlines() if ledger.exists() else []
        assert paid.count("pay o1") <= 1, f"kill at instant {kill_at}: paid {paid}"
        status = record.status if record is not None else "not started"
        if acknowledged is not None:
            # The caller was told: the run's end, with that fingerprint, survived.
            assert record is not None and record.end is not None
            assert record.end["fingerprint"] == acknowledged, kill_at
        if status == "blocked":
            # Only an irreversible step whose result was lost blocks, and it ran at most once.
            assert record is not None and record.waiting_step == 2, kill_at
        else:
            assert status in ("completed", "not started"), (kill_at, status)
            if status == "completed":
                assert paid == ["pay o1"], (kill_at, paid)
        outcomes[status] = outcomes.get(status, 0) + 1
    # The sweep reached the cases that matter: runs completed by recovery after a kill
    # (before and after the payment) and runs not started.
    assert outcomes.get("blocked", 0) > 0 and outcomes.get("completed", 0) > 5 and outcomes.get("not started", 0) + outcomes.get("no store", 0) > 0, outcomes
