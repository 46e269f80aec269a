"""How the store connects: the libpq settings it adds to a location (TCP keepalives, a
user timeout, a connect timeout), the writer's statement timeout, and the watch that cuts a
writer's connection whose server stopped answering (``docs/storage-postgres.md``,
"When the server goes away").

A server that crashes closes its sockets, and the client learns at once. A server that is
gone without closing them (a network that drops everything, a host that froze, a server
process that is paused) leaves the client waiting for an answer that never comes: TCP
keepalives and ``tcp_user_timeout`` find a dead peer within seconds instead of the kernel's
two hours (or fifteen minutes of retransmissions); a server alive but stuck cancels the
writer's statement at ``statement_timeout``; and a peer whose kernel still answers (a paused
process on a live host) is found by :class:`CommitWatch`, which gives a writer's statement a
deadline of its own.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tracelock.storage.errors import StoreConnectionError

__all__ = [
    "LIBPQ_DEFAULTS",
    "STATEMENT_TIMEOUT_PARAMETER",
    "CommitWatch",
    "Settings",
    "connection_settings",
]

#: libpq parameters the store adds to a location that does not set them (the location's own
#: values win). A dead peer is found within about 10 s: an idle connection is probed after
#: 5 s, every 2 s; data unacknowledged for 10 s (``tcp_user_timeout``, ms) ends the
#: connection. libpq applies them to TCP connections only (a Unix socket has no network).
LIBPQ_DEFAULTS: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}

#: The location's parameter (seconds) for the writer's statement timeout: read and removed
#: by the store (libpq would refuse it).
STATEMENT_TIMEOUT_PARAMETER = "tracelock_statement_timeout"

#: How much longer than the statement timeout the handle waits for an answer before it
#: takes the server for gone: the server's own cancellation (which rolls back) comes first.
WATCH_GRACE_S = 2.0


@dataclass(frozen=True)
class Settings:
    """``url``: the location as given to libpq (the store's parameters removed, the
    defaults added); ``statement_timeout``: seconds, 0 for none."""

    url: str
    statement_timeout: float

    @property
    def watch_limit(self) -> float:
        """Seconds a writer's statement may go unanswered (0: no limit)."""
        return self.statement_timeout + WATCH_GRACE_S if self.statement_timeout > 0 else 0.0


def _split(location: str) -> tuple[str, list[str]]:
    base, _, query = location.partition("?")
    return base, [item for item in query.split("&") if item] if query else []


def connection_settings(location: str, *, connect_timeout: float, statement_timeout: float) -> Settings:
    """The settings of a store opened at ``location`` (a ``postgresql://`` URL).

    ``connect_timeout`` (seconds, at least 1 as libpq counts) and :data:`LIBPQ_DEFAULTS`
    are added unless the location sets them; ``tracelock_statement_timeout`` in the
    location replaces ``statement_timeout``. Raises ``STORE_CONNECTION_FAILED`` for a
    value that is not a number of seconds.
    """
    base, items = _split(location)
    kept: list[str] = []
    given: set[str] = set()
    for item in items:
        key, _, value = item.partition("=")
        name = unquote(key)
        if name == STATEMENT_TIMEOUT_PARAMETER:
            statement_timeout = _seconds(unquote(value))
            continue
        given.add(name)
        kept.append(item)
    added = {"connect_timeout": str(max(1, round(connect_timeout))), **LIBPQ_DEFAULTS}
    kept += [f"{name}={value}" for name, value in added.items() if name not in given]
    return Settings(f"{base}?{'&'.join(kept)}" if kept else base, statement_timeout)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise StoreConnectionError(
            f"{STATEMENT_TIMEOUT_PARAMETER} must be a number of seconds (0 for none), not {text!r}",
            details={"parameter": STATEMENT_TIMEOUT_PARAMETER},
        )
    return value


def _monotonic() -> float:
    return time.monotonic()  # tracelock: allow TL-CLOCK-001 -- a deadline for a server's answer; decides nothing recorded


def _cut(conn: Any) -> None:
    """Shut the connection's socket down (both ways) from another thread: the libpq call
    waiting on it wakes up and fails with a lost connection. The socket stays open (the
    owner closes it), so its descriptor is never reused under the waiting call."""
    with suppress(Exception):  # a connection already closed: nothing to cut
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))  # tracelock: allow TL-NET-001 -- the store's own connection, shut down; nothing is sent
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


class CommitWatch:
    """A deadline for a writer's statements: a connection whose statement (under
    :meth:`watching`) is not answered within ``limit`` seconds is cut (:func:`_cut`), so
    that the writer fails with a lost connection instead of waiting for ever.

    One thread per watch, started by the first watched statement; it sleeps until the
    deadline of the statement under way and costs the writer two attribute writes per
    statement. ``limit`` 0: nothing is watched.
    """

    def __init__(self, limit: float, *, name: str = "tracelock-pg-watch") -> None:
        self.limit = limit
        self._name = name
        #: (connection, start) of the statement under way, replaced whole (one store).
        self._current: tuple[Any, float] | None = None
        self._cut: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @contextmanager
    def watching(self, conn: Any) -> Iterator[None]:
        """Watch ``conn`` for the block (one block at a time: the commit leader's)."""
        if self.limit <= 0:
            yield
            return
        if self._thread is None:
            self._start()
        self._current = (conn, _monotonic())
        try:
            yield
        finally:
            self._current = None

    def was_cut(self, conn: Any) -> bool:
        """Whether the watch cut ``conn`` (its statement went unanswered past the limit)."""
        return conn is not None and self._cut is conn

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                thread = threading.Thread(target=self._run, name=self._name, daemon=True)  # tracelock: allow TL-CONC-001 -- a deadline for the server's answer; decides nothing recorded
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        stop = self._stop
        while not stop.is_set():
            current = self._current
            if current is None:
                stop.wait(self.limit)
                continue
            conn, started = current
            left = started + self.limit - _monotonic()
            if left > 0:
                stop.wait(left)
                continue
            if self._current is current:
                self._cut = conn
                _cut(conn)
            while self._current is current and not stop.wait(0.05):
                pass  # until the writer has seen the failure

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
