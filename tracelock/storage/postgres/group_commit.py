"""Group commit for one PostgreSQL store handle: concurrent appends share transactions.

A commit costs a round trip and, for a durable append, a wait for its WAL flush: sharing
commits makes a handle's appends cheaper than one commit each. Every append (from any
thread, or a coroutine's ``append_async``) becomes a :class:`Request` in one queue, and one
caller at a time, the leader, commits everything queued so far in one transaction, then
wakes the callers it covered. Appends that arrive during a commit ride on the next one.
Nobody waits on a timer.

Coroutines never block their event loop: their requests are led by a worker thread (one
per handle, started on first use) and their futures are resolved on their loop with
``call_soon_threadsafe``. Within one handle, requests are committed in the order they were
queued, so call order is ``seq`` order.

Held appends (:meth:`CommitQueue.hold`) wait in the process instead of committing: the
next request queued, or a flush, carries them in front of itself into its transaction, with
the timestamps they got when they were held. That turns a run's entries of effects that
cannot change the world into a part of its next commit instead of commits of their own. A
held append that fails (its run ended, its lease was lost) fails the next append of its own
run, whichever caller's commit carried it: in a process running several runs, one run's
error never surfaces in another's.

The queue knows nothing about SQL: the store passes the function that commits a batch
(:meth:`tracelock.storage.postgres.store.PostgresStore._commit_batch`), which sets each
request's ``result`` or ``error``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

__all__ = ["CommitQueue", "Request"]

#: An upper bound on the items of one transaction, so that one batch stays a bounded
#: amount of work however many callers pile up behind a slow commit.
MAX_BATCH_ITEMS = 2048


class Request:
    """One append call: its items (run, kind, payload, meta, new_run), their prepared
    payload bytes, whether its caller waits for durability, its timestamp, and once
    committed its entries or its error. A request without items and ``durable`` only waits
    for what was committed before it to be durable."""

    __slots__ = ("done", "durable", "error", "future", "held", "items", "loop", "prepared", "result", "single", "ts")

    def __init__(self, items: Sequence[Any], prepared: list[Any], ts: int = 0, *, durable: bool = True) -> None:
        self.items = items
        self.prepared = prepared
        self.durable = durable
        self.ts = ts
        self.result: list[Any] | None = None
        self.error: BaseException | None = None
        self.done = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future[Any] | None = None
        self.single = False
        #: Held (:meth:`CommitQueue.hold`): nobody waits for this request itself.
        self.held = False

    def outcome(self) -> list[Any]:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


#: How many coroutines a commit wakes per turn of their event loop: what each does next
#: is spread over several turns, so that a commit covering hundreds of runs never holds the
#: loop, and what else it serves, for all of them at once.
WAKE_SLICE = 16


def _settle_futures(loop: asyncio.AbstractEventLoop, requests: list[Request], start: int) -> None:
    end = start + WAKE_SLICE
    for request in requests[start:end]:
        _settle_future(request)
    if end < len(requests):
        loop.call_soon(_settle_futures, loop, requests, end)


def _settle_future(request: Request) -> None:
    future = request.future
    assert future is not None
    if future.done():  # cancelled by its task: the entries are committed all the same
        return
    try:
        result = request.outcome()
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result[0] if request.single else result)


class CommitQueue:
    """The queue and its leader election (see the module docstring).

    ``commit(batch)`` must set ``result`` or ``error`` on every request of ``batch``; what
    it raises is given to every request of the batch it did not settle. ``transactions``
    and ``appends`` count the batches and the requests: their ratio shows how many appends
    shared each transaction.
    """

    def __init__(self, commit: Callable[[list[Request]], None], *, name: str = "tracelock-pg-commit") -> None:
        self._commit = commit
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Request] = []
        self._held: list[Request] = []
        #: Errors of held requests, by run, until that run's next append raises them.
        self._held_errors: dict[str, BaseException] = {}
        self._leading = False
        self._executor: ThreadPoolExecutor | None = None
        self.transactions = 0
        self.appends = 0

    # -- entry points ------------------------------------------------------------------
    def submit(self, request: Request, clock: Callable[[], int]) -> list[Any]:
        """Queue ``request`` and return its entries once the transaction holding them has
        committed. ``clock`` sets the request's timestamp under the queue's lock, so that
        timestamps never go backwards along the queue (as ``seq`` does not)."""
        with self._cond:
            self._raise_held_error_locked(request)
            request.ts = clock()
            self.appends += 1
            self._push_locked(request)
            lead = self._wait_locked(request)
        if lead:
            self._lead(until=request)
        return request.outcome()

    def hold(self, request: Request, clock: Callable[[], int], window_ms: int) -> int:
        """Keep ``request`` in the process until the next request is queued or
        :meth:`flush` runs, and return its timestamp; commit it (with what is held) at once
        instead when the oldest held request is older than ``window_ms`` by ``clock``, so
        that a run of slow steps never keeps more than its last entry uncommitted."""
        with self._cond:
            self._raise_held_error_locked(request)
            request.ts = clock()
            self.appends += 1
            if not self._held or request.ts - self._held[0].ts <= window_ms:
                request.held = True
                self._held.append(request)
                return request.ts
            self._push_locked(request)
            if asyncio._get_running_loop() is not None:
                # Never block an event loop on a commit nobody needs to wait for: the
                # worker commits it (an error goes to the run's next append, as when held).
                request.held = True
                start = not self._leading
                self._leading = True
                lead = False
            else:
                start = False
                lead = self._wait_locked(request)
        if start:
            self._worker().submit(self._lead, None)
        if request.held:
            return request.ts
        if lead:
            self._lead(until=request)
        request.outcome()
        return request.ts

    def flush(self, barrier: Request | None = None) -> None:
        """Commit the held requests, if any, durably (the error of one that fails goes to
        the next append of its run); with none held, commit ``barrier`` (an empty durable
        request: what was committed before it becomes durable), if given, and raise its
        error."""
        with self._cond:
            if self._held:
                last = self._held[-1]
                last.held = False  # its caller, this one, now waits for it
                last.durable = True
                self._held.pop()
            elif barrier is not None:
                last = barrier
            else:
                return
            self._push_locked(last)
            lead = self._wait_locked(last)
        if lead:
            self._lead(until=last)
        if last is barrier:
            last.outcome()  # the wait for durability failed: the caller learns it
        elif last.error is not None:
            with self._cond:
                self._note_held_error_locked(last)

    def flush_async(self, clock: Callable[[], int], *, pending: bool = False) -> asyncio.Future[Any]:
        """:meth:`flush` for a coroutine of the running loop: an empty durable request
        queued behind the held ones carries them; its future resolves once they committed
        (an error of a held one goes to the next append of its run, as with :meth:`flush`).
        ``pending``: commits not yet known durable wait for one too, held entries or not."""
        with self._cond:
            held = bool(self._held)
        if not held and not pending:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future
        return self.submit_async(Request((), []), clock, single=False)

    def _push_locked(self, request: Request) -> None:
        """Queue ``request`` behind the held requests, which it carries (under the lock)."""
        if self._held:
            self._queue += self._held
            self._held = []
        self._queue.append(request)

    def _raise_held_error_locked(self, request: Request) -> None:
        """Raise (and forget) the error a held append of one of ``request``'s runs met."""
        errors = self._held_errors
        if errors:
            for item in request.items:
                error = errors.pop(item[0], None)
                if error is not None:
                    raise error

    def _note_held_error_locked(self, request: Request) -> None:
        assert request.error is not None
        for item in request.items:
            self._held_errors.setdefault(item[0], request.error)

    def _wait_locked(self, request: Request) -> bool:
        """Wait (under the lock) while another caller leads and ``request`` is not done;
        True: the caller is now the leader and must lead."""
        while not request.done and self._leading:
            self._cond.wait()
        if request.done:
            return False
        self._leading = True
        return True

    def submit_async(
        self, request: Request, clock: Callable[[], int], *, single: bool
    ) -> asyncio.Future[Any]:
        """Queue ``request`` for a coroutine of the running loop: the returned future
        resolves (on that loop) once it is committed; the loop is never blocked by the
        commit. ``single``: the future's value is the one entry, not the list."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        request.loop = loop
        request.future = future
        request.single = single
        with self._cond:
            try:
                self._raise_held_error_locked(request)
            except BaseException as exc:
                future.set_exception(exc)
                return future
            request.ts = clock()
            self.appends += 1
            self._push_locked(request)
            start = not self._leading
            if start:
                self._leading = True
        if start:
            self._worker().submit(self._lead, None)
        return future

    def close(self) -> None:
        """Commit what is queued (waiting for a commit under way), then stop the worker."""
        with self._cond:
            while self._leading:
                self._cond.wait()
            self._queue += self._held
            self._held = []
            lead = bool(self._queue)
            if lead:
                self._queue[-1].durable = True
                self._leading = True
        if lead:
            self._lead(until=None, handing_over=False)
        with self._cond:
            while self._leading:
                self._cond.wait()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    # -- the leader --------------------------------------------------------------------
    def _worker(self) -> ThreadPoolExecutor:
        with self._cond:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            return self._executor

    def _take(self) -> list[Request]:
        """The requests of the next transaction, oldest first (called under the lock)."""
        count = 0
        taken = 0
        for request in self._queue:
            if taken and count + len(request.items) > MAX_BATCH_ITEMS:
                break
            count += len(request.items)
            taken += 1
        batch = self._queue[:taken]
        del self._queue[:taken]
        return batch

    def _lead(self, until: Request | None, handing_over: bool = True) -> None:
        """Commit batches while leading. A thread leader (``until`` set) leads until its
        own request is done, then hands the lead to a waiting thread, or to the worker when
        only coroutines' requests are left; the worker (``until`` None) leads until the
        queue is empty or a thread is waiting to take over."""
        while True:
            with self._cond:
                batch = self._take()
            if batch:
                self._run(batch)
            with self._cond:
                finished = until is None or until.done
                # A thread's request still queued means that thread waits to lead.
                thread_waits = any(request.future is None and not request.held for request in self._queue)
                if not self._queue or (finished and thread_waits and handing_over):
                    self._leading = False
                    self._cond.notify_all()
                    return
                if not finished or until is None:
                    continue
            # A thread whose request is done, and only coroutines' requests are left.
            self._worker().submit(self._lead, None)
            return

    def _run(self, batch: list[Request]) -> None:
        self.transactions += 1
        try:
            self._commit(batch)
        except BaseException as exc:
            for request in batch:
                if request.result is None and request.error is None:
                    request.error = exc
        for request in batch:
            if request.error is None and request.result is None:
                request.error = RuntimeError("the commit settled no outcome for this append")
        with self._cond:
            for request in batch:
                request.done = True
                if request.held and request.error is not None:
                    self._note_held_error_locked(request)
            self._cond.notify_all()
        by_loop: dict[asyncio.AbstractEventLoop, list[Request]] = {}
        for request in batch:
            if request.future is not None and request.loop is not None:
                by_loop.setdefault(request.loop, []).append(request)
        for loop, settled in by_loop.items():
            with suppress(RuntimeError):  # a closed loop: nobody awaits the futures any more
                loop.call_soon_threadsafe(_settle_futures, loop, settled, 0)
