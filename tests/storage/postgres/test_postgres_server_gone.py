"""A PostgreSQL server that goes away under a writer: the writer learns within seconds.

A paused server (every server process stopped with SIGSTOP, so its sockets stay open and
its kernel still answers: the case only a deadline of the client's finds) and a server
stopped with ``pg_ctl stop -m immediate``, real processes and a real server; the keepalive
and timeout settings on the store's sessions; the statement timeout of the writer's session
only. The bounds below are how long a test waits before it calls the writer hung (the
writer's settings make it fail well before): they are never asserted as performance.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.pg_server import Cluster, admin, own_pg_cluster, own_tcp_pg_cluster  # noqa: F401  (fixtures)
from tests.storage.postgres._pg_checks import check_journal, head_locked, waiting_on_lock
from tracelock.errors import TracelockError
from tracelock.storage.postgres import PostgresStore

REPO = Path(__file__).resolve().parents[3]
#: How long a test waits for a writer before it takes the writer for hung.
HUNG_S = 60.0


class Writer:
    """``tests/storage/postgres/_pg_gone_writer.py`` as a child process, its lines read by a thread."""

    def __init__(self, url: str, idle_after: int, after: int, connect_timeout: float = 10) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.postgres._pg_gone_writer", url, str(idle_after), str(after), str(connect_timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.strip())
        self._queue.put(None)

    def expect(self, done: Callable[[list[str]], bool], what: str) -> None:
        """Read lines until ``done(lines)``; fail if the writer exits first or says nothing
        that satisfies it within :data:`HUNG_S` (it hangs)."""
        deadline = time.monotonic() + HUNG_S
        while not done(self.lines):
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the writer hangs: no {what} within {HUNG_S:g} s; last lines {self.lines[-3:]}") from None
            if line is None:
                raise AssertionError(f"the writer exited ({self.process.wait()}) before {what}: {self.stderr()}")
            self.lines.append(line)

    def tell(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()[-3000:]

    def finish(self) -> None:
        assert self.process.wait(timeout=HUNG_S) == 0, self.stderr()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def acknowledged(self) -> dict[int, str]:
        return {int(seq): digest for tag, seq, digest in (line.split() for line in self.lines if line.startswith("ACK "))}

    def said(self, tag: str) -> str | None:
        return next((line for line in self.lines if line.split()[0] == tag), None)


def has(tag: str) -> Callable[[list[str]], bool]:
    return lambda lines: any(line.split()[0] == tag for line in lines)


def test_a_writer_learns_of_a_paused_server_and_loses_nothing_acknowledged(own_pg_cluster: Cluster) -> None:  # noqa: F811
    cluster = own_pg_cluster
    admin(cluster, "CREATE DATABASE paused")
    url = cluster.url("paused")  # the default settings: nothing in the location
    writer = Writer(url, idle_after=0, after=10)
    try:
        writer.expect(lambda lines: len(lines) >= 30, "30 appends")
        with cluster.paused():
            # The writer's commit gets no answer; without a deadline it would wait for ever.
            writer.expect(has("OLD"), "error")
        acked = writer.acknowledged()
        writer.tell()  # the server is back
        writer.expect(has("DONE"), "the end")
        writer.finish()
    finally:
        writer.kill()
    assert writer.said("ERROR") == "ERROR STORE_CONNECTION_LOST"
    assert writer.said("OLD") == "OLD STORE_CLOSED"
    assert writer.said("AGAIN") == "AGAIN STORE_CLOSED"
    with PostgresStore(url, read_only=True) as store:
        size = store.size()
        entries = check_journal(store, size)
        for seq, digest in writer.acknowledged().items():
            assert entries[seq].hash == digest
        # The append in doubt committed when the server went on, or it did not: one at most.
        assert store.run_info("r").entries - len(acked) in (0, 1)
        assert store.run_info("s").entries == 10
        assert size == len(writer.acknowledged()) + store.run_info("r").entries - len(acked)


def test_a_writer_with_its_server_stopped_learns_at_its_next_append(own_pg_cluster: Cluster) -> None:  # noqa: F811
    cluster = own_pg_cluster
    admin(cluster, "CREATE DATABASE stopped")
    url = cluster.url("stopped")
    # A long connect timeout, which a server that refuses connections must not cost.
    writer = Writer(url, idle_after=10, after=5, connect_timeout=HUNG_S * 2)
    try:
        writer.expect(has("IDLE"), "its first appends")
        cluster.crash()
        writer.tell()
        writer.expect(has("OLD"), "error")
        cluster.restart()
        writer.tell()
        writer.expect(has("DONE"), "the end")
        writer.finish()
    finally:
        writer.kill()
    # Nothing was sent that could commit: the append fails, and the handle goes on once
    # the server is back.
    assert writer.said("ERROR") == "ERROR STORE_CONNECTION_FAILED"
    assert writer.said("OLD") == "OLD STORE_CONNECTION_FAILED"
    assert writer.said("AGAIN") == "AGAIN ok"
    with PostgresStore(url, read_only=True) as store:
        entries = check_journal(store, 16)
        for seq, digest in writer.acknowledged().items():
            assert entries[seq].hash == digest
        assert store.run_info("r").entries == 11


def test_every_append_waiting_on_a_paused_server_fails_and_the_handle_is_done(own_pg_cluster: Cluster) -> None:  # noqa: F811
    cluster = own_pg_cluster
    admin(cluster, "CREATE DATABASE waiters")
    url = cluster.url("waiters") + "&tracelock_statement_timeout=1"
    store = PostgresStore(url)
    first = store.append("r", "run.start", new_run=True)
    errors: dict[int, str] = {}

    def append(number: int) -> None:
        try:
            store.append(f"w{number}", "effect", payload={"n": number}, new_run=True)
            errors[number] = "ok"
        except TracelockError as exc:
            errors[number] = exc.code

    calls = store.append_calls
    threads = [threading.Thread(target=append, args=(number,)) for number in range(6)]
    try:
        with cluster.paused():
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(HUNG_S)
            assert not any(thread.is_alive() for thread in threads), "appends hang on a paused server"
    finally:
        for thread in threads:
            if thread.ident is not None:
                thread.join()
    # One commit was sent and went unanswered; the others waited behind it in the handle.
    assert store.append_calls == calls + 6
    assert errors == dict.fromkeys(range(6), "STORE_CONNECTION_LOST")
    with pytest.raises(TracelockError) as refused:
        store.append("r", "effect")
    assert refused.value.code == "STORE_CLOSED"
    store.close()
    with PostgresStore(url, read_only=True) as fresh:
        entries = check_journal(fresh, fresh.size())
        assert entries[0] == first
        assert len(entries) <= 7


def test_the_writer_session_has_the_statement_timeout_and_long_waits_elsewhere_do_not(pg_url: str) -> None:
    url = pg_url + "&tracelock_statement_timeout=0.5"
    with PostgresStore(url, pool_size=1) as store:
        store.append("r", "run.start", new_run=True)
        size = store.size()
        # Reads, advisory lock waits and the queue's sessions keep the server's setting.
        assert store._one("SHOW statement_timeout") == ("0",)
        store._one("SELECT pg_sleep(1.5)")
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(7)")
            taken: list[object] = []
            waiter = threading.Thread(target=lambda: taken.append(store.hold_advisory_lock(7, shared=False)))
            waiter.start()
            waiting_on_lock(pg_url)
            other.execute("SELECT pg_sleep(1.5)")  # longer than the writer's timeout
            other.execute("SELECT pg_advisory_unlock(7)")
            waiter.join(HUNG_S)
        assert len(taken) == 1
        store.release_advisory_lock(taken[0])
        # An append stuck behind the writers' lock is cancelled by the server at 0.5 s, so
        # it is rolled back: the handle is done, and nothing of it is in the store.
        with head_locked(pg_url), pytest.raises(TracelockError) as lost:
            store.append("r", "effect", payload={"stuck": True})
        assert lost.value.code == "STORE_CONNECTION_LOST"
        assert "statement timeout" in lost.value.message
        assert lost.value.details["statement_timeout"] == 0.5
    with PostgresStore(pg_url, read_only=True) as store:
        assert store.size() == size
        check_journal(store, size)


def _socket_options(conn: psycopg.Connection[tuple[object, ...]] | object) -> tuple[int, ...]:
    fd = conn.pgconn.socket  # type: ignore[attr-defined]
    with socket.socket(fileno=os.dup(fd)) as view:
        return (
            view.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            view.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            view.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            view.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            view.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )


def test_the_store_sessions_carry_keepalives_and_the_location_wins(own_tcp_pg_cluster: Cluster) -> None:  # noqa: F811
    cluster = own_tcp_pg_cluster
    admin(cluster, "CREATE DATABASE tcp")
    url = cluster.tcp_url("tcp")
    with PostgresStore(url) as store:
        store.append("r", "run.start", new_run=True)
        assert _socket_options(store._writer) == (1, 5, 2, 3, 10000)
        with store._pool.connection() as pooled:
            assert _socket_options(pooled) == (1, 5, 2, 3, 10000)
        assert store._writer.execute("SHOW statement_timeout").fetchone() == ("5s",)
    given = url + "?keepalives_idle=7&tcp_user_timeout=3000&tracelock_statement_timeout=2.5"
    with PostgresStore(given) as store:
        store.append("r", "effect")
        assert _socket_options(store._writer) == (1, 7, 2, 3, 3000)
        assert store._writer.execute("SHOW statement_timeout").fetchone() == ("2500ms",)
        assert "tracelock_statement_timeout=2.5" in store.location


def test_a_statement_timeout_that_is_not_a_number_is_refused(pg_url: str) -> None:
    with pytest.raises(TracelockError) as refused:
        PostgresStore(pg_url + "&tracelock_statement_timeout=soon")
    assert refused.value.code == "STORE_CONNECTION_FAILED"
    assert "tracelock_statement_timeout" in refused.value.message
