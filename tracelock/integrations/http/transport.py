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
    body_of,
    chunks_of,
    error_doc,
    failure_of,
    make_request,
    make_result,
)
from tracelock.runtime.doors.current import current_pipeline
from tracelock.runtime.errors import StepError
from tracelock.runtime.pipeline.codes import HTTP_CONNECT_ERROR, HTTP_TIMEOUT, HTTP_TRANSPORT_ERROR
from tracelock.runtime.pipeline.pipeline import Pipeline
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
    __slots__ = ("lib", "options", "stream", "wrapped")

    def __init__(self, lib: Any, wrapped: Any, options: Options, stream: type[Any]) -> None:
        _register()
        self.lib = lib
        self.wrapped = wrapped
        self.options = options
        #: The library's byte-stream class the recorded body is given back through.
        self.stream = stream

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


class SyncCore(_Core):
    """``handle_request`` of a capturing ``BaseTransport``."""

    __slots__ = ()

    @door
    def send(self, request: Any) -> Any:
        pipeline = current_pipeline()
        if pipeline is None:
            if self.options.pass_through:
                return self.wrapped.handle_request(request)
            raise _outside(request)
        content = request.read()
        api: list[str | None] = [None]

        def perform() -> dict[str, Any]:
            try:
                response = self.wrapped.handle_request(request)
            except Exception as exc:
                raise failure_of(exc) from None
            try:
                chunks, error = _collect(iter(response.stream))
            finally:
                response.close()
            return self._result(response, api[0], _replay(chunks, error))

        step = self._step(pipeline, request, content, perform)
        api[0] = step.name if step.kind == "llm" else None
        try:
            result: dict[str, Any] = pipeline.run(step)
        except StepError as error:
            raise self._failure(error, request) from None
        return self._response(result, request, self.stream(self, result, request))


class AsyncCore(_Core):
    """``handle_async_request`` of a capturing ``AsyncBaseTransport``. The pipeline runs in
    a worker thread (it blocks on journal syncs); the wrapped transport runs on the
    caller's event loop."""

    __slots__ = ()

    async def send(self, request: Any) -> Any:
        pipeline = current_pipeline()
        if pipeline is None:
            if self.options.pass_through:
                return await self.wrapped.handle_async_request(request)
            raise _outside(request)
        content = await request.aread()
        loop = asyncio.get_running_loop()
        api: list[str | None] = [None]

        async def exchange() -> dict[str, Any]:
            with runtime_code():  # the pipeline's EXECUTE, run on the caller's loop
                try:
                    response = await self.wrapped.handle_async_request(request)
                except Exception as exc:
                    raise failure_of(exc) from None
                chunks: list[bytes] = []
                error: Exception | None = None
                try:
                    async for chunk in response.stream:
                        chunks.append(chunk)
                except Exception as exc:
                    error = exc
                finally:
                    await response.aclose()
                return self._result(response, api[0], _replay(chunks, error))

        def perform() -> dict[str, Any]:
            return asyncio.run_coroutine_threadsafe(exchange(), loop).result()

        step = self._step(pipeline, request, content, perform)
        api[0] = step.name if step.kind == "llm" else None
        try:
            with runtime_code():  # a door's own work: the thread is the runtime's
                result: dict[str, Any] = await asyncio.to_thread(pipeline.run, step)
        except StepError as error:
            raise self._failure(error, request) from None
        return self._response(result, request, self.stream(self, result, request))


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
