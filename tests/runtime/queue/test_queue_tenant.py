"""Queued runs carry a tenant, on both backends: ``submit(..., tenant=)`` stores it with the
row, a worker process runs the run for it (recorded in the run's start) so the tenant's
daily budgets apply across queued runs; an idempotent re-submit with another tenant is
refused; ``tracelock submit --tenant`` and ``tracelock queue`` show it; a queue made before
the tenant column is migrated in place on first use and keeps its rows."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import _queue_agents as agents
from tracelock.runtime.errors import AgentDefinitionError, RunStateError
from tracelock.runtime.queue import Worker
from tracelock.runtime.queue.backends import queue_for
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime
from tracelock.storage.directory.queue import QUEUE_FILE
from tracelock.storage.postgres.queue import QUEUE_MIGRATIONS

REPO = Path(__file__).resolve().parents[3]

#: The tools of the queue tests' agents, and a daily budget of five effects per tenant.
BUDGET_POLICY = """\
version = 1

[[tools]]
name = "lookup"

[[tools]]
name = "refund"

[[tools]]
name = "charge"

[daily_budgets.tenant]
effects = 5
"""


@pytest.fixture
def runtime(location: str) -> Iterator[Runtime]:
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as handle:
        yield handle


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``tracelock ARGS`` in a process of its own, with the tests' agents importable."""
    return subprocess.run(
        [sys.executable, "-m", "tests.runtime._queue_worker_child", *args],
        cwd=REPO, capture_output=True, text=True, timeout=180, env=env,
    )


def worker(location: str, policy: Path, *args: str) -> dict[str, Any]:
    """A real worker process over the store, under ``policy``; its JSON report."""
    done = cli("worker", "tests.runtime._queue_agents", "--store", location, "--policy", str(policy), "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_a_worker_runs_a_queued_run_for_its_tenant_and_the_tenants_daily_budget_spans_queued_runs(
    location: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(BUDGET_POLICY)
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as submitter:
        # Three tool steps each (a lookup, a refund, a charge): the budget counts them all.
        acme = [submitter.submit(agents.payer, {"key": f"a{n}"}, tenant="acme") for n in range(2)]
        globex = submitter.submit(agents.payer, {"key": "g"}, tenant="globex")
        nobody = submitter.submit(agents.payer, {"key": "n"})
        assert acme[0].tenant() == "acme" and nobody.tenant() is None
        run_ids = [handle.run_id for handle in (*acme, globex, nobody)]
    # One worker process takes the first run, another one (a fresh process: the day's
    # spending comes from the store) the rest.
    first = worker(location, policy, "--max-runs", "1")
    assert [(row["run"], row["outcome"]) for row in first["runs"]] == [(run_ids[0], "completed")]
    rest = worker(location, policy, "--until-idle")
    assert {row["run"]: row["outcome"] for row in rest["runs"]} == {
        run_ids[1]: "failed",  # acme's sixth effect (this run's charge) is over five
        run_ids[2]: "completed",
        run_ids[3]: "completed",  # no tenant: no tenant budget
    }
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as reader:
        starts = [load_run(reader.store, run).start for run in run_ids]
        assert [start.get("tenant") for start in starts] == ["acme", "acme", "globex", None]
        assert starts[1]["daily"]["runs_before"]["tenant"] == 1  # acme's first run, by the other worker
        assert reader.handle(run_ids[1]).result(timeout=10).outcome == "DENIED"
        effects = load_run(reader.store, run_ids[1]).effects
        assert [effects[step]["outcome"] for step in sorted(effects)] == ["SUCCESS", "SUCCESS", "DENIED"]
        charge = effects[2]
        assert (charge["code"], charge["phase"]) == ("DAILY_BUDGET_EXCEEDED", "AUTHORIZE")
        details = charge["error"]["details"]
        assert (details["scope"], details["key"], details["budget"], details["used"]) == ("tenant", "acme", "effects", 5)


def test_a_resubmit_with_another_tenant_is_refused_like_another_input(runtime: Runtime) -> None:
    first = runtime.submit(agents.plain, {"key": "k"}, idempotency_key="order-1", tenant="acme")
    assert runtime.submit(agents.plain, {"key": "k"}, idempotency_key="order-1", tenant="acme").run_id == first.run_id
    with pytest.raises(RunStateError) as other:
        runtime.submit(agents.plain, {"key": "k"}, idempotency_key="order-1", tenant="globex")
    assert "tenant 'acme'" in other.value.message and "tenant 'globex'" in other.value.message
    with pytest.raises(RunStateError) as none:
        runtime.submit(agents.plain, {"key": "k"}, idempotency_key="order-1")
    assert "no tenant" in none.value.message
    with pytest.raises(RunStateError):  # by run id too
        runtime.submit(agents.plain, {"key": "k"}, run_id=first.run_id, tenant="globex")
    untenanted = runtime.submit(agents.plain, {"key": "u"}, idempotency_key="order-2")
    with pytest.raises(RunStateError) as added:
        runtime.submit(agents.plain, {"key": "u"}, idempotency_key="order-2", tenant="acme")
    assert "no tenant" in added.value.message and untenanted.tenant() is None
    for bad in ("", 7):
        with pytest.raises(AgentDefinitionError) as invalid:
            runtime.submit(agents.plain, {"key": "x"}, tenant=bad)  # type: ignore[arg-type]
        assert invalid.value.message == "a tenant is a non-empty string"
    assert queue_for(runtime.store).counts() == {"default": {"queued": 2}}


def test_the_submit_and_queue_commands_take_and_show_the_tenant(location: str, runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "input.json").write_text(json.dumps({"key": "cli"}))
    submitted = cli(
        "submit", "tests.runtime._queue_agents:plain", "--input", str(tmp_path / "input.json"),
        "--key", "cli-1", "--tenant", "acme", "--store", location, "--json",
    )
    assert submitted.returncode == 0, submitted.stderr
    document = json.loads(submitted.stdout)
    assert document["tenant"] == "acme" and document["status"] == "queued"
    run_id = document["run_id"]
    assert runtime.handle(run_id).tenant() == "acme"
    # The same key for another tenant: refused (exit 2, RUN_STATE_INVALID).
    refused = cli(
        "submit", "tests.runtime._queue_agents:plain", "--input", str(tmp_path / "input.json"),
        "--key", "cli-1", "--tenant", "globex", "--store", location, "--json",
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "RUN_STATE_INVALID"
    plain = runtime.submit(agents.plain, {"key": "plain"})
    listed = cli("queue", "--state", "queued", "--store", location, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(row["run"], row["tenant"]) for row in json.loads(listed.stdout)["runs"]] == [
        (run_id, "acme"), (plain.run_id, None),
    ]
    text = cli("queue", "--state", "queued", "--store", location)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    header = next(line.split() for line in lines if line.startswith("RUN "))
    first = next(line.split() for line in lines if line.startswith(run_id))
    assert header[:4] == ["RUN", "QUEUE", "STATE", "TENANT"] and first[:4] == [run_id, "default", "queued", "acme"]
    human = cli(
        "submit", "tests.runtime._queue_agents:plain", "--tenant", "globex", "--store", location,
    )
    assert human.returncode == 0 and "for tenant globex" in human.stdout, human.stderr
    assert cli("submit", "tests.runtime._queue_agents:plain", "--tenant", "", "--store", location).returncode == 2


# -- a queue made before the tenant column -------------------------------------------------

def _old_directory_queue(store: Path) -> None:
    """``queue.sqlite`` at schema version 1 (no tenant column), with one queued row."""
    conn = sqlite3.connect(store / QUEUE_FILE, isolation_level=None)
    try:
        conn.execute(
            "CREATE TABLE runs (run TEXT PRIMARY KEY, queue TEXT NOT NULL, agent TEXT NOT NULL, input BLOB NOT NULL,"
            " idempotency_key TEXT, state TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'waiting', 'done', 'error')),"
            " position INTEGER NOT NULL, enqueued_ms INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, note TEXT)"
        )
        conn.execute("CREATE INDEX runs_ready ON runs (queue, position) WHERE state = 'queued'")
        conn.execute("CREATE INDEX runs_held ON runs (queue) WHERE state = 'leased'")
        conn.execute(
            "CREATE TABLE leases (run TEXT PRIMARY KEY, worker TEXT NOT NULL, token INTEGER NOT NULL, "
            "expires_ms INTEGER NOT NULL)"
        )
        conn.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        conn.execute("INSERT INTO counters (name, value) VALUES ('token', 0), ('position', 1)")
        conn.execute(
            "INSERT INTO runs (run, queue, agent, input, idempotency_key, state, position, enqueued_ms) "
            "VALUES ('run-old', 'default', 'tests.runtime._queue_agents:plain', CAST(? AS BLOB), 'old-key', 'queued', 1, 1)",
            (b'{"key":"old"}',),
        )
        conn.execute("PRAGMA user_version = 1")
    finally:
        conn.close()


def _old_postgres_queue(url: str) -> None:
    """The queue's tables at schema version 1 (no tenant column), with one queued row."""
    import psycopg

    with psycopg.connect(url) as conn:
        for statement in QUEUE_MIGRATIONS[0]:
            conn.execute(statement.encode())
        conn.execute("UPDATE tracelock_queue_schema SET version = 1 WHERE id = 1")
        conn.execute(
            "INSERT INTO tracelock_queue_runs (run, queue, agent, input, idempotency_key, state, enqueued_ms) "
            "VALUES ('run-old', 'default', 'tests.runtime._queue_agents:plain', %s, 'old-key', 'queued', 1)",
            (b'{"key":"old"}',),
        )


def _newest(location: str) -> int:
    """The queue schema version this tracelock migrates to (PostgreSQL's has one more: its
    leases hold every run's, not only queued ones)."""
    return 3 if location.startswith("postgresql://") else 2


def _schema_version(location: str) -> tuple[int, bool]:
    """The queue's schema version, and whether its runs table has a tenant column."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location) as conn:
            version = conn.execute("SELECT version FROM tracelock_queue_schema").fetchone()
            column = conn.execute(
                "SELECT count(*) FROM information_schema.columns "
                "WHERE table_name = 'tracelock_queue_runs' AND column_name = 'tenant'"
            ).fetchone()
            assert version is not None and column is not None
            return int(version[0]), bool(column[0])
    conn = sqlite3.connect(Path(location) / QUEUE_FILE)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
        return int(version[0]), "tenant" in columns
    finally:
        conn.close()


def test_a_queue_without_the_tenant_column_is_migrated_in_place_and_keeps_its_rows(location: str) -> None:
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)):
        pass  # the store, without a queue
    if location.startswith("postgresql://"):
        _old_postgres_queue(location)
    else:
        _old_directory_queue(Path(location))
    assert _schema_version(location) == (1, False)
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as rt:
        backend = queue_for(rt.store)
        assert _schema_version(location) == (_newest(location), True)
        [old] = backend.rows()
        assert (old.item.run, old.item.idempotency_key, old.item.tenant, old.item.state) == (
            "run-old", "old-key", None, "queued",
        )
        assert old.item.input == b'{"key":"old"}'
        fresh = rt.submit(agents.plain, {"key": "new"}, tenant="acme")
        assert [(row.item.run, row.item.tenant) for row in backend.rows()] == [
            ("run-old", None), (fresh.run_id, "acme"),
        ]
        report = Worker(rt, worker_id="w").run(until_idle=True)
        assert [(row["run"], row["outcome"]) for row in report.runs] == [
            ("run-old", "completed"), (fresh.run_id, "completed"),
        ]
        assert "tenant" not in load_run(rt.store, "run-old").start
        assert load_run(rt.store, fresh.run_id).start["tenant"] == "acme"
    # Opening it again migrates nothing more.
    with Runtime(location, agents.POLICY, toolkits=(agents.kit,)) as rt:
        assert len(queue_for(rt.store).rows()) == 2
    assert _schema_version(location) == (_newest(location), True)
