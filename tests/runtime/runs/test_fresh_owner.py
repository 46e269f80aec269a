"""One owner per run for runs started under a fresh (random) run id, whose lease the
directory store keeps in its runtime's mapped presence file (a slot lease,
tracelock.storage.directory.ownership), not in a row: several processes race to take such
a run over with ``recover --force`` while its owner lives, after it was paused past its
lease, and after it was killed inside its irreversible effect. An irreversible tool writes
each real execution to a ledger outside the store: each order appears there once, a live
owner's run is never taken from it, and the store verifies."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import _fresh_owner_child as child
from tests.runtime._one_owner_child import checkout, runtime_for
from tests.runtime.runs.test_one_owner import _ledger, _verifies, _wait_for
from tracelock import Runtime
from tracelock.runtime.errors import RunBusyError

SPAWN = multiprocessing.get_context("spawn")
TAKERS = 3


def _owner(location: str, tmp_path: Path, order: str, lease_ms: int) -> Any:
    """A process running ``order`` under a fresh id, stopped inside its charge (after the
    ledger line: the charge's intent is in the store) until the hold file is removed."""
    (tmp_path / f"hold-{order}").write_text("hold")
    owner = SPAWN.Process(target=child.fresh_owner, args=(location, str(tmp_path / "ledger"), order, lease_ms))
    owner.start()
    _wait_for(tmp_path / f"inside-{order}", "the owner to enter its charge")
    return owner


def _race_takers(location: str, tmp_path: Path) -> list[dict[str, Any]]:
    """``TAKERS`` processes run ``recover --force`` at once; their report rows."""
    results = tmp_path / "takers.jsonl"
    results.unlink(missing_ok=True)
    barrier = SPAWN.Barrier(TAKERS)
    takers = [
        SPAWN.Process(target=child.taker, args=(location, str(tmp_path / "ledger"), str(results), barrier, f"taker-{n}"))
        for n in range(TAKERS)
    ]
    for process in takers:
        process.start()
    for process in takers:
        process.join(300)
        assert process.exitcode == 0, f"a taker ended with exit code {process.exitcode}"
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    assert not [row for row in rows if "error" in row], rows
    return rows


def _running_run(location: str, tmp_path: Path) -> str:
    with runtime_for(location, tmp_path / "ledger") as runtime:
        [run] = [info.run for info in runtime.store.runs() if info.status == "running"]
        return run


def test_takers_leave_a_live_owner_s_fresh_run_alone(location: str, tmp_path: Path) -> None:
    order = "order-live"
    owner = _owner(location, tmp_path, order, 30_000)
    try:
        run = _running_run(location, tmp_path)
        rows = _race_takers(location, tmp_path)
        assert [(row["run"], row["to"], row.get("error_kind")) for row in rows] == [(run, "running", "RUN_BUSY")] * TAKERS
        with runtime_for(location, tmp_path / "ledger") as runtime:
            holder = runtime.store.ownership().holder(run)
            assert holder is not None and holder.live and holder.owner.startswith(f"{owner.pid}-")
            with pytest.raises(RunBusyError):
                runtime.resume(run, checkout)
        (tmp_path / f"hold-{order}").unlink()
        owner.join(60)
        assert owner.exitcode == 0
        assert json.loads((tmp_path / f"outcome-{order}").read_text()) == {"status": "completed", "run": run}
    finally:
        (tmp_path / f"hold-{order}").unlink(missing_ok=True)
        owner.join(60)
    assert _ledger(tmp_path / "ledger") == Counter({order: 1})
    _verifies(location)


def test_an_owner_paused_past_its_lease_loses_its_fresh_run_to_one_taker(location: str, tmp_path: Path) -> None:
    """The owner is stopped (SIGSTOP) inside its charge past its lease: the takers race, one
    of them takes the run over and finds the charge's intent without a result (blocked, never
    charged again); continued, the old owner's next append (the charge's result) is refused."""
    order = "order-paused"
    owner = _owner(location, tmp_path, order, 300)
    assert owner.pid is not None
    try:
        run = _running_run(location, tmp_path)
        os.kill(owner.pid, signal.SIGSTOP)
        (tmp_path / f"hold-{order}").unlink()
        time.sleep(0.6)  # past the owner's lease (300 ms)
        rows = _race_takers(location, tmp_path)
        assert {row["run"] for row in rows} == {run}
        # A taker continued it (another may continue it after that one let go: it finds it
        # blocked too); the others found it held.
        assert any(row["to"] == "blocked" and row["from"] == "running" for row in rows)
        assert all(row["to"] == "blocked" or row.get("error_kind") == "RUN_BUSY" for row in rows)
        os.kill(owner.pid, signal.SIGCONT)
        owner.join(60)
        assert owner.exitcode == 3
        ended = json.loads((tmp_path / f"outcome-{order}").read_text())
        assert ended == {"raised": "LeaseLostError", "code": "RUN_LEASE_LOST"}
        with runtime_for(location, tmp_path / "ledger") as runtime:
            assert runtime.retrieve(run).status == "blocked"
    finally:
        if owner.is_alive():
            os.kill(owner.pid, signal.SIGCONT)
            owner.kill()
        owner.join(60)
    assert _ledger(tmp_path / "ledger") == Counter({order: 1})
    _verifies(location)


def test_a_killed_owner_s_fresh_run_is_blocked_by_one_taker_never_charged_twice(location: str, tmp_path: Path) -> None:
    """``kill -9`` of the owner inside its charge (an hour's lease): its lease is void at
    once; the takers race, one continues the run and finds the charge's intent without a
    result: blocked, never charged again."""
    order = "order-killed"
    owner = _owner(location, tmp_path, order, 3_600_000)
    run = _running_run(location, tmp_path)
    owner.kill()
    owner.join(60)
    (tmp_path / f"hold-{order}").unlink()
    rows = _race_takers(location, tmp_path)
    assert {row["run"] for row in rows} == {run}
    assert all(row["to"] == "blocked" or row.get("error_kind") == "RUN_BUSY" for row in rows)
    assert any(row["to"] == "blocked" for row in rows)
    with runtime_for(location, tmp_path / "ledger") as runtime:
        assert runtime.retrieve(run).status == "blocked"
    assert _ledger(tmp_path / "ledger") == Counter({order: 1})
    _verifies(location)


def test_a_run_under_a_fresh_id_writes_nothing_to_the_queue_database(tmp_path: Path) -> None:
    """The lease of a run under a fresh id costs no SQLite write: ``queue.sqlite`` is not
    committed to while runs start and end (``PRAGMA data_version`` of another connection
    moves with every commit of another one)."""
    store = tmp_path / "store"
    from tests.runtime._one_owner_child import POLICY, build

    with Runtime(str(store), POLICY, toolkits=(build(tmp_path / "ledger"),)) as runtime:
        runtime.run(checkout, {"order": "order-0"})  # makes the files
        watcher = sqlite3.connect(store / "queue.sqlite")
        try:
            before = watcher.execute("PRAGMA data_version").fetchone()[0]
            results = [runtime.run(checkout, {"order": f"order-{n}"}) for n in range(1, 6)]
            assert watcher.execute("PRAGMA data_version").fetchone()[0] == before
        finally:
            watcher.close()
    assert [result.status for result in results] == ["completed"] * 5
    assert _ledger(tmp_path / "ledger") == Counter({f"order-{n}": 1 for n in range(6)})
