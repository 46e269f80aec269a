"""Capturing transports for ``httpx2`` (see ``docs/integrations.md``).

Thin shells over the shared core in ``transport.py``: ``httpx`` and ``httpx2`` have distinct
base classes, and a transport must subclass its own library's, so each library gets its own
few typed classes rather than classes made at run time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx2

from tracelock.integrations.http.exchange import Options
from tracelock.integrations.http.live import AsyncLiveStream, LiveStream
from tracelock.integrations.http.transport import (
    AsyncCore,
    AsyncRecordedStream,
    Capturing,
    RecordedStream,
    SyncCore,
)

__all__ = ["Httpx2Transport", "AsyncHttpx2Transport"]


class _Stream(RecordedStream, httpx2.SyncByteStream):
    pass


class _AsyncStream(AsyncRecordedStream, httpx2.AsyncByteStream):
    pass


class _LiveStream(LiveStream, httpx2.SyncByteStream):
    pass


class _AsyncLiveStream(AsyncLiveStream, httpx2.AsyncByteStream):
    pass


class Httpx2Transport(httpx2.BaseTransport, Capturing):
    """Wraps ``wrapped`` (by default a new ``httpx2.HTTPTransport()``): inside a run, every
    request is a step of the run; outside one, requests are refused
    (``CaptureOutsideRunError``) unless ``pass_through``. ``secret_headers`` are
    marked like ``Authorization``; ``ignore_headers`` are left out like ``user-agent``."""

    def __init__(
        self,
        wrapped: httpx2.BaseTransport | None = None,
        *,
        pass_through: bool = False,
        secret_headers: Iterable[str] = (),
        ignore_headers: Iterable[str] = (),
    ) -> None:
        options = Options(pass_through=pass_through, secret_headers=secret_headers, ignore_headers=ignore_headers)
        self.wrapped = wrapped if wrapped is not None else httpx2.HTTPTransport()
        self._core = SyncCore(httpx2, self.wrapped, options, _Stream, _LiveStream)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = self._core.send(request)
        return response

    def close(self) -> None:
        self.wrapped.close()


class AsyncHttpx2Transport(httpx2.AsyncBaseTransport, Capturing):
    """The async form of :class:`Httpx2Transport`."""

    def __init__(
        self,
        wrapped: httpx2.AsyncBaseTransport | None = None,
        *,
        pass_through: bool = False,
        secret_headers: Iterable[str] = (),
        ignore_headers: Iterable[str] = (),
    ) -> None:
        options = Options(pass_through=pass_through, secret_headers=secret_headers, ignore_headers=ignore_headers)
        self.wrapped = wrapped if wrapped is not None else httpx2.AsyncHTTPTransport()
        self._core = AsyncCore(httpx2, self.wrapped, options, _AsyncStream, _AsyncLiveStream)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = await self._core.send(request)
        return response

    async def aclose(self) -> None:
        await self.wrapped.aclose()


def wrap(client: Any, transport: Any, options: dict[str, Any]) -> Any:
    """A capturing transport around ``transport``, of ``client``'s kind (sync or async: a
    mock transport is both)."""
    if isinstance(client, httpx2.AsyncClient):
        return AsyncHttpx2Transport(transport, **options)
    return Httpx2Transport(transport, **options)
