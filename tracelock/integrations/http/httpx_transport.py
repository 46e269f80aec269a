"""Capturing transports for ``httpx`` (see ``docs/integrations.md``).

Thin shells over the shared core in ``transport.py``: ``httpx`` and ``httpx2`` have distinct
base classes, and a transport must subclass its own library's, so each library gets its own
few typed classes rather than classes made at run time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx

from tracelock.integrations.http.exchange import Options
from tracelock.integrations.http.live import AsyncLiveStream, LiveStream
from tracelock.integrations.http.transport import (
    AsyncCore,
    AsyncRecordedStream,
    Capturing,
    RecordedStream,
    SyncCore,
)

__all__ = ["HttpxTransport", "AsyncHttpxTransport"]


class _Stream(RecordedStream, httpx.SyncByteStream):
    pass


class _AsyncStream(AsyncRecordedStream, httpx.AsyncByteStream):
    pass


class _LiveStream(LiveStream, httpx.SyncByteStream):
    pass


class _AsyncLiveStream(AsyncLiveStream, httpx.AsyncByteStream):
    pass


class HttpxTransport(httpx.BaseTransport, Capturing):
    """Wraps ``wrapped`` (by default a new ``httpx.HTTPTransport()``): inside a run, every
    request is a step of the run; outside one, requests are refused
    (``CaptureOutsideRunError``) unless ``pass_through``. ``secret_headers`` are
    marked like ``Authorization``; ``ignore_headers`` are left out like ``user-agent``."""

    def __init__(
        self,
        wrapped: httpx.BaseTransport | None = None,
        *,
        pass_through: bool = False,
        secret_headers: Iterable[str] = (),
        ignore_headers: Iterable[str] = (),
    ) -> None:
        options = Options(pass_through=pass_through, secret_headers=secret_headers, ignore_headers=ignore_headers)
        self.wrapped = wrapped if wrapped is not None else httpx.HTTPTransport()
        self._core = SyncCore(httpx, self.wrapped, options, _Stream, _LiveStream)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = self._core.send(request)
        return response

    def close(self) -> None:
        self.wrapped.close()


class AsyncHttpxTransport(httpx.AsyncBaseTransport, Capturing):
    """The async form of :class:`HttpxTransport`."""

    def __init__(
        self,
        wrapped: httpx.AsyncBaseTransport | None = None,
        *,
        pass_through: bool = False,
        secret_headers: Iterable[str] = (),
        ignore_headers: Iterable[str] = (),
    ) -> None:
        options = Options(pass_through=pass_through, secret_headers=secret_headers, ignore_headers=ignore_headers)
        self.wrapped = wrapped if wrapped is not None else httpx.AsyncHTTPTransport()
        self._core = AsyncCore(httpx, self.wrapped, options, _AsyncStream, _AsyncLiveStream)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self._core.send(request)
        return response

    async def aclose(self) -> None:
        await self.wrapped.aclose()


def wrap(client: Any, transport: Any, options: dict[str, Any]) -> Any:
    """A capturing transport around ``transport``, of ``client``'s kind (sync or async: a
    mock transport is both)."""
    if isinstance(client, httpx.AsyncClient):
        return AsyncHttpxTransport(transport, **options)
    return HttpxTransport(transport, **options)
