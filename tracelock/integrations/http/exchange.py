"""One captured HTTP exchange, independent of the HTTP library: the step request it makes,
the result document it records, and the response (or the exception) it gives back.

The request's arguments (what replay matches and the fingerprint hashes)::

    {"method": "POST", "url": "https://api.openai.com/v1/chat/completions",
     "headers": {...},            # headers.request_headers: volatile ones out, secrets marked
     "body": {...},               # the JSON body, when it is JSON
     "body_bytes": {"sha256", "size", "base64"},   # else, when not empty
     "model": "...", "max_tokens": 64}             # LLM calls only, read from the body

The result::

    {"status": 200, "headers": {...},
     "body": {...} | "body_bytes": {...}          # a whole body
     | "chunks": ["data: ...\\n\\n", ...], "complete": true, "error": null,   # a stream
     "llm": {"content", "usage", "model"}}       # an LLM call's 2xx answer
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import urllib.parse
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from tracelock.core.canonical import CanonicalError, Encoded, dumps, dumps_with, loads
from tracelock.integrations.http import headers as header_rules
from tracelock.integrations.http.llm_shapes import answer_of, max_tokens_of, recognise, sse_events
from tracelock.runtime.outcomes import StepFailure
from tracelock.runtime.pipeline.codes import HTTP_CONNECT_ERROR, HTTP_TIMEOUT, HTTP_TRANSPORT_ERROR
from tracelock.runtime.pipeline.request import StepRequest
from tracelock.runtime.policy.policy import Policy

__all__ = ["Options", "StreamRecorder", "asks_for_stream", "is_stream", "make_request", "make_result", "read_result", "body_of", "chunks_of", "failure_of", "READ_ONLY_METHODS"]

READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Options:
    """What a capturing transport is configured with."""

    __slots__ = ("ignore", "pass_through", "secret")

    def __init__(
        self,
        *,
        pass_through: bool = False,
        secret_headers: Iterable[str] = (),
        ignore_headers: Iterable[str] = (),
    ) -> None:
        self.pass_through = pass_through
        self.secret = frozenset(name.lower() for name in secret_headers)
        self.ignore = frozenset(name.lower() for name in ignore_headers)


def _payload(data: bytes) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "base64": base64.b64encode(data).decode("ascii")}


def _json(data: bytes) -> tuple[bool, Any]:
    try:
        return True, loads(data)
    except CanonicalError:
        return False, None


def make_request(
    policy: Policy,
    method: str,
    url: str,
    header_pairs: Iterable[tuple[str, str]],
    content: bytes,
    options: Options,
    perform: Callable[[], Any],
) -> StepRequest:
    """The step request of one HTTP request."""
    method = method.upper()
    args: dict[str, Any] = {
        "method": method,
        "url": url,
        "headers": header_rules.request_headers(header_pairs, secret=options.secret, ignore=options.ignore),
    }
    body: Any = None
    if content:
        is_json, body = _json(content)
        if is_json:
            args["body"] = body
        else:
            args["body_bytes"] = _payload(content)
    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"
    api = recognise(method, path, body)
    if api is not None:
        args["model"] = body["model"]
        args["max_tokens"] = max_tokens_of(api, body)
        return StepRequest("llm", api, args, "read_only", perform=perform)
    rule = policy.http_rule(method, parts.netloc.rpartition("@")[2], path)
    side_effect = rule["class"] if rule is not None and rule["class"] is not None else None
    if side_effect is None:
        side_effect = "read_only" if method in READ_ONLY_METHODS else "irreversible"
    return StepRequest("http", f"{method} {parts.netloc.rpartition('@')[2]}{path}", args, side_effect, perform=perform)


def _decoder(header_pairs: list[tuple[str, str]]) -> Any:
    encoding = next((value.lower().strip() for name, value in header_pairs if name.lower() == "content-encoding"), "")
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=31)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


def _is_stream(header_pairs: list[tuple[str, str]]) -> bool:
    return any(
        name.lower() == "content-type" and value.lower().startswith("text/event-stream")
        for name, value in header_pairs
    )


class StreamRecorder:
    """A server-sent-event response read into its result document event by event:
    :meth:`feed` takes the raw (possibly encoded) bytes as they come and returns the events
    they completed; :meth:`finish` makes the result. One chunk per event (up to and with its
    blank line), however the network cut the bytes: the recording does not depend on packet
    boundaries."""

    def __init__(self, status: int, header_pairs: list[tuple[str, str]], options: Options, api: str | None) -> None:
        self.status = status
        self.api = api
        self.headers = _result_headers(header_pairs, options)
        self.chunks: list[str] = []
        self._decoder = _decoder(header_pairs)
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""

    def feed(self, raw: bytes) -> list[str]:
        start = len(self.chunks)
        data = self._decoder.decompress(raw) if self._decoder is not None else raw
        self._pending = _split_events(self._pending + self._text.decode(data), self.chunks)
        return self.chunks[start:]

    def finish(self, error: dict[str, Any] | None, *, closed: bool = False, taken: int | None = None) -> dict[str, Any]:
        """The result: every event fed (and, unless the caller ``closed`` the stream before
        its end was read, the unfinished one the stream ended with; then only the ``taken``
        first events, those the caller got), cut off by ``error`` if not None (``complete``
        is false then)."""
        if closed and taken is not None:
            del self.chunks[taken:]  # read from the network, never given to the caller
        if not closed:
            self._pending = _split_events(self._pending + self._text.decode(b"", final=True), self.chunks)
            if self._pending:
                self.chunks.append(self._pending)  # an event the stream did not finish
            self._pending = ""
        result: dict[str, Any] = {"status": self.status, "headers": self.headers}
        result.update(chunks=list(self.chunks), complete=error is None, error=error)
        if closed:
            result["closed"] = True
        if self.api is not None and 200 <= self.status < 300:
            result["llm"] = answer_of(self.api, None, sse_events("".join(self.chunks)))
        return result


def _result_headers(header_pairs: list[tuple[str, str]], options: Options) -> dict[str, str]:
    decoder = _decoder(header_pairs)
    encoding = next((value.lower() for name, value in header_pairs if name.lower() == "content-encoding"), "")
    keep_encoding = bool(encoding) and encoding != "identity" and decoder is None
    return header_rules.response_headers(header_pairs, secret=options.secret, keep_encoding=keep_encoding)


def asks_for_stream(header_pairs: Iterable[tuple[str, str]], args: dict[str, Any]) -> bool:
    """Whether a request asks for an event stream: its ``accept`` header names
    ``text/event-stream``, or its body is a JSON object with ``"stream": true`` (the LLM
    APIs). Only such a request's answer is given to the caller while it is read. ``args``
    are the request's step arguments (:func:`make_request`), whose ``body`` is the body
    already parsed, when it is JSON."""
    if any(name.lower() == "accept" and "text/event-stream" in value.lower() for name, value in header_pairs):
        return True
    body = args.get("body")
    return isinstance(body, dict) and body.get("stream") is True


def is_stream(header_pairs: list[tuple[str, str]]) -> bool:
    """Whether a response is a server-sent-event stream (recorded chunk by chunk)."""
    return _is_stream(header_pairs)


def make_result(
    status: int,
    header_pairs: list[tuple[str, str]],
    raw_chunks: Iterable[bytes],
    options: Options,
    api: str | None,
    on_error: Callable[[Exception], dict[str, Any]],
) -> dict[str, Any]:
    """Read a response (its raw, possibly encoded, chunks) into the result document. A
    stream is kept chunk by chunk; an exception while reading a stream ends it, recorded
    as cut off with ``on_error``'s description; one while reading a whole body fails the
    step."""
    result, _ = read_result(status, header_pairs, raw_chunks, options, api, on_error)
    document: dict[str, Any] = result.value
    return document


def read_result(
    status: int,
    header_pairs: list[tuple[str, str]],
    raw_chunks: Iterable[bytes],
    options: Options,
    api: str | None,
    on_error: Callable[[Exception], dict[str, Any]],
) -> tuple[Encoded, bytes | None]:
    """:func:`make_result`, serialized: the result document with its canonical bytes, and
    a JSON body's canonical bytes (what the caller reads, as :func:`body_of` gives them),
    or None. A JSON body is serialized once, for both."""
    if _is_stream(header_pairs):
        recorder = StreamRecorder(status, header_pairs, options, api)
        error: dict[str, Any] | None = None
        try:
            for raw in raw_chunks:
                recorder.feed(raw)
        except Exception as exc:
            error = on_error(exc)
        document = recorder.finish(error)
        return Encoded(document, dumps(document)), None
    decoder = _decoder(header_pairs)
    result: dict[str, Any] = {"status": status, "headers": _result_headers(header_pairs, options)}
    data = b"".join(raw_chunks)
    if decoder is not None:
        data = decoder.decompress(data) + decoder.flush()
    body: Any = None
    body_canonical: bytes | None = None
    if data:
        is_json, body = _json(data)
        if is_json:
            result["body"] = body
            body_canonical = dumps(body)
        else:
            result["body_bytes"] = _payload(data)
    if api is not None and 200 <= status < 300:
        result["llm"] = answer_of(api, body, None)
    known = {"body": body_canonical} if body_canonical is not None else {}
    return Encoded(result, dumps_with(result, known)), body_canonical


def _split_events(text: str, chunks: list[str]) -> str:
    """Move the complete events of ``text`` to ``chunks``; return the rest."""
    start = 0
    while True:
        ends = [found for found in (text.find("\n\n", start), text.find("\r\n\r\n", start)) if found >= 0]
        if not ends:
            break
        end = min(ends)
        end += 4 if text.startswith("\r\n\r\n", end) else 2
        chunks.append(text[start:end])
        start = end
    return text[start:]


def body_of(result: dict[str, Any]) -> bytes:
    """A whole recorded body's bytes (JSON bodies in canonical form)."""
    if "body" in result:
        return dumps(result["body"])
    payload = result.get("body_bytes")
    if isinstance(payload, dict) and isinstance(payload.get("base64"), str):
        return base64.b64decode(payload["base64"])
    return b""


def chunks_of(result: dict[str, Any]) -> list[bytes] | None:
    """A recorded stream's chunks, or None when the body was whole."""
    chunks = result.get("chunks")
    if not isinstance(chunks, list):
        return None
    return [str(chunk).encode("utf-8") for chunk in chunks]


_CONNECT = ("ConnectError", "ProxyError", "UnsupportedProtocol")


def failure_of(exc: Exception) -> StepFailure:
    """The step failure an exception of the HTTP library becomes; ``details.exception``
    names its class, which the transport raises again on replay."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    if "TimeoutException" in names:
        code = HTTP_TIMEOUT
    elif names[0] in _CONNECT or "ConnectError" in names:
        code = HTTP_CONNECT_ERROR
    else:
        code = HTTP_TRANSPORT_ERROR
    return StepFailure(code, f"{names[0]}: {exc}", exception=names[0])


def error_doc(exc: Exception) -> dict[str, Any]:
    failure = failure_of(exc)
    return {"code": failure.step_code.code, "exception": type(exc).__name__, "message": failure.message}
