"""Which headers reach the journal, and in what form.

- *Volatile* headers vary per call or per install and never decide the effect: they are
  left out of the request's arguments (so out of matching and the fingerprint).
- *Secret* headers are kept (their presence can matter) with the value replaced by
  :data:`SECRET`, before anything is hashed: no secret reaches the journal.
- Every other header is kept, its name lowercased; repeated headers are joined with ", ".
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SECRET", "SECRET_HEADERS", "VOLATILE_HEADERS", "VOLATILE_PREFIXES", "request_headers", "response_headers"]

SECRET = "<secret>"
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)
#: Request headers left out: the SDKs' retry counters, timeouts, helper markers and
#: runtime/OS/arch/version headers (all ``x-stainless-*``), the user agent, the random
#: idempotency key the SDKs make per call, and what the HTTP library sets per connection.
VOLATILE_HEADERS = frozenset(
    {
        "user-agent",
        "idempotency-key",
        "content-length",
        "host",
        "connection",
        "accept-encoding",
        "transfer-encoding",
        "traceparent",
        "tracestate",
    }
)
VOLATILE_PREFIXES = ("x-stainless-",)
#: Response headers left out: framing, which the capture undoes (the body is recorded
#: decoded and whole), and what says only when and through which machines the answer came,
#: which would make two recordings of the same answer hash differently.
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"})
VOLATILE_RESPONSE_HEADERS = frozenset(
    {"date", "server", "age", "via", "alt-svc", "cf-ray", "cf-cache-status", "openai-processing-ms", "x-envoy-upstream-service-time"}
)


def _joined(pairs: Iterable[tuple[str, str]], drop: frozenset[str], prefixes: tuple[str, ...], secrets: frozenset[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, value in pairs:
        name = raw_name.lower()
        if name in drop or name.startswith(prefixes):
            continue
        shown = SECRET if name in secrets else value
        headers[name] = headers[name] + ", " + shown if name in headers else shown
    return dict(sorted(headers.items()))


def request_headers(
    pairs: Iterable[tuple[str, str]], *, secret: frozenset[str] = frozenset(), ignore: frozenset[str] = frozenset()
) -> dict[str, str]:
    """The request headers that are recorded and matched on replay."""
    return _joined(pairs, VOLATILE_HEADERS | ignore, VOLATILE_PREFIXES, SECRET_HEADERS | secret)


def response_headers(pairs: Iterable[tuple[str, str]], *, secret: frozenset[str] = frozenset(), keep_encoding: bool = False) -> dict[str, str]:
    """The response headers that are recorded and given back to the caller."""
    framing = _FRAMING - {"content-encoding"} if keep_encoding else _FRAMING
    drop = framing | VOLATILE_RESPONSE_HEADERS
    return _joined(pairs, drop, (), SECRET_HEADERS | secret)
