"""No store-wide wait at commit on PostgreSQL: an append transaction lets the writers' lock
go once its commit record is written, and a durable append waits for the WAL flush after
that, so a commit held in its flush never holds back another run's append; a run waits
for the commits at its durability points only. A real server throughout.

A commit is held in its flush by the server itself: with ``synchronous_standby_names``
naming a standby that never connects, every commit that waits for durability waits for it
(``wait_event`` ``SyncRep``) until the setting is reset, while a commit that does not wait
(``synchronous_commit`` off for it) goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from bench import workload
from tests.pg_server import Cluster, admin, own_pg_cluster  # noqa: F401  (a fixture)
from tests.storage.postgres._pg_checks import check_journal
from tracelock import Runtime
from tracelock.storage.postgres import PostgresStore

#: How long a step that must not wait for the held commit may take before the test calls
#: it blocked (a bound on liveness, far above the milliseconds it takes).
BLOCKED_AFTER_S = 20.0


def _eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BLOCKED_AFTER_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BLOCKED_AFTER_S:g} s: {what}")
        time.sleep(0.02)


def _sync_rep_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone()
    assert row is not None
    return int(row[0])


class _Call:
    """A call run in a thread of its own: whether it returned, its value or error."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.returned = threading.Event()

        def target() -> None:
            try:
                self.value = call()
            except BaseException as exc:
                self.error = exc
            self.returned.set()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def result(self) -> Any:
        assert self.returned.wait(120), "the call never returned"
        if self.error is not None:
            raise self.error
        return self.value


@contextmanager
def _flushes_held(cluster: Cluster, url: str) -> Iterator[None]:
    """Every commit that waits for durability waits, until the block ends, for a
    synchronous standby that never comes. Active once a probe's commit is seen waiting."""
    admin(cluster, "ALTER SYSTEM SET synchronous_standby_names = 'tracelock_test_nobody'", "SELECT pg_reload_conf()")
    try:
        probe = _Call(lambda: admin(cluster, "SELECT pg_logical_emit_message(true, 'probe', '')"))
        _eventually(lambda: _sync_rep_waiters(url) >= 1, "a durable commit waits for the standby")
        yield
    finally:
        admin(cluster, "ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
    probe.result()


def test_a_commit_held_in_its_flush_does_not_block_another_runs_append(
    own_pg_cluster: Cluster,  # noqa: F811
) -> None:
    admin(own_pg_cluster, "CREATE DATABASE held")
    url = own_pg_cluster.url("held")
    # No statement timeout: the server would cancel the wait for the standby at it.
    with (
        PostgresStore(url, statement_timeout=0) as one,
        PostgresStore(url, statement_timeout=0) as two,
        psycopg.connect(url, autocommit=True) as reader,
    ):
        one.append("a", "run.start", payload={"n": 1}, meta={"status": "running"}, new_run=True)
        two.append("b", "run.start", payload={"n": 2}, meta={"status": "running"}, new_run=True)

        def committed(run: str) -> int:
            row = reader.execute("SELECT count(*) FROM tracelock_entries WHERE run = %s", (run,)).fetchone()
            assert row is not None
            return int(row[0])

        with _flushes_held(own_pg_cluster, url):
            # One handle's durable append, held in its commit (its flush).
            intent = _Call(lambda: one.append("a", "effect.intent", payload={"send": 1}))
            _eventually(lambda: _sync_rep_waiters(url) >= 2, "the durable append waits for its flush")
            assert not intent.returned.is_set()
            # Another run's append that needs no durability commits and returns meanwhile:
            # it never queues behind the held commit.
            result = _Call(lambda: two.append("b", "effect.result", payload={"sent": 2}, durable=False))
            assert result.returned.wait(BLOCKED_AFTER_S), "a non-durable append waited for another run's flush"
            assert result.result().i == 1
            # A durable one commits its entry too (readers see it) and waits only for its
            # own flush.
            end = _Call(lambda: two.append("b", "run.end", payload={"out": 2}, meta={"status": "completed"}))
            _eventually(lambda: committed("b") == 3, "another run's durable append commits its entry")
            assert not end.returned.is_set()  # its flush is held like the first one's
            assert not intent.returned.is_set()
        assert intent.result().i == 1
        assert end.result().i == 2
        assert one.flush_waits == 2 and two.flush_waits == 2  # the non-durable append waited for none
        check_journal(two, 5)


def test_a_readme_run_waits_for_two_commits(pg_url: str) -> None:
    """The README's run (an LLM call, a read-only tool, an irreversible tool): its start and
    first effects commit with the intent, which waits for its flush; the irreversible
    result commits without waiting; the end waits for its flush. Two waited commits."""
    store = PostgresStore(pg_url)
    runtime = Runtime(store, workload.POLICY, toolkits=(workload.kit,))
    try:
        assert runtime.run(workload.agent, workload.task(0)).ok  # registers the policy and provenance
        waits, transactions = store.flush_waits, store.transactions
        for number in range(1, 6):
            assert runtime.run(workload.agent, workload.task(number)).ok
        assert store.flush_waits - waits == 2 * 5
        assert store.transactions - transactions == 3 * 5
        check_journal(store, store.size())
    finally:
        runtime.close()
        store.close()
