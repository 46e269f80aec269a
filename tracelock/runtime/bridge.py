"""One step pipeline for sync and async callers: the runtime's blocking code, driven by an
event loop.

The runtime is written once, as plain functions that block where they wait: a durable
journal append, an LLM provider, a tool, a sleep, another owner's lease. An ``async``
caller does not get a second copy of that code: :func:`bridged` runs the same function in a
*bridge greenlet*, and every place that waits asks :func:`active` whether it runs in one.
If it does, it hands the loop an awaitable through :func:`wait`, which suspends the greenlet
(and only it: the loop goes on with other tasks) until the awaitable is done, and resumes
it with the result or the exception. Otherwise it blocks as it always did.

So ``await runtime.arun(agent)`` is ``runtime.run(agent)`` in a bridge greenlet: the
journal's durable appends become ``Store.append_async`` (runs of one loop share commits),
an ``async`` provider or tool is awaited on the caller's loop, a sync one runs in a worker
thread, and a sleep is ``asyncio.sleep``.

Why greenlets (the ``greenlet`` package, the one SQLAlchemy's asyncio support is built on):
a function that waits in the middle of its call stack can be suspended only if its stack can
be put aside, which a coroutine can do solely for ``async def`` frames. Rewriting the
pipeline as coroutines would make every sync call pay for an event loop, or keep two copies
of the seven phases. A greenlet switch costs about a microsecond; the greenlets are reused
(one per concurrent bridged call), since making one costs several.

Rules for code running in a bridge greenlet: never hold a ``threading`` lock across a
:func:`wait` (another greenlet of the same thread could block on it forever), and keep
what runs between two waits short (it runs on the loop's thread).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import greenlet

__all__ = ["active", "bridged", "in_thread", "wait"]

T = TypeVar("T")


class _Done:
    """What a bridge greenlet hands back when its call is over."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any, error: BaseException | None) -> None:
        self.value = value
        self.error = error


class _Bridge(greenlet.greenlet):
    """A reusable greenlet serving bridged calls, one at a time."""


def _serve() -> None:
    me = greenlet.getcurrent()
    job = _parent(me).switch(None)  # started: wait for the first call
    while True:
        func, args, kwargs = job
        try:
            done = _Done(func(*args, **kwargs), None)
        except greenlet.GreenletExit:
            return  # collected while suspended: nothing waits for this call any more
        except BaseException as exc:  # handed to the awaiting caller
            done = _Done(None, exc)
        del func, args, kwargs, job
        job = _parent(me).switch(done)


def _parent(worker: greenlet.greenlet) -> greenlet.greenlet:
    parent = worker.parent
    assert parent is not None  # a bridge greenlet always has the caller that drives it
    return parent


_idle = threading.local()


def _take() -> _Bridge:
    pool: list[_Bridge] | None = getattr(_idle, "pool", None)
    if pool is None:
        pool = _idle.pool = []
    current = greenlet.getcurrent()
    if pool:
        worker = pool.pop()
        worker.parent = current
        return worker
    worker = _Bridge(_serve, current)
    worker.switch()
    return worker


def active() -> bool:
    """Whether the calling code runs in a bridge greenlet: its waits may :func:`wait`."""
    return type(greenlet.getcurrent()) is _Bridge


def wait(awaitable: Awaitable[T]) -> T:
    """Suspend the calling bridge greenlet until ``awaitable`` is done on the loop that runs
    it; return its result or raise its exception. Only where :func:`active` is true."""
    if type(awaitable) is asyncio.Future and awaitable.done():
        done: T = awaitable.result()  # done already (a durable append that was covered)
        return done
    current = greenlet.getcurrent()
    if type(current) is not _Bridge:
        raise RuntimeError("tracelock.runtime.bridge.wait() outside a bridged call")
    result: T = _parent(current).switch(awaitable)
    return result


async def bridged(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call ``func(*args, **kwargs)`` on this loop's thread so that its waits await here.

    The call runs in the calling task's context (its context variables are the task's, and
    what it sets the task sees), as the code of an ``await`` would."""
    worker = _take()
    worker.gr_context = greenlet.getcurrent().gr_context
    got = worker.switch((func, args, kwargs))
    while type(got) is not _Done:
        try:
            awaited = await got
        except BaseException as exc:  # a cancellation, or the awaitable's own failure
            got = worker.throw(exc)
        else:
            got = worker.switch(awaited)
    _release(worker)
    if got.error is not None:
        error = got.error
        del got
        raise error
    value: T = got.value
    return value


def _release(worker: _Bridge) -> None:
    worker.gr_context = None
    pool: list[_Bridge] = _idle.pool
    if len(pool) < 1024:
        pool.append(worker)


async def in_thread(func: Callable[..., T], /, *args: Any, executor: Any = None) -> T:
    """``func(*args)`` in a worker thread (``executor``, or the loop's default), in a copy
    of the calling context, so that what it reads of context variables is the caller's."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    return await loop.run_in_executor(executor, context.run, func, *args)
