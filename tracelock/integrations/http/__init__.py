"""HTTP capture at the transport (``docs/integrations.md``).

``capture(client)`` wraps an ``httpx2`` or ``httpx`` client's transports in place (sync or
async) and returns it; ``CaptureTransport`` wraps one transport, for either library, sync
and async (``Httpx2Transport``, ``AsyncHttpx2Transport``, ``HttpxTransport`` and
``AsyncHttpxTransport`` are names of the same class). The client library is imported when
one of these is used.
"""

from __future__ import annotations

from typing import Any

from tracelock.integrations.http.errors import CaptureOutsideRunError, CaptureStreamOpenError

__all__ = [
    "AsyncHttpx2Transport",
    "AsyncHttpxTransport",
    "CaptureOutsideRunError",
    "CaptureStreamOpenError",
    "CaptureTransport",
    "Httpx2Transport",
    "HttpxTransport",
    "capture",
]

#: The capturing transport's names: one class serves both libraries, sync and async.
_TRANSPORT_NAMES = frozenset(
    {"CaptureTransport", "Httpx2Transport", "AsyncHttpx2Transport", "HttpxTransport", "AsyncHttpxTransport"}
)


def capture(client: Any, **options: Any) -> Any:
    """Wrap every transport of ``client`` (an ``httpx2``/``httpx`` ``Client`` or
    ``AsyncClient``, e.g. ``openai.DefaultHttpx2Client()``) in a capturing one, keeping the
    client's own transports (and so the SDK's defaults) underneath; returns the client.
    ``options`` are the transport's (``pass_through``, ``secret_headers``,
    ``ignore_headers``)."""
    from tracelock.integrations.http.wrap import wrap_client

    return wrap_client(client, **options)


def __getattr__(name: str) -> Any:
    if name not in _TRANSPORT_NAMES:
        raise AttributeError(name)
    from tracelock.integrations.http.transport import CaptureTransport

    return CaptureTransport
