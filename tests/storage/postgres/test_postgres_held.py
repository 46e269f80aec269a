"""Held entries on PostgreSQL (``Store.append_held``): the entries of effects that cannot
change the world wait in the process and are committed by the handle's next append, in
call order and with the timestamps they got when held; a real server throughout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tests.pg_server import Cluster, admin
from tests.storage.postgres import _pg_payer
from tests.storage.postgres._pg_checks import check_journal
from tests.storage.postgres.test_postgres_faults import read_until, start
from tests.storage.storage_helpers import TickClock
from tracelock import Runtime
from tracelock.cli.main import cli
from tracelock.storage.backend import NewEntry, Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import StoreError
from tracelock.storage.postgres import PostgresStore
from tracelock.storage.postgres.store import HOLD_WINDOW_MS


def test_held_entries_commit_with_the_next_append_in_call_order(pg_url: str, tmp_path: Path) -> None:
    stores: list[Store] = [PostgresStore(pg_url, clock=TickClock()), DirectoryStore(tmp_path / "d", clock=TickClock())]
    try:
        for store in stores:
            held = [
                store.append_held("r", "run.start", payload={"input": 1}, meta={"agent": "a", "status": "running"}, new_run=True),
                store.append_held("r", "effect", payload={"step": 0}),
                store.append_held("q", "run.start", new_run=True),
            ]
            if isinstance(store, PostgresStore):
                # Nothing committed yet: readers (and other processes) see nothing.
                assert store.size() == 0
                assert store.transactions == 0
            intent = store.append("r", "effect.intent", payload={"step": 1})
            assert [entry.ts for entry in store.entries("r")] == [*held[:2], intent.ts]
            assert intent.seq == 3
            assert store.entries("q")[0].ts == held[2]
        pg, directory = stores
        assert isinstance(pg, PostgresStore)
        assert pg.transactions == 1  # the three held entries rode on the intent's commit
        assert [e.line for e in pg.iter_entries()] == [e.line for e in directory.iter_entries()]
    finally:
        for store in stores:
            store.close()


def test_a_held_entry_waits_no_longer_than_the_window(pg_url: str) -> None:
    clock = TickClock()
    with PostgresStore(pg_url, clock=clock) as store:
        store.append_held("r", "run.start", new_run=True)
        clock.now += HOLD_WINDOW_MS - 1  # the next reading is exactly the window later
        store.append_held("r", "effect", payload={"n": 1})
        assert store.size() == 0
        clock.now += HOLD_WINDOW_MS  # the oldest held entry is now older than the window
        store.append_held("r", "effect", payload={"n": 2})
        assert store.size() == 3
        assert store.transactions == 1
        check_journal(store, 3)


def test_sync_and_close_commit_what_is_held(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=TickClock()) as store:
        store.append_held("r", "run.start", new_run=True)
        store.sync()
        assert store.size() == 1
        store.sync()  # nothing held: no transaction
        assert store.transactions == 1
        store.append_held("r", "effect", payload={"n": 1})
    with PostgresStore(pg_url, read_only=True) as store:
        assert [entry.kind for entry in store.entries("r")] == ["run.start", "effect"]
        check_journal(store, 2)


def test_a_coroutines_append_carries_what_is_held(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=TickClock()) as store:
        store.append_held("r", "run.start", new_run=True)

        async def main() -> list[int]:
            entries = await store.append_many_async([NewEntry("r", "effect"), NewEntry("r", "run.end")])
            return [entry.seq for entry in entries]

        assert asyncio.run(main()) == [1, 2]
        assert [entry.kind for entry in store.entries("r")] == ["run.start", "effect", "run.end"]


def test_a_held_entry_that_fails_fails_the_next_append_of_its_own_run(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=TickClock()) as store:
        store.append("done", "run.start", new_run=True)
        store.append("done", "run.end")
        store.append_held("done", "effect")  # the run has ended: refused when committed
        # Another run's append carries it into its commit, and is not failed by it (in a
        # worker running several runs, one run's error is not another's)...
        other = store.append("other", "run.start", new_run=True)
        assert other.seq == 2
        # ...the next append of the run it belongs to is, before anything of it is queued.
        with pytest.raises(StoreError, match="has ended"):
            store.append_held("done", "effect")
        store.append_held("done", "effect")  # raised once: this one is refused in its turn
        store.sync()
        with pytest.raises(StoreError, match="has ended"):
            store.append("done", "note")
        store.append_held("done", "effect")
        store.append("other", "effect")

        async def main() -> None:
            await store.append_async("done", "note")

        with pytest.raises(StoreError, match="has ended"):
            asyncio.run(main())
        assert [entry.kind for entry in store.entries("done")] == ["run.start", "run.end"]
        check_journal(store, 4)


def test_a_run_with_an_irreversible_effect_waits_for_two_of_its_three_commits(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg_payer, "WORKDIR", [tmp_path])
    store = PostgresStore(pg_url)
    runtime = Runtime(store, _pg_payer.POLICY, toolkits=(_pg_payer.kit,))
    try:
        runtime.run(_pg_payer.agent, {"key": "k", "amount": 0})  # registers the policy and provenance
        before, waits = store.transactions, store.flush_waits
        for number in range(1, 6):
            assert runtime.run(_pg_payer.agent, {"key": f"k{number}", "amount": number}).ok
        # (start, read-only lookup, intent), the irreversible result, the end; the result's
        # commit does not wait for its flush (the end's brings it).
        assert store.transactions - before == 15
        assert store.flush_waits - waits == 10
        check_journal(store, store.size())
    finally:
        runtime.close()
        store.close()


def test_kill_9_while_entries_are_held_loses_only_them(pg_url: str, tmp_path: Path) -> None:
    child = start("_pg_runtime_writer.py", pg_url, tmp_path, 3, "lookup")
    lines: list[str] = []
    read_until(child, lambda got: len(got) >= 3, lines)
    while not (tmp_path / "looking").exists():
        if child.poll() is not None:
            raise AssertionError(f"the runtime exited early: {child.communicate()[1][-3000:]}")
    os.kill(child.pid, signal.SIGKILL)
    child.communicate()
    done = [line.split()[1] for line in lines if line.startswith("DONE ")]
    with PostgresStore(pg_url) as store:
        check_journal(store, store.size())
        # The killed run's start waited in the process for its first commit: it was never
        # acknowledged, and nothing of the run reached the store.
        assert sorted(info.run for info in store.runs()) == sorted(done)
        assert {store.run_info(run).status for run in done} == {"completed"}
    recovered = CliRunner().invoke(cli, ["recover", "--store", pg_url, "--json"], catch_exceptions=False)
    assert recovered.exit_code == 0, recovered.output
    assert json.loads(recovered.stdout)["runs"] == []
    assert (tmp_path / "paid").read_text().split() == ["0", "1", "2"]


def _server_counts(url: str) -> tuple[dict[str, int], dict[str, int]]:
    """The calls of each append function and the whole-table scans of each store table, as
    the server's statistics count them (each session's counts reach them when it ends)."""
    with psycopg.connect(url, autocommit=True) as conn:
        # A closed handle's server session reports its counts as it exits, which can come a
        # moment after the client has closed: wait until this is the database's only session.
        for _ in range(400):
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            if others is not None and others[0] == 0:
                break
            time.sleep(0.025)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        calls = conn.execute(
            "SELECT funcname, sum(calls) FROM pg_stat_user_functions GROUP BY funcname"
        ).fetchall()
        scans = conn.execute(
            "SELECT relname, seq_scan FROM pg_stat_user_tables WHERE relname LIKE 'tracelock%'"
        ).fetchall()
    return {str(name): int(count) for name, count in calls}, {str(name): int(count) for name, count in scans}


def _grown(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: count - before.get(name, 0) for name, count in after.items() if count != before.get(name, 0)}


def test_each_commit_is_one_call_that_reads_no_whole_table(pg_cluster: Cluster, pg_database: str) -> None:
    """A run's held start and first effect commit with its intent in one call of an append
    procedure (which runs an append function), as do its result and its end, however many
    runs the store holds and however
    many handles append: a handle alone numbers the entries itself (after its first two
    commits, which learn that it is alone), handles that take turns have the server number
    them. No append scans a table (version 3 of the function joined its run rows to a scan
    of ``tracelock_runs``, whose cost grew with the store)."""
    admin(pg_cluster, f"ALTER DATABASE {pg_database} SET track_functions = 'pl'")
    url = pg_cluster.url(pg_database)

    def steps(store: PostgresStore, number: int) -> Iterator[None]:
        run = f"run-{number}"
        store.append_held(run, "run.start", payload={"n": number}, meta={"status": "running"}, new_run=True)
        store.append_held(run, "effect", payload={"llm": number})
        store.append(run, "effect.intent", payload={"send": number})
        yield
        store.append(run, "effect.result", payload={"sent": number})
        yield
        store.append(run, "run.end", payload={"output": number}, meta={"status": "completed"})
        yield

    def record_run(store: PostgresStore, number: int) -> None:
        for _ in steps(store, number):
            pass

    def alone(first: int, count: int) -> int:
        with PostgresStore(url, clock=TickClock()) as store:
            for number in range(first, first + count):
                record_run(store, number)
            # What the handle keeps between commits does not grow with the runs it ended.
            assert store._heads == {}
            return store.transactions

    def taking_turns(first: int, count: int) -> int:
        """Two handles, each committing between two commits of the other."""
        with PostgresStore(url, clock=TickClock()) as one, PostgresStore(url, clock=TickClock()) as two:
            for number in range(first, first + count, 2):
                for _ in zip(steps(one, number), steps(two, number + 1), strict=True):
                    pass
            return one.transactions + two.transactions

    alone(0, 200)  # enough rows that a scan is the plan a join would get
    calls, scans = _server_counts(url)
    transactions = alone(200, 100)
    calls_alone, _ = _server_counts(url)
    assert transactions == 300
    assert _grown(calls_alone, calls) == {
        "tracelock_append_commit": 298, "tracelock_append": 298,
        "tracelock_append_entries_commit": 2, "tracelock_append_entries": 2,
    }
    transactions = taking_turns(300, 100)
    calls_turns, scans_turns = _server_counts(url)
    assert _grown(calls_turns, calls_alone) == {
        "tracelock_append_entries_commit": transactions, "tracelock_append_entries": transactions,
    }
    assert _grown(scans_turns, scans) == {}
    with PostgresStore(url, read_only=True) as store:
        check_journal(store, 2000)
