"""The capturing transport's work, shared by the ``httpx2`` and ``httpx`` classes (which
differ only in the library module they are given: both have the same transport API).

A request made inside a run becomes a step (:func:`exchange.make_request`) handed to the
run's pipeline; the wrapped transport is called only by the pipeline's EXECUTE phase, and
what the caller gets back is built from the result document in both modes (recording and
replay), so that the two give the same bytes, headers and chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

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
    make_result,
)
from tracelock.integrations.http.live import futures, offer, start
from tracelock.runtime.doors.current import current_pipeline
from tracelock.runtime.errors import StepError
from tracelock.runtime.pipeline.codes import HTTP_CONNECT_ERROR, HTTP_TIMEOUT, HTTP_TRANSPORT_ERROR
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.request import StepRequest
from tracelock.runtime.strict.guard import allow_library, door, door_receiver, runtime_code

__all__ = ["SyncCore", "AsyncCore", "Capturing", "RecordedStream", "AsyncRecordedStream", "is_captured"]

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


class _Core:
    __slots__ = ("lib", "live", "options", "stream", "wrapped")

    def __init__(self, lib: Any, wrapped: Any, options: Options, stream: type[Any], live: type[Any]) -> None:
        _register()
        self.lib = lib
        self.wrapped = wrapped
        self.options = options
        #: The library's byte-stream class the recorded body is given back through.
        self.stream = stream
        #: The library's byte-stream class a live stream is given to the caller through.
        self.live = live

    def _step(self, pipeline: Pipeline, request: Any, content: bytes, perform: Any) -> Any:
        return make_request(
            pipeline.policy,
            str(request.method),
            str(request.url),
            request.headers.multi_items(),
            content,
            self.options,
            perform,
        )

    def _result(self, response: Any, api: str | None, stream: Iterator[bytes]) -> dict[str, Any]:
        return make_result(response.status_code, response.headers.multi_items(), stream, self.options, api, error_doc)

    def _failure(self, error: StepError, request: Any) -> Exception:
        details = error.details or {}
        name = details.get("exception")
        if error.step_code in _HTTP_CODES and isinstance(name, str):
            return _raised(self.lib, name, error.message.partition(": ")[2] or error.message, request)
        return error

    def _response(self, result: dict[str, Any], request: Any, stream: Any) -> Any:
        return self.lib.Response(
            result["status"],
            headers=list(result["headers"].items()),
            stream=stream,
            request=request,
        )

    def _stream_error(self, result: dict[str, Any], request: Any) -> Exception | None:
        error = result.get("error")
        if result.get("complete", True) or not isinstance(error, dict):
            return None
        return _raised(self.lib, str(error.get("exception")), str(error.get("message", "")), request)

    def _streams_live(self, step: StepRequest, response: Any) -> bool:
        """Whether ``response`` is handed to the caller while it is read: a server-sent-event
        stream of a step whose result need not be durable before the caller sees it (an
        irreversible one's must: it is read whole first)."""
        return step.side_effect != "irreversible" and is_stream(response.headers.multi_items())

    def _go_live(self, live: Any, pipeline: Pipeline, request: Any, ready: Any, outcome: Any) -> Any:
        live.outcome = outcome
        live.raise_failure = lambda exc: self._failure(exc, request) if isinstance(exc, StepError) else exc
        with pipeline.lock:
            pipeline.open_stream = live
        offer(ready, live)
        result: dict[str, Any] = live.result.result()
        return result

    def _answer(self, outcome: Any, request: Any) -> Any:
        try:
            result: dict[str, Any] = outcome.result()
        except StepError as error:
            raise self._failure(error, request) from None
        return self._response(result, request, self.stream(self, result, request))

    def _live_response(self, live: Any, request: Any) -> Any:
        recorder = live.recorder
        return self.lib.Response(recorder.status, headers=list(recorder.headers.items()), stream=live, request=request)

    def _recorder(self, response: Any, api: str | None) -> StreamRecorder:
        return StreamRecorder(response.status_code, response.headers.multi_items(), self.options, api)


class SyncCore(_Core):
    """``handle_request`` of a capturing ``BaseTransport``. The step runs in a thread of its
    own, so that a streamed response can reach the caller while the step is still in
    EXECUTE (see ``live.py``)."""

    __slots__ = ()

    @door
    def send(self, request: Any) -> Any:
        pipeline = current_pipeline()
        if pipeline is None:
            if self.options.pass_through:
                return self.wrapped.handle_request(request)
            raise _outside(request)
        content = request.read()
        made: list[StepRequest] = []
        ready: list[Any] = []
        outcome: list[Any] = []
        streaming = asks_for_stream(request.headers.multi_items(), content)

        def perform() -> dict[str, Any]:
            try:
                response = self.wrapped.handle_request(request)
            except Exception as exc:
                raise failure_of(exc) from None
            step = made[0]
            api = step.name if step.kind == "llm" else None
            if streaming and self._streams_live(step, response):
                live = self.live(pipeline, self._recorder(response, api), response,
                                 lambda result: self._stream_error(result, request))
                return self._go_live(live, pipeline, request, ready[0], outcome[0])  # type: ignore[no-any-return]
            try:
                chunks, error = _collect(iter(response.stream))
            finally:
                response.close()
            return self._result(response, api, _replay(chunks, error))

        made.append(self._step(pipeline, request, content, perform))
        if not streaming:
            # A request that does not ask for a stream runs its step on the caller's thread
            # (an event stream answering it anyway is read whole).
            try:
                result: dict[str, Any] = pipeline.run(made[0])
            except StepError as error:
                raise self._failure(error, request) from None
            return self._response(result, request, self.stream(self, result, request))
        done, now = futures()
        outcome.append(done)
        ready.append(now)
        start(pipeline, made[0], done, now)
        live = now.result()
        if live is not None:
            return self._live_response(live, request)
        return self._answer(done, request)


class AsyncCore(_Core):
    """``handle_async_request`` of a capturing ``AsyncBaseTransport``. The step runs in a
    thread of its own (the pipeline blocks on journal syncs); the wrapped transport runs on
    the caller's event loop."""

    __slots__ = ()

    async def send(self, request: Any) -> Any:
        pipeline = current_pipeline()
        if pipeline is None:
            if self.options.pass_through:
                return await self.wrapped.handle_async_request(request)
            raise _outside(request)
        content = await request.aread()
        loop = asyncio.get_running_loop()
        made: list[StepRequest] = []
        ready: list[Any] = []
        outcome: list[Any] = []

        async def exchange() -> Any:
            with runtime_code():  # the pipeline's EXECUTE, run on the caller's loop
                try:
                    response = await self.wrapped.handle_async_request(request)
                except Exception as exc:
                    raise failure_of(exc) from None
            step = made[0]
            api = step.name if step.kind == "llm" else None
            if self._streams_live(step, response):
                return self.live(pipeline, self._recorder(response, api), response,
                                 lambda result: self._stream_error(result, request))
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
            return self._result(response, api, _replay(chunks, error))

        def perform() -> dict[str, Any]:
            got = asyncio.run_coroutine_threadsafe(exchange(), loop).result()
            if isinstance(got, dict):
                return got
            return self._go_live(got, pipeline, request, ready[0], outcome[0])  # type: ignore[no-any-return]

        made.append(self._step(pipeline, request, content, perform))
        done, now = futures()
        outcome.append(done)
        ready.append(now)
        with runtime_code():  # a door's own work: the thread is the runtime's
            start(pipeline, made[0], done, now)
        live = await asyncio.wrap_future(now)
        if live is not None:
            return self._live_response(live, request)
        return self._answer(done, request)


class RecordedStream:
    """A recorded body, given chunk by chunk (a stream's recorded chunks, then its recorded
    cut-off) as the caller reads."""

    def __init__(self, core: _Core, result: dict[str, Any], request: Any) -> None:
        self._core, self._result, self._request = core, result, request

    def __iter__(self) -> Iterator[bytes]:
        chunks = chunks_of(self._result)
        if chunks is None:
            yield body_of(self._result)
            return
        yield from chunks
        error = self._core._stream_error(self._result, self._request)
        if error is not None:
            raise error

    def close(self) -> None:
        pass


class AsyncRecordedStream:
    def __init__(self, core: _Core, result: dict[str, Any], request: Any) -> None:
        self._sync = RecordedStream(core, result, request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._sync:
            yield chunk

    async def aclose(self) -> None:
        pass
