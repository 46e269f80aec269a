"""Continuing a run is exclusive across processes (``tracelock.storage.claims``): two
callers resuming one approved run at once would both execute its irreversible effect."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_server import pg_cluster, pg_database, pg_url  # noqa: F401  (the PostgreSQL fixtures)
from tests.runtime.runtime_helpers import allow, runtime_at
from tracelock.runtime.errors import RunBusyError, RunStateError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.claims import claim_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.postgres import PostgresStore

kit = Toolkit()
PAID: list[int] = []
ENTERED = threading.Event()
GATE = threading.Event()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    PAID.append(amount)
    ENTERED.set()
    GATE.wait(20)
    return f"paid {amount}"


def agent(ctx: Any, task: Any) -> Any:
    return ctx.call("pay", amount=task["amount"])


POLICY = allow({"name": "pay", "approval": True})


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    PAID.clear()
    ENTERED.clear()
    GATE.clear()
    yield
    GATE.set()


def race(make: Callable[[], Runtime]) -> None:
    """An approved run, continued by a thread of one runtime while a second runtime over
    the same store tries to continue it too (``resume``, then ``recover``)."""
    with make() as first, make() as second:
        waiting = first.run(agent, {"amount": 7})
        assert waiting.status == "awaiting_approval"
        first.approve(waiting.run_id, 0, by="alice")
        results: list[Any] = []
        holder = threading.Thread(target=lambda: results.append(first.resume(waiting.run_id, agent)))
        holder.start()
        assert ENTERED.wait(20)
        with pytest.raises(RunBusyError) as busy:
            second.resume(waiting.run_id, agent)
        assert isinstance(busy.value, RunStateError)
        assert busy.value.details == {"run": waiting.run_id}
        # Presence alone keeps recovery off a run in a live process's hands; even when the
        # operator overrides it, the claim does.
        assert "live process" in next(row for row in second.recover().runs if row["run"] == waiting.run_id)["reason"]
        report = second.recover(force=True)
        rows = [row for row in report.runs if row["run"] == waiting.run_id]
        assert [(row["to"], row.get("error_kind")) for row in rows] == [("running", "RUN_BUSY")]
        GATE.set()
        holder.join(20)
        assert [result.status for result in results] == ["completed"]
        # Once the holder let go, the run can be claimed again: it is finished, so nothing runs.
        assert second.resume(waiting.run_id, agent).output == "paid 7"
    assert PAID == [7]


def test_two_callers_continuing_one_run_execute_its_effect_once(tmp_path: Path) -> None:
    race(lambda: runtime_at(tmp_path, POLICY, toolkits=(kit,)))


def test_two_callers_continuing_one_run_on_postgresql_execute_its_effect_once(pg_url: str) -> None:  # noqa: F811
    race(lambda: Runtime(pg_url, POLICY, toolkits=(kit,)))


def test_a_claim_is_exclusive_until_released_and_leaves_no_file(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path / "s") as store:
        first = claim_run(store, "run-1")
        assert first is not None
        assert claim_run(store, "run-1") is None
        other = claim_run(store, "run-2")  # another run is claimed independently
        assert other is not None
        other.release()
        first.release()
        again = claim_run(store, "run-1")
        assert again is not None
        again.release()
        assert list((tmp_path / "s" / "runtimes" / "claims").iterdir()) == []


def test_a_claim_on_postgresql_is_exclusive_until_released(pg_url: str) -> None:  # noqa: F811
    with PostgresStore(pg_url) as store, PostgresStore(pg_url) as elsewhere:
        held = claim_run(store, "run-1")
        assert held is not None
        assert claim_run(elsewhere, "run-1") is None
        assert claim_run(elsewhere, "run-2") is not None
        held.release()
        assert claim_run(elsewhere, "run-1") is not None
