"""HTTP capture at the transport (``docs/integrations.md``).

``capture(client)`` wraps an ``httpx2`` or ``httpx`` client's transports in place (sync or
async) and returns it; ``Httpx2Transport``/``AsyncHttpx2Transport`` (and the ``httpx``
pair) wrap one transport. The client library is imported when one of these is used.
"""

from __future__ import annotations

from typing import Any

from tracelock.integrations.http.errors import CaptureOutsideRunError, CaptureStreamOpenError

__all__ = [
    "AsyncHttpx2Transport",
    "AsyncHttpxTransport",
    "CaptureOutsideRunError",
    "CaptureStreamOpenError",
    "Httpx2Transport",
    "HttpxTransport",
    "capture",
]

_LAZY = {
    "Httpx2Transport": "tracelock.integrations.http.httpx2_transport",
    "AsyncHttpx2Transport": "tracelock.integrations.http.httpx2_transport",
    "HttpxTransport": "tracelock.integrations.http.httpx_transport",
    "AsyncHttpxTransport": "tracelock.integrations.http.httpx_transport",
}


def capture(client: Any, **options: Any) -> Any:
    """Wrap every transport of ``client`` (an ``httpx2``/``httpx`` ``Client`` or
    ``AsyncClient``, e.g. ``openai.DefaultHttpx2Client()``) in a capturing one, keeping the
    client's own transports (and so the SDK's defaults) underneath; returns the client.
    ``options`` are the transport's (``pass_through``, ``secret_headers``,
    ``ignore_headers``)."""
    from tracelock.integrations.http.wrap import wrap_client

    return wrap_client(client, **options)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
