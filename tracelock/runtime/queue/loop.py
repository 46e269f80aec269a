"""The event loop a queue worker drives its ``async def`` agents' runs on.

One loop, in one thread, per worker: every async run the worker has in flight is a task of
it, driven by the runtime's own code through :func:`tracelock.runtime.bridge.bridged`, so
that a run waiting (on a tool, a model, a durable append, a sleep) holds no thread. The
worker's blocking queue calls made from those runs (releasing a lease, flushing the
directory store's index) go to a small thread pool of the loop's, never onto the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tracelock.runtime import bridge

__all__ = ["WorkerLoop"]

T = TypeVar("T")

#: Threads for the blocking queue calls of the loop's runs: a lease release is one short
#: transaction, so a few threads serve any number of runs.
_IO_THREADS = 4


class WorkerLoop:
    """An event loop running in its own (daemon) thread until :meth:`close`."""

    def __init__(self, name: str = "tracelock-worker-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._io = concurrent.futures.ThreadPoolExecutor(_IO_THREADS, thread_name_prefix="tracelock-worker-io")
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # What is still in flight was handed back (its token is void): cancelled, it
            # stops where it is, as a crash would, and its appends are refused meanwhile.
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))  # tracelock: allow TL-CONC-002 -- waits for abandoned runs to unwind; their results are dropped
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def start(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` as a task of the loop; cancelling the future cancels the task."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # tracelock: allow TL-CONC-002 -- one independent run per task; no run depends on another's order

    def blocking(self, func: Callable[..., T], /, *args: Any) -> T:
        """``func(*args)``: in the loop's I/O threads when called from a run bridged on a
        loop (its greenlet waits, the loop goes on), else right here."""
        if bridge.active():
            return bridge.wait(bridge.in_thread(func, *args, executor=self._io))
        return func(*args)

    def close(self, *, wait: bool) -> None:
        """Stop the loop (its unfinished tasks are cancelled) and, with ``wait``, the thread
        (only when nothing runs on it any more: a task stuck in blocking code would hold it)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        if wait:
            self._thread.join()
        self._io.shutdown(wait=False, cancel_futures=True)
