"""The capturing transport: one class for ``httpx2`` and ``httpx`` clients, sync and async
(as the libraries' own ``MockTransport`` serves both), since both libraries have the same
transport API. The library is the request's: its response, exceptions and byte-stream
classes are used to answer it.

A request made inside a run becomes a step (:func:`exchange.make_request`) handed to the
run's pipeline; the wrapped transport is called only by the pipeline's EXECUTE phase, and
what the caller gets back is built from the result document in both modes (recording and
replay), so that the two give the same bytes, headers and chunks.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from types import ModuleType
from typing import Any, Self

from tracelock.core.canonical import Encoded
from tracelock.integrations.http.errors import CaptureOutsideRunError
from tracelock.integrations.http.exchange import (
    Options,
    StreamRecorder,
    asks_for_stream,
    body_of,
    chunks_of,
    error_doc,
    failure_of,
    is_stream,
    make_request,
    read_result,
)
from tracelock.integrations.http.live import AsyncLiveStream, LiveStream, futures, offer, start
from tracelock.runtime import bridge
from tracelock.runtime.bridge import bridged
from tracelock.runtime.doors.current import current_pipeline
from tracelock.runtime.errors import StepError
from tracelock.runtime.pipeline.codes import HTTP_CONNECT_ERROR, HTTP_TIMEOUT, HTTP_TRANSPORT_ERROR
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.request import StepRequest
from tracelock.runtime.strict.guard import allow_library, door, door_receiver, runtime_code

__all__ = ["CaptureTransport", "Capturing", "RecordedStream", "is_captured"]

#: The official LLM SDKs make a random idempotency key per call and read the clock and
#: randomness for retry timing, and the environment for its settings: what of it reaches
#: a request is recorded and matched on replay (ids and timeouts sit in volatile headers,
#: left out), so strict mode lets it through. Their network access
#: still has to go through a capturing transport.
SDK_PACKAGES = ("openai", "anthropic")
SDK_RULES = ("TL-UUID-", "TL-RAND-", "TL-CLOCK-", "TL-ENV-", "TL-CONC-")
#: The HTTP libraries time each response (``response.elapsed``): a measurement, not a decision.
HTTP_PACKAGES = ("httpx", "httpx2", "httpcore", "httpcore2")
HTTP_RULES = ("TL-CLOCK-",)


def is_captured(client: Any) -> bool:
    """Whether every transport of ``client`` (an httpx/httpx2 client) captures: then its
    methods are doors, which strict mode lets agent code call."""
    transport = getattr(client, "_transport", None)
    mounts = getattr(client, "_mounts", None)
    if not isinstance(transport, Capturing) or not isinstance(mounts, dict):
        return False
    return all(value is None or isinstance(value, Capturing) for value in mounts.values())


class Capturing:
    """The mark of a capturing transport class (both libraries, sync and async)."""

    __slots__ = ()


def _register() -> None:
    for package in SDK_PACKAGES:
        allow_library(package, SDK_RULES)
    for package in HTTP_PACKAGES:
        allow_library(package, HTTP_RULES)
    door_receiver(is_captured)

_HTTP_CODES = frozenset({HTTP_CONNECT_ERROR.code, HTTP_TIMEOUT.code, HTTP_TRANSPORT_ERROR.code})


def _outside(request: Any) -> CaptureOutsideRunError:
    return CaptureOutsideRunError(
        f"{request.method} {request.url.copy_with(query=None)}: a capturing HTTP client was used "
        "outside a run (make the call inside an agent, or pass pass_through=True)",
        details={"method": str(request.method)},
    )


def _raised(lib: Any, name: str, message: str, request: Any) -> Exception:
    """The library's exception class ``name`` (its TransportError when it has none)."""
    cls = getattr(lib, name, None)
    if not (isinstance(cls, type) and issubclass(cls, lib.TransportError)):
        cls = lib.TransportError
    exc: Exception = cls(message, request=request)
    return exc


def _collect(stream: Iterator[bytes]) -> tuple[list[bytes], Exception | None]:
    chunks: list[bytes] = []
    try:
        for chunk in stream:
            chunks.append(chunk)
    except Exception as exc:
        return chunks, exc
    return chunks, None


def _replay(chunks: list[bytes], error: Exception | None) -> Iterator[bytes]:
    yield from chunks
    if error is not None:
        raise error


def _library(request: Any) -> ModuleType:
    """The HTTP library (``httpx2`` or ``httpx``) a request object belongs to."""
    return sys.modules[type(request).__module__.partition(".")[0]]


@functools.cache
def _streams(lib: ModuleType) -> tuple[type[Any], type[Any], type[Any]]:
    """The byte-stream classes a response of ``lib`` is given through (its client checks
    that a transport's response body is one of the library's byte streams): a recorded body
    (sync and async, as the library's own ``ByteStream``), a live stream, an async live one."""
    both = (lib.SyncByteStream, lib.AsyncByteStream)
    return (
        type("RecordedBody", (RecordedStream, *both), {"__module__": __name__}),
        type("LiveBody", (LiveStream, lib.SyncByteStream), {"__module__": __name__}),
        type("AsyncLiveBody", (AsyncLiveStream, lib.AsyncByteStream), {"__module__": __name__}),
    )


class _Exchange:
    """What one captured request's step (its ``perform``) and the caller share: the step's
    futures (a step run in a thread of its own) and what ``perform`` made of the response."""

    __slots__ = ("body", "outcome", "ready", "result")

    def __init__(self) -> None:
        self.outcome: Any = None
        self.ready: Any = None
        #: The result document ``perform`` made and its JSON body's canonical bytes: the
        #: response the caller reads is built from that result without serializing it again.
        self.result: Any = None
        self.body: bytes | None = None

    def body_for(self, result: dict[str, Any]) -> bytes | None:
        return self.body if result is self.result else None


class CaptureTransport(Capturing):
    """Wraps ``wrapped`` (by default a new ``HTTPTransport`` of the request's library, sync
    or async, made at its first request): inside a run, every request is a step of the run;
    outside one, requests are refused (``CaptureOutsideRunError``) unless ``pass_through``.
    ``secret_headers`` are marked like ``Authorization``; ``ignore_headers`` are left out
    like ``user-agent``. One instance serves ``httpx2`` and ``httpx`` clients, sync
    (``handle_request``) and async (``handle_async_request``)."""

    def __init__(
        self,
        wrapped: Any = None,
        *,
        pass_through: bool = False,
        secret_headers: Iterable[str] = (),
        ignore_headers: Iterable[str] = (),
    ) -> None:
        _register()
        self.wrapped = wrapped
        self.options = Options(pass_through=pass_through, secret_headers=secret_headers, ignore_headers=ignore_headers)
        self._defaults: dict[bool, Any] = {}  # the default transport, by async-ness
        self._lock = threading.Lock()

    # -- the libraries' transport API ------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def close(self) -> None:
        inner = self.wrapped if self.wrapped is not None else self._defaults.get(False)
        if inner is not None:
            inner.close()

    async def aclose(self) -> None:
        inner = self.wrapped if self.wrapped is not None else self._defaults.get(True)
        if inner is not None:
            await inner.aclose()

    @door
    def handle_request(self, request: Any) -> Any:
        """A sync client's request. The step runs in a thread of its own when the request
        asks for a stream, so that a streamed response can reach the caller while the step
        is still in EXECUTE (see ``live.py``)."""
        pipeline = current_pipeline()
        lib = _library(request)
        inner = self._inner(lib, False)
        if pipeline is None:
            if self.options.pass_through:
                return inner.handle_request(request)
            raise _outside(request)
        content = request.read()
        made = _Exchange()

        def perform() -> Any:
            try:
                response = inner.handle_request(request)
            except Exception as exc:
                raise failure_of(exc) from None
            api = step.name if step.kind == "llm" else None
            if streaming and self._streams_live(step, response):
                live = _streams(lib)[1](pipeline, self._recorder(response, api), response,
                                        lambda result: _stream_error(lib, result, request))
                return self._go_live(live, pipeline, lib, request, made)
            try:
                chunks, error = _collect(iter(response.stream))
            finally:
                response.close()
            return self._result(response, api, _replay(chunks, error), made)

        step = self._step(pipeline, request, content, perform)
        streaming = asks_for_stream(request.headers.multi_items(), step.args)
        if not streaming:
            # A request that does not ask for a stream runs its step on the caller's thread
            # (an event stream answering it anyway is read whole).
            try:
                result: dict[str, Any] = pipeline.run(step)
            except StepError as error:
                raise self._failure(lib, error, request) from None
            return self._response(lib, result, request, made)
        made.outcome, made.ready = futures()
        start(pipeline, step, made.outcome, made.ready)
        live = made.ready.result()
        if live is not None:
            return self._live_response(lib, live, request)
        return self._answer(lib, made, request)

    async def handle_async_request(self, request: Any) -> Any:
        """An async client's request. The wrapped transport runs on the caller's event loop.
        A request that does not ask for a stream runs its step there too, as a bridged call
        (:mod:`tracelock.runtime.bridge`): the pipeline's waits, the exchange among them,
        are awaited on the loop, which goes on meanwhile, and no thread is involved."""
        pipeline = current_pipeline()
        lib = _library(request)
        inner = self._inner(lib, True)
        if pipeline is None:
            if self.options.pass_through:
                return await inner.handle_async_request(request)
            raise _outside(request)
        content = await request.aread()
        loop = asyncio.get_running_loop()
        made = _Exchange()

        async def exchange() -> Any:
            with runtime_code():  # the pipeline's EXECUTE, run on the caller's loop
                try:
                    response = await inner.handle_async_request(request)
                except Exception as exc:
                    raise failure_of(exc) from None
            api = step.name if step.kind == "llm" else None
            if streaming and self._streams_live(step, response):
                return _streams(lib)[2](pipeline, self._recorder(response, api), response,
                                        lambda result: _stream_error(lib, result, request))
            with runtime_code():
                chunks: list[bytes] = []
                error: Exception | None = None
                try:
                    async for chunk in response.stream:
                        chunks.append(chunk)
                except Exception as exc:
                    error = exc
                finally:
                    await response.aclose()
            return self._result(response, api, _replay(chunks, error), made)

        def perform() -> Any:
            if bridge.active():  # the step is a bridged call on the caller's loop
                got = bridge.wait(exchange())
            else:  # the step's own thread (a stream's)
                got = asyncio.run_coroutine_threadsafe(exchange(), loop).result()
            if isinstance(got, Encoded):
                return got
            return self._go_live(got, pipeline, lib, request, made)

        step = self._step(pipeline, request, content, perform)
        streaming = asks_for_stream(request.headers.multi_items(), step.args)
        if not streaming:
            # An event stream answering anyway is read whole, as for a sync client.
            with runtime_code():  # a door's own work: the pipeline's step
                try:
                    result: dict[str, Any] = await bridged(pipeline.run, step)
                except StepError as error:
                    raise self._failure(lib, error, request) from None
                return self._response(lib, result, request, made)
        # A stream keeps a thread of its own for its step: the step stays in EXECUTE while
        # the caller reads, and whatever finishes the stream for another step (a sync
        # thread's ``before_step``, the end of the run) waits for its record by blocking,
        # which a step suspended on this loop could never answer while the loop is held.
        made.outcome, made.ready = futures()
        with runtime_code():  # a door's own work: the thread is the runtime's
            start(pipeline, step, made.outcome, made.ready)
        live = await asyncio.wrap_future(made.ready)
        with runtime_code():  # the door's own work too: the response it gives back
            if live is not None:
                return self._live_response(lib, live, request)
            return self._answer(lib, made, request)

    # -- the parts -------------------------------------------------------------------------
    def _inner(self, lib: ModuleType, is_async: bool) -> Any:
        """The transport doing the I/O: ``wrapped``, or the library's default."""
        if self.wrapped is not None:
            return self.wrapped
        inner = self._defaults.get(is_async)
        if inner is None:
            with self._lock:
                inner = self._defaults.get(is_async)
                if inner is None:
                    inner = self._defaults[is_async] = lib.AsyncHTTPTransport() if is_async else lib.HTTPTransport()
        return inner

    def _step(self, pipeline: Pipeline, request: Any, content: bytes, perform: Any) -> StepRequest:
        return make_request(
            pipeline.policy,
            str(request.method),
            str(request.url),
            request.headers.multi_items(),
            content,
            self.options,
            perform,
        )

    def _result(self, response: Any, api: str | None, stream: Iterator[bytes], made: _Exchange) -> Encoded:
        result, body = read_result(
            response.status_code, response.headers.multi_items(), stream, self.options, api, error_doc
        )
        made.result, made.body = result.value, body
        return result

    def _failure(self, lib: ModuleType, error: StepError, request: Any) -> Exception:
        details = error.details or {}
        name = details.get("exception")
        if error.step_code in _HTTP_CODES and isinstance(name, str):
            return _raised(lib, name, error.message.partition(": ")[2] or error.message, request)
        return error

    def _response(self, lib: ModuleType, result: dict[str, Any], request: Any, made: _Exchange) -> Any:
        stream = _streams(lib)[0](lib, result, request, made.body_for(result))
        return lib.Response(result["status"], headers=list(result["headers"].items()), stream=stream, request=request)

    def _streams_live(self, step: StepRequest, response: Any) -> bool:
        """Whether ``response`` is handed to the caller while it is read: a server-sent-event
        stream of a step whose result need not be durable before the caller sees it (an
        irreversible one's must: it is read whole first)."""
        return step.side_effect != "irreversible" and is_stream(response.headers.multi_items())

    def _go_live(self, live: Any, pipeline: Pipeline, lib: ModuleType, request: Any, made: _Exchange) -> Any:
        live.outcome = made.outcome
        live.raise_failure = lambda exc: self._failure(lib, exc, request) if isinstance(exc, StepError) else exc
        with pipeline.lock:
            pipeline.open_stream = live
        offer(made.ready, live)
        result: dict[str, Any] = live.result.result()
        return result

    def _answer(self, lib: ModuleType, made: _Exchange, request: Any) -> Any:
        try:
            result: dict[str, Any] = made.outcome.result()
        except StepError as error:
            raise self._failure(lib, error, request) from None
        return self._response(lib, result, request, made)

    def _live_response(self, lib: ModuleType, live: Any, request: Any) -> Any:
        recorder = live.recorder
        return lib.Response(recorder.status, headers=list(recorder.headers.items()), stream=live, request=request)

    def _recorder(self, response: Any, api: str | None) -> StreamRecorder:
        return StreamRecorder(response.status_code, response.headers.multi_items(), self.options, api)


def _stream_error(lib: ModuleType, result: dict[str, Any], request: Any) -> Exception | None:
    """The exception a recorded stream that broke off ends with (None: it was complete)."""
    error = result.get("error")
    if result.get("complete", True) or not isinstance(error, dict):
        return None
    return _raised(lib, str(error.get("exception")), str(error.get("message", "")), request)


class RecordedStream:
    """A recorded body, given chunk by chunk (a stream's recorded chunks, then its recorded
    cut-off) as the caller reads, sync or async. ``body``: a whole JSON body's canonical
    bytes when they are at hand (the response was just recorded), else read from
    ``result``."""

    def __init__(self, lib: ModuleType, result: dict[str, Any], request: Any, body: bytes | None = None) -> None:
        self._lib, self._result, self._request, self._body = lib, result, request, body

    def __iter__(self) -> Iterator[bytes]:
        chunks = chunks_of(self._result)
        if chunks is None:
            yield self._body if self._body is not None else body_of(self._result)
            return
        yield from chunks
        error = _stream_error(self._lib, self._result, self._request)
        if error is not None:
            raise error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
