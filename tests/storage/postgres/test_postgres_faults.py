"""Faults on a PostgreSQL store, with real processes and a real server (``fsync`` on):
``kill -9`` of a writer, of a runtime in the middle of an irreversible effect, and the
server stopped with ``pg_ctl stop -m immediate`` and restarted under a writer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tests.pg_server import Cluster, admin, own_pg_cluster  # noqa: F401  (a fixture)
from tests.storage.postgres._pg_checks import check_journal, waiting_on_lock
from tracelock.cli.main import cli
from tracelock.storage.errors import StoreConnectionError
from tracelock.storage.postgres import PostgresStore

REPO = Path(__file__).resolve().parents[3]


def start(script: str, *args: object) -> subprocess.Popen[str]:
    """``script`` under tests/storage, run as a module of the tests package."""
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.storage.postgres.{script.removesuffix('.py')}", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )


def read_until(child: subprocess.Popen[str], done: object, lines: list[str]) -> None:
    """Read the child's lines into ``lines`` until ``done(lines)`` holds (or it exits)."""
    assert child.stdout is not None
    while not done(lines):  # type: ignore[operator]
        line = child.stdout.readline()
        if not line:
            _, err = child.communicate()
            raise AssertionError(f"the child exited ({child.returncode}) early: {err[-3000:]}")
        lines.append(line.strip())


def acknowledged(lines: list[str]) -> dict[int, str]:
    return {int(seq): digest for tag, seq, digest in (line.split() for line in lines if line.startswith("ACK "))}


def test_kill_9_of_a_writer_loses_no_acknowledged_entry(pg_url: str) -> None:
    child = start("_pg_acked_writer.py", pg_url, "kill", 4)
    lines: list[str] = []
    read_until(child, lambda got: len(got) >= 300, lines)
    os.kill(child.pid, signal.SIGKILL)
    rest, _ = child.communicate()
    lines += [line.strip() for line in rest.splitlines() if line.strip()]
    acks = acknowledged(lines)
    assert len(acks) >= 300
    with PostgresStore(pg_url) as store:
        size = store.size()
        entries = check_journal(store, size)
        for seq, digest in acks.items():
            assert entries[seq].hash == digest
        # The next writer continues the journal and each killed writer's run.
        after = store.append("k0", "effect", payload={"after": "the kill"})
        assert after.seq == size
        assert after.i == store.run_info("k0").entries - 1
        check_journal(store, size + 1)


def test_kill_9_during_an_irreversible_effect_then_recover_blocks_it(pg_url: str, tmp_path: Path) -> None:
    child = start("_pg_runtime_writer.py", pg_url, tmp_path, 3)
    lines: list[str] = []
    read_until(child, lambda got: len(got) >= 3, lines)
    while not (tmp_path / "held").exists():
        if child.poll() is not None:
            raise AssertionError(f"the runtime exited early: {child.communicate()[1][-3000:]}")
        psycopg.connect(pg_url).close()  # a short pause that does some real work
    os.kill(child.pid, signal.SIGKILL)
    child.communicate()
    done = [line.split()[1] for line in lines if line.startswith("DONE ")]
    assert len(done) == 3
    assert (tmp_path / "paid").read_text().split() == ["0", "1", "2", "99"]
    with PostgresStore(pg_url) as store:
        check_journal(store, store.size())
        assert {store.run_info(run).status for run in done} == {"completed"}
        held = [info.run for info in store.runs() if info.status == "running"]
        assert len(held) == 1
    recovered = CliRunner().invoke(cli, ["recover", "--store", pg_url, "--json"], catch_exceptions=False)
    assert recovered.exit_code == 0, recovered.output
    rows = json.loads(recovered.stdout)["runs"]
    assert [(row["run"], row["from"], row["to"]) for row in rows] == [(held[0], "running", "blocked")]
    # Never repeated: the effect ran once for the killed run, and nobody ran it again.
    assert (tmp_path / "paid").read_text().split() == ["0", "1", "2", "99"]
    with PostgresStore(pg_url, read_only=True) as store:
        assert store.run_info(held[0]).status == "blocked"
        check_journal(store, store.size())


def test_a_server_crash_fails_the_in_doubt_commit_loudly_and_a_new_handle_goes_on(
    own_pg_cluster: Cluster,  # noqa: F811
) -> None:
    cluster = own_pg_cluster
    admin(cluster, "CREATE DATABASE restart")
    url = cluster.url("restart")
    child = start("_pg_acked_writer.py", url, "restart", 20)
    lines: list[str] = []
    read_until(child, lambda got: len(got) >= 100, lines)
    # Hold the writers' lock so that the writer's next commit is in flight, then crash.
    blocker = psycopg.connect(url)
    blocker.execute("SELECT next_seq FROM tracelock_head WHERE id = 1 FOR UPDATE")
    waiting_on_lock(url)
    cluster.crash()
    blocker.close()
    read_until(child, lambda got: any(line.startswith("OLD ") for line in got), lines)
    # The commit in flight is reported as in doubt (a lost connection, a durability
    # error), and the handle refuses to go on.
    assert "ERROR STORE_CONNECTION_LOST" in lines
    assert "OLD STORE_CLOSED" in lines
    before = acknowledged(lines)
    cluster.restart()
    read_until(child, lambda got: "DONE" in got, lines)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    acks = acknowledged(lines)
    assert len(acks) == len(before) + 20
    with PostgresStore(url, read_only=True) as store:
        # Exactly what was acknowledged: the in-doubt append was never committed (it was
        # waiting for the lock) and never retried.
        entries = check_journal(store, len(acks))
        for seq, digest in acks.items():
            assert entries[seq].hash == digest
        assert store.run_info("r").entries == len(before)
        assert store.run_info("s").entries == 20


def test_a_handle_reconnects_after_a_restart_that_caught_no_commit(
    own_pg_cluster: Cluster,  # noqa: F811
) -> None:
    cluster = own_pg_cluster
    admin(cluster, "CREATE DATABASE idle")
    url = cluster.url("idle")
    with PostgresStore(url, pool_size=2) as store:
        first = store.append("r", "run.start")
        cluster.crash()
        cluster.restart()
        # The pooled connections died with the server; nothing was in doubt, so the next
        # append and read go on over fresh connections.
        second = store.append("r", "effect", payload={"after": "restart"})
        assert (second.seq, second.i, second.prev) == (1, 1, first.hash)
        assert store.entries("r") == [first, second]
        cluster.crash()
        with pytest.raises(StoreConnectionError) as raised:
            PostgresStore(url, connect_timeout=1)
        assert raised.value.code == "STORE_CONNECTION_FAILED"
        cluster.restart()
        assert check_journal(store, 2) == [first, second]


def test_a_one_round_trip_append_after_a_restart_goes_on_over_a_fresh_connection(
    own_pg_cluster: Cluster,  # noqa: F811
) -> None:
    cluster = own_pg_cluster
    admin(cluster, "CREATE DATABASE quick")
    url = cluster.url("quick")
    with PostgresStore(url, pool_size=1) as store:
        written = [store.append("r", "run.start", new_run=True)]
        written += [store.append("r", "effect", payload={"n": n}) for n in range(2)]
        assert "r" in store._heads  # the next append is one call of the append function, which commits
        cluster.crash()
        cluster.restart()
        # The pooled connection was closed by the server before anything was sent on it: the
        # handle sees it without a round trip and retries on a fresh one, nothing in doubt.
        written.append(store.append("r", "effect", payload={"after": "restart"}))
        assert [entry.seq for entry in written] == [0, 1, 2, 3]
        assert check_journal(store, 4) == written
