"""``capture(client)``: wrap a client's transports in place.

Neither ``httpx`` 0.28 nor ``httpx2`` 2.x has a public way to read or replace the
transports of a client already built: ``transport=`` and ``mounts=`` are taken by the
constructor only, the attributes behind them (``_transport``, ``_mounts``) were made
private on purpose, and no mount API was added (encode/httpx#977, #1059). Event hooks
cannot stand in: a request hook cannot answer the request (replay sends nothing). So this
is the one place that reaches into a client; a client the caller builds takes a
:class:`CaptureTransport` through the public ``transport=``/``mounts=`` instead."""

from __future__ import annotations

from typing import Any

from tracelock.integrations.http.errors import CaptureClientError

__all__ = ["wrap_client"]

_LIBRARIES = frozenset({"httpx2", "httpx"})


def wrap_client(client: Any, **options: Any) -> Any:
    """Replace ``client``'s transport and its mounted ones by capturing transports around
    them, so that whatever the client was built with (an SDK's defaults, proxies, an
    alternative transport) keeps doing the I/O underneath."""
    # An SDK's client class (anthropic's DefaultHttpxClient) derives from the library's.
    libraries = {cls.__module__.split(".")[0] for cls in type(client).__mro__}
    if not libraries & _LIBRARIES or not hasattr(client, "_transport") or not hasattr(client, "_mounts"):
        raise CaptureClientError(
            f"capture() takes an httpx2 or httpx client, not {type(client).__module__}.{type(client).__qualname__}",
            details={"type": type(client).__qualname__},
        )
    from tracelock.integrations.http.transport import CaptureTransport

    client._transport = CaptureTransport(client._transport, **options)
    client._mounts = {
        pattern: None if transport is None else CaptureTransport(transport, **options)
        for pattern, transport in client._mounts.items()
    }
    return client
