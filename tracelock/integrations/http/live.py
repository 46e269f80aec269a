"""A live server-sent-event stream handed to the caller event by event while it is recorded.

The step of a streamed response stays in the pipeline's EXECUTE (in its own thread, see
:func:`start`) until the stream ends, the caller closes it, or it breaks off; then its
result (the events read, in order) is recorded and the caller continues. Meanwhile the
caller reads: each read pulls the wrapped transport's next bytes and gives back the events
they complete, so nothing is read ahead of the caller.

Steps are journaled in step order: another step of the run first finishes the open stream
(:meth:`LiveStream.before_step` reads the rest, which the caller then reads from memory).
An ``async`` stream can only be read on its event loop: a step started from another thread
has it read there, and a step bridged on that loop (a captured request, an awaited ``ctx``
door, a hooked tool call) reads it while it waits; a step started on the loop outside a
bridged call (``ctx.now()`` in an ``async`` agent), which cannot wait for the loop, is
refused with ``CaptureStreamOpenError``. At the end of the run a stream still open is recorded as closed by the caller.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from tracelock.integrations.http.errors import CaptureStreamOpenError
from tracelock.integrations.http.exchange import StreamRecorder, error_doc
from tracelock.runtime import bridge
from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.strict.guard import runtime_code

__all__ = ["LiveStream", "AsyncLiveStream", "futures", "offer", "start"]


def futures() -> tuple[concurrent.futures.Future[Any], concurrent.futures.Future[Any]]:
    """``(outcome, ready)`` for :func:`start`."""
    return concurrent.futures.Future(), concurrent.futures.Future()


def start(
    pipeline: Pipeline,
    request: Any,
    outcome: concurrent.futures.Future[Any],
    ready: concurrent.futures.Future[Any],
) -> None:
    """Run ``request``'s step in a thread of its own: ``outcome`` gets the step's result
    or exception; ``ready`` gets a live stream as soon as the step has one to give the
    caller (:func:`offer`), or ``None`` once the step is over."""
    context = contextvars.copy_context()

    def work() -> None:
        try:
            with runtime_code():
                value = pipeline.run(request)
        except BaseException as exc:  # given to the caller's thread, which raises it
            outcome.set_exception(exc)
        else:
            outcome.set_result(value)
        offer(ready, None)

    _STEPS.submit(context.run, work)


#: Not the event loop's default executor: asyncio.run waits for that one's threads, and a
#: stream left open at the end of an async agent is finished after it returns. A worker is
#: busy only while its step runs (a stream's, until the caller finishes or closes it).
_STEPS = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="tracelock-http-step")


def offer(ready: concurrent.futures.Future[Any], value: Any) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # the first offer wins
        ready.set_result(value)


class _Live:
    """What the sync and async streams share: the recording and the hand-over of the
    result to the step's thread."""

    def __init__(self, pipeline: Pipeline, recorder: StreamRecorder, response: Any) -> None:
        self.pipeline = pipeline
        self.recorder = recorder
        self.response = response
        #: The events read from the network that the caller has not taken yet.
        self.buffer: collections.deque[bytes] = collections.deque()
        self.finished = False
        #: How many events the caller got.
        self.taken = 0
        #: The result document, for the step's thread (which waits on it in EXECUTE).
        self.result: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        #: The step's own outcome, set by :func:`start`.
        self.outcome: concurrent.futures.Future[Any] | None = None
        self.raise_failure: Callable[[BaseException], BaseException] = lambda exc: exc
        self.reported = False

    def feed(self, raw: bytes) -> None:
        self.buffer.extend(event.encode("utf-8") for event in self.recorder.feed(raw))

    def take(self) -> bytes | None:
        if not self.buffer:
            return None
        self.taken += 1
        return self.buffer.popleft()

    def finish(self, error: Exception | None, *, closed: bool = False) -> None:
        self.finished = True
        with self.pipeline.lock:
            if self.pipeline.open_stream is self:
                self.pipeline.open_stream = None
        doc = None if error is None else error_doc(error)
        fed = len(self.recorder.chunks)
        result = self.recorder.finish(doc, closed=closed, taken=self.taken)
        # An event the stream did not finish is recorded, so the caller gets it too (as on replay).
        self.buffer.extend(chunk.encode("utf-8") for chunk in result["chunks"][fed:])
        self.result.set_result(result)

    def before_step(self) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        raise NotImplementedError

    def settled(self) -> BaseException | None:
        """Wait until the step is recorded; the exception the caller should get (once), if
        the step failed after its stream ended (a budget that needs the usage it lacks)."""
        assert self.outcome is not None
        try:
            self.outcome.result()
        except BaseException as exc:
            return self.report(exc)
        return None

    def recorded(self) -> None:
        """Wait until the step is recorded (its failure, if any, is left for the caller)."""
        assert self.outcome is not None
        concurrent.futures.wait([self.outcome])

    def report(self, exc: BaseException) -> BaseException | None:
        if self.reported:
            return None
        self.reported = True
        return self.raise_failure(exc)


class LiveStream(_Live):
    """The body of a live response, for a sync client."""

    def __init__(self, pipeline: Pipeline, recorder: StreamRecorder, response: Any, stream_error: Callable[[dict[str, Any]], Exception | None]) -> None:
        super().__init__(pipeline, recorder, response)
        self._lock = threading.RLock()
        self._raw = iter(response.stream)
        self._stream_error = stream_error

    def _pull(self) -> None:
        with runtime_code():
            try:
                raw = next(self._raw)
            except StopIteration:
                self._end(None)
                return
            except Exception as exc:
                self._end(exc)
                return
        self.feed(raw)

    def _end(self, error: Exception | None, *, closed: bool = False) -> None:
        try:
            with runtime_code():
                self.response.close()
        finally:
            self.finish(error, closed=closed)

    def __iter__(self) -> Iterator[bytes]:
        while True:
            with self._lock:
                while not self.buffer and not self.finished:
                    self._pull()
                event = self.take()
            if event is None:
                break
            yield event
        failure = self.settled()
        if failure is not None:
            raise failure
        error = self._stream_error(self.result.result())
        if error is not None:
            raise error

    def close(self) -> None:
        with self._lock:
            if not self.finished:
                self.buffer.clear()
                self._end(None, closed=True)
        failure = self.settled()
        if failure is not None:
            raise failure

    def before_step(self) -> None:
        with self._lock:
            while not self.finished:
                self._pull()
        self.recorded()

    def abandon(self) -> None:
        with self._lock:
            if not self.finished:
                self.buffer.clear()
                self._end(None, closed=True)
        self.recorded()


class AsyncLiveStream(_Live):
    """The body of a live response, for an async client (read on its event loop)."""

    def __init__(self, pipeline: Pipeline, recorder: StreamRecorder, response: Any, stream_error: Callable[[dict[str, Any]], Exception | None]) -> None:
        super().__init__(pipeline, recorder, response)
        self.loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        self._raw = aiter(response.stream)
        self._stream_error = stream_error

    async def _pull(self) -> None:
        with runtime_code():
            try:
                raw = await anext(self._raw)
            except StopAsyncIteration:
                await self._end(None)
                return
            except Exception as exc:
                await self._end(exc)
                return
        self.feed(raw)

    async def _end(self, error: Exception | None, *, closed: bool = False) -> None:
        try:
            with runtime_code():
                await self.response.aclose()
        finally:
            self.finish(error, closed=closed)

    async def _settled(self) -> BaseException | None:
        assert self.outcome is not None
        try:
            await asyncio.wrap_future(self.outcome)
        except BaseException as exc:
            return self.report(exc)
        return None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            async with self._lock:
                while not self.buffer and not self.finished:
                    await self._pull()
                event = self.take()
            if event is None:
                break
            yield event
        failure = await self._settled()
        if failure is not None:
            raise failure
        error = self._stream_error(self.result.result())
        if error is not None:
            raise error

    async def aclose(self) -> None:
        async with self._lock:
            if not self.finished:
                self.buffer.clear()
                await self._end(None, closed=True)
        failure = await self._settled()
        if failure is not None:
            raise failure

    async def _drain(self) -> None:
        async with self._lock:
            while not self.finished:
                await self._pull()

    def before_step(self) -> None:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop and bridge.active():
            # A bridged step on the stream's own loop (a captured request, a hooked tool
            # call, an awaited ``ctx`` door): the rest is read on the loop while it waits.
            bridge.wait(self._drain())
            self._recorded_on_loop()
            return
        if here is self.loop:
            raise CaptureStreamOpenError(
                "a step was started while a captured async stream is still open: read the stream "
                "to its end (or close it) first; steps are journaled in order, and an async stream "
                "can only be read on its event loop"
            )
        if self.loop.is_closed():
            self.abandon()
            return
        asyncio.run_coroutine_threadsafe(self._drain(), self.loop).result()
        self.recorded()

    def abandon(self) -> None:
        """Record the stream as closed where the caller left it (the event loop may be gone)."""
        if not self.finished:
            self.buffer.clear()
            self.finish(None, closed=True)
            if self.loop.is_running():
                asyncio.run_coroutine_threadsafe(self.response.aclose(), self.loop)
        self._recorded_on_loop()

    def _recorded_on_loop(self) -> None:
        """:meth:`recorded`, awaited when called in a bridged call (the loop goes on)."""
        assert self.outcome is not None
        if bridge.active():
            bridge.wait(_settled(self.outcome))
        else:
            self.recorded()


async def _settled(outcome: concurrent.futures.Future[Any]) -> None:
    """Wait until ``outcome`` is set, whatever it holds (it is read from ``outcome``)."""
    wrapped = asyncio.wrap_future(outcome)
    await asyncio.wait([wrapped])
    if not wrapped.cancelled():
        wrapped.exception()  # marked retrieved: the caller gets it from ``outcome`` itself
