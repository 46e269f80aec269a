"""``tracelock store copy`` carries the run queue: directory -> PostgreSQL and back on a real
server, every row verbatim (queued, done with an idempotency key, waiting for approval, in
error; tenants included) and in its order; a resubmitted key finds its run, workers on the copy take the queued
runs in order and resume the approved one; leased runs and a non-empty destination queue are
refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.pg_server import pg_cluster, pg_database, pg_url  # noqa: F401  (the PostgreSQL fixtures)
from tests.runtime import _queue_agents as agents
from tracelock.cli.main import cli
from tracelock.runtime.queue import Worker
from tracelock.runtime.queue.backends import close_queue, existing_queue, queue_for
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime
from tracelock.storage.copy import verify_copy
from tracelock.storage.open import open_store
from tracelock.storage.queue_backend import QueueItem, QueueRow

Locations = tuple[str, str]


@pytest.fixture(params=["directory-to-postgresql", "postgresql-to-directory"])
def locations(request: pytest.FixtureRequest, tmp_path: Path) -> Locations:
    url: str = request.getfixturevalue("pg_url")
    directory = str(tmp_path / "store")
    return (directory, url) if request.param == "directory-to-postgresql" else (url, directory)


@pytest.fixture
def database(request: pytest.FixtureRequest) -> str:
    """A fresh PostgreSQL database's connection string."""
    url: str = request.getfixturevalue("pg_url")
    return url


def runtime(location: str) -> Runtime:
    return Runtime(location, agents.POLICY, toolkits=(agents.kit,))


def serve(handle: Runtime) -> list[tuple[str, str]]:
    report = Worker(handle, worker_id="w").run(until_idle=True)
    return [(row["run"], row["outcome"]) for row in report.runs]


def copy(source: str, destination: str, *, as_json: bool = True) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, ["store", "copy", source, destination] + (["--json"] if as_json else []))
    if not as_json:
        return result.exit_code, result.stdout
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def fill(location: str) -> dict[str, Any]:
    """A done run (keyed, for a tenant), one waiting for approval, one in error, then three
    queued runs on two queues (one for a tenant); returns their run ids."""
    with runtime(location) as handle:
        paid = handle.submit(agents.payer, {"key": "paid"}, idempotency_key="order-1", tenant="acme")
        parcel = handle.submit(agents.shipper, {"key": "parcel"})
        queue_for(handle.store).enqueue("run-missing-code", "default", "tests.runtime.no_such_module:agent", b"{}", None)
        assert dict(serve(handle)) == {
            paid.run_id: "completed",
            parcel.run_id: "awaiting_approval",
            "run-missing-code": "error",
        }
        queued = [handle.submit(agents.plain, {"key": f"q{number}"}, tenant=tenant).run_id for number, tenant in enumerate(["globex", None])]
        other = handle.submit(agents.plain, {"key": "elsewhere"}, queue="other").run_id
        queued.append(handle.submit(agents.plain, {"key": "q2"}, idempotency_key="late").run_id)
        return {"paid": paid.run_id, "parcel": parcel.run_id, "queued": queued, "other": other}


def rows(location: str) -> list[dict[str, Any]]:
    with open_store(location, create=False, read_only=True) as store:
        backend = existing_queue(store)
        assert backend is not None
        found = [row.columns() for row in backend.rows()]
        close_queue(store)
        return found


def test_the_queue_is_copied_verbatim_and_served_in_order_on_the_copy(locations: Locations) -> None:
    source, destination = locations
    runs = fill(source)
    code, document = copy(source, destination)
    assert code == 0, document
    assert document["ok"] is True and document["mismatches"] == []
    assert document["queue_rows"] == 7
    assert document["queue_states"] == {"done": 1, "waiting": 1, "error": 1, "queued": 4}
    assert rows(destination) == rows(source)  # every column and position
    tenants = {row["run"]: row["tenant"] for row in rows(destination)}
    assert (tenants[runs["paid"]], tenants[runs["queued"][0]], tenants[runs["queued"][1]]) == ("acme", "globex", None)

    with runtime(destination) as moved:
        # The idempotency key of a finished run still names it (with its tenant): no second run.
        again = moved.submit(agents.payer, {"key": "paid"}, idempotency_key="order-1", tenant="acme")
        assert again.run_id == runs["paid"] and again.status() == "completed"
        assert again.result(timeout=10).output == {"found": "PAID", "refunded": "refunded", "charged": "charged"}
        assert moved.handle("run-missing-code").status() == "error"
        assert moved.handle(runs["parcel"]).status() == "awaiting_approval"
        # A new submit lands after the copied runs, and the queued ones go in their order.
        fresh = moved.submit(agents.plain, {"key": "after"}).run_id
        assert serve(moved) == [(run, "completed") for run in [*runs["queued"], fresh]]
        assert load_run(moved.store, runs["queued"][0]).start["tenant"] == "globex"  # from the copied row
        assert moved.handle(runs["other"]).status() == "queued"
        # The waiting run needs only its approval, journaled on the copy.
        step = moved.retrieve(runs["parcel"]).waiting_step
        assert step is not None
        moved.approve(runs["parcel"], step, by="alice")
        assert serve(moved) == [(runs["parcel"], "completed")]
        assert queue_for(moved.store).counts() == {
            "default": {"done": 6, "error": 1},
            "other": {"queued": 1},
        }


def test_the_human_output_names_the_queue_rows(tmp_path: Path, database: str) -> None:
    source = str(tmp_path / "store")
    with runtime(source) as handle:
        handle.submit(agents.plain, {"key": "one"})
    code, text = copy(source, database, as_json=False)
    assert code == 0, text
    assert "run queue: 1 row copied (1 queued)" in text


def test_a_store_without_a_queue_gets_none(tmp_path: Path, database: str) -> None:
    source = str(tmp_path / "store")
    with runtime(source) as handle:
        handle.run(agents.plain, {"key": "direct"})
    code, document = copy(source, database)
    assert code == 0 and document["queue_rows"] == 0
    with open_store(database, create=False, read_only=True) as store:
        assert existing_queue(store) is None


def test_a_leased_run_refuses_the_copy_before_anything_is_written(locations: Locations) -> None:
    source, destination = locations
    with runtime(source) as handle:
        handle.submit(agents.plain, {"key": "busy"})
        handle.submit(agents.plain, {"key": "waits"})
        handle.run(agents.plain, {"key": "journaled"})  # some entries to copy
        [claim] = queue_for(handle.store).claim(["default"], "worker-7", 1, 60_000, None)
    code, document = copy(source, destination)
    assert code == 2
    error = document["error"]
    assert error["code"] == "QUEUE_RUNS_LEASED"
    assert "1 leased run" in error["message"] and "worker-7" in error["message"]
    assert "stop the workers" in error["message"] and "SIGTERM" in error["message"]
    assert error["details"]["runs"] == [claim.item.run]
    if destination.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(destination) as conn:  # not even the store's tables were made
            row = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'tracelock%'").fetchone()
            assert row == (0,)
    else:
        assert not Path(destination).exists()
    # Once the run is handed back (what SIGTERM does), the copy goes through.
    with runtime(source) as handle:
        assert queue_for(handle.store).hand_back(claim.item.run, claim.token)
    code, document = copy(source, destination)
    assert code == 0 and document["queue_states"] == {"queued": 2}


def test_a_destination_whose_queue_is_not_empty_is_refused(locations: Locations) -> None:
    source, destination = locations
    fill(source)
    with runtime(destination) as target:
        target.submit(agents.plain, {"key": "already here"})  # a queue row, no entry yet
    code, document = copy(source, destination)
    assert code == 2
    assert document["error"]["code"] == "QUEUE_NOT_EMPTY"
    with open_store(destination, create=False, read_only=True) as store:
        assert store.size() == 0
    assert len(rows(destination)) == 1


def _row(run: str, position: int, state: str = "queued", tenant: str | None = None) -> QueueRow:
    item = QueueItem(run, "default", "m:agent", b'{"a":1}', state, 1, 1_700_000_000_000 + position, tenant=tenant)
    return QueueRow(position, item)


@pytest.mark.parametrize("kind", ["directory", "postgresql"])
def test_restore_keeps_positions_continues_the_counter_and_refuses_a_second_time(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = str(tmp_path / "store") if kind == "directory" else str(request.getfixturevalue("pg_url"))
    with open_store(location) as store:
        backend = queue_for(store)
        try:
            assert backend.restore([_row("a", 40), _row("b", 7, "done"), _row("c", 90)]) == 3
            assert [(row.position, row.item.run) for row in backend.rows()] == [(7, "b"), (40, "a"), (90, "c")]
            _, created = backend.enqueue("d", "default", "m:agent", b"{}", None)
            assert created
            assert [row.position for row in backend.rows()][-1] == 91
            assert [claim.item.run for claim in backend.claim(["default"], "w", 3, 60_000, None)] == ["a", "c", "d"]
            with pytest.raises(Exception) as refused:
                backend.restore([_row("e", 1)])
            assert getattr(refused.value, "code", None) == "QUEUE_NOT_EMPTY"
        finally:
            close_queue(store)


@pytest.mark.parametrize("kind", ["directory", "postgresql"])
def test_restore_refuses_leased_rows(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    location = str(tmp_path / "store") if kind == "directory" else str(request.getfixturevalue("pg_url"))
    with open_store(location) as store:
        backend = queue_for(store)
        try:
            with pytest.raises(Exception) as refused:
                backend.restore([_row("a", 1), _row("b", 2, "leased")])
            assert getattr(refused.value, "code", None) == "QUEUE_RUNS_LEASED"
            assert backend.rows() == []
        finally:
            close_queue(store)


def test_verification_reports_a_queue_row_that_differs(tmp_path: Path, database: str) -> None:
    with open_store(tmp_path / "a") as first, open_store(database) as second:
        theirs, ours = queue_for(first), queue_for(second)
        try:
            theirs.restore([_row("a", 1, tenant="acme"), _row("b", 2), _row("c", 3)])
            ours.restore([_row("a", 1, tenant="globex"), _row("b", 2, "done"), _row("x", 3)])
            report = verify_copy(first, second, 0, queues=(theirs, ours))
        finally:
            close_queue(first)
            close_queue(second)
    assert not report.ok
    assert report.mismatches == [
        "queue row of run a differs in tenant: 'acme' in the source, 'globex' in the copy",
        "queue row of run b differs in state: 'queued' in the source, 'done' in the copy",
        "queue row of run c is missing from the copy",
        "queue row of run x is in the copy, not in the source",
    ]
