"""``capture(client)``: wrap a client's transports in place."""

from __future__ import annotations

import importlib
from typing import Any

from tracelock.integrations.http.errors import CaptureClientError

__all__ = ["wrap_client"]

_MODULES = {"httpx2": "tracelock.integrations.http.httpx2_transport", "httpx": "tracelock.integrations.http.httpx_transport"}


def wrap_client(client: Any, **options: Any) -> Any:
    """Replace ``client``'s transport and its mounted ones by capturing transports around
    them. This reaches into the client (its ``_transport`` and ``_mounts``, the same in
    httpx 0.28 and httpx2 2.x) so that whatever the client was built with (an SDK's
    defaults, proxies, an alternative transport) keeps doing the I/O underneath."""
    # An SDK's client class (anthropic's DefaultHttpxClient) derives from the library's.
    libraries = [cls.__module__.split(".")[0] for cls in type(client).__mro__]
    module_name = next((_MODULES[name] for name in libraries if name in _MODULES), None)
    if module_name is None or not hasattr(client, "_transport") or not hasattr(client, "_mounts"):
        raise CaptureClientError(
            f"capture() takes an httpx2 or httpx client, not {type(client).__module__}.{type(client).__qualname__}",
            details={"type": type(client).__qualname__},
        )
    module = importlib.import_module(module_name)
    client._transport = module.wrap(client, client._transport, options)
    client._mounts = {
        pattern: None if transport is None else module.wrap(client, transport, options)
        for pattern, transport in client._mounts.items()
    }
    return client
