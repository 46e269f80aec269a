"""The lifecycle the example servers share: an HTTP server on ``127.0.0.1`` in a daemon
thread, while entered (or between :meth:`LoopbackServer.start` and :meth:`~LoopbackServer.stop`).

Each server (``llm_server``, ``react_server``) gives its request handler class and answers
requests; its handler reaches the server object as ``self.server.owner``.
"""

from __future__ import annotations

import http.server
import threading
from typing import Any, ClassVar, Self

__all__ = ["LoopbackServer", "OwnedHTTPServer"]


class OwnedHTTPServer(http.server.ThreadingHTTPServer):
    """A threading HTTP server that knows the :class:`LoopbackServer` it serves."""

    owner: Any
    daemon_threads = True


class LoopbackServer:
    """Serves :attr:`handler` on ``127.0.0.1`` (port ``port``, or a free one)."""

    handler: ClassVar[type[http.server.BaseHTTPRequestHandler]]
    thread_name: ClassVar[str] = "loopback-server"

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self._server: OwnedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        server = OwnedHTTPServer(("127.0.0.1", self._port), self.handler)
        server.owner = self
        self._server = server
        self._port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
