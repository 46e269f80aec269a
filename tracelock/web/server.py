"""Serving the UI with uvicorn on a socket bound first (so that port 0 works and the printed
URL names the real port), in the foreground (``tracelock ui``) or on a thread (tests,
the benchmark)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import uvicorn
from starlette.applications import Starlette

from tracelock.evidence.verify import PinnedKey
from tracelock.web.app import UiConfig, create_app
from tracelock.web.security import Guard, loopback_hosts
from tracelock.web.source import StoreSource

__all__ = ["LOOPBACK", "Bound", "UiThread", "bind", "build", "is_loopback"]

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


@dataclass
class Bound:
    """A listening socket and the app that will answer on it."""

    sock: socket.socket
    host: str
    port: int
    app: Starlette
    token: str

    @property
    def base_url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    @property
    def start_url(self) -> str:
        """The URL to open: it carries the token, which the UI moves into a cookie."""
        return f"{self.base_url}/?token={self.token}"


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, reuse_port=False)


def build(
    store: str | os.PathLike[str], token: str, *, host: str = LOOPBACK, port: int = 0, pins: Sequence[PinnedKey] = ()
) -> Bound:
    """Bind ``host``:``port`` and build the app for the store, answering that host only."""
    sock = bind(host, port)
    actual = int(sock.getsockname()[1])
    guard = Guard.create(token, loopback_hosts(host, actual))
    app = create_app(UiConfig(StoreSource(store), guard, pins))
    return Bound(sock=sock, host=host, port=actual, app=app, token=token)


def _config(app: Starlette, *, quiet: bool) -> uvicorn.Config:
    return uvicorn.Config(app, log_level="warning" if quiet else "info", access_log=not quiet, lifespan="off", server_header=False)


def serve(bound: Bound, *, quiet: bool = False) -> None:
    """Serve in the foreground until interrupted."""
    server = uvicorn.Server(_config(bound.app, quiet=quiet))
    server.run(sockets=[bound.sock])


class UiThread:
    """The UI served on a background thread (``with UiThread(bound) as ui: ...``)."""

    def __init__(self, bound: Bound) -> None:
        self.bound = bound
        self._server = uvicorn.Server(_config(bound.app, quiet=True))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [bound.sock]}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        started = threading.Event()
        while not self._server.started and self._thread.is_alive():
            started.wait(0.01)
        if not self._server.started:
            raise RuntimeError("the UI server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self.bound.sock.close()
