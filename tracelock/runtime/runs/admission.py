"""How many awaited runs one event loop executes at once: as many as keep it responsive.

Every awaited run (``arun``, ``aresume``, ``areplay``, ``arecover``) does its CPU work on
the caller's loop between its waits. An asyncio loop runs what is ready in arrival order,
so once more runs are ready than the loop can execute, every task of the loop (the
service's other requests, its health checks) waits behind all of them: the loop's lag
grows with the number of runs in flight, while throughput stays where the CPU caps it.

So a runtime asked to (``Runtime(loop_lag_ms=...)``; by default every run starts at
once) admits awaited runs through a gate per loop, whose limit follows the loop's lag, measured the way any task of the loop sees it: a probe scheduled every
:data:`PROBE_S` seconds while runs are in flight, and how late it runs. Judged over the
last :data:`WINDOW` probes, so that one late wake-up (another process took the CPU, a
garbage collection) moves nothing: when most of them ran later than the target
(``Runtime(loop_lag_ms=...)``), the limit shrinks by a quarter; when all of them ran well
within it and callers wait, it grows by an eighth. A caller over the limit waits for a free place (an
``await`` on a future, first come first served), holding no thread and nothing of its run
yet. A run started from inside an admitted run (in its task) is admitted at once, so that
nesting never waits for a place its own parent holds.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Admission"]

T = TypeVar("T")

#: How often the lag is probed while runs are in flight (seconds), and over how many of
#: the last probes it is judged.
PROBE_S = 0.01
WINDOW = 8
#: The limit's bounds and its first value.
MIN_LIMIT = 4
MAX_LIMIT = 65_536
FIRST_LIMIT = 32

_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("tracelock_admitted", default=False)


class _Gate:
    """One loop's gate (see the module)."""

    __slots__ = ("active", "lags", "limit", "loop", "probing", "target_s", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop, target_s: float) -> None:
        self.loop = loop
        self.target_s = target_s
        self.limit = FIRST_LIMIT
        self.active = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.probing = False
        self.lags: collections.deque[float] = collections.deque(maxlen=WINDOW)

    async def enter(self) -> None:
        if self.active < self.limit and not self.waiting:
            self.active += 1
        else:
            place: asyncio.Future[None] = self.loop.create_future()
            self.waiting.append(place)
            try:
                await place  # the place is ours once set (``active`` counts it already)
            except asyncio.CancelledError:
                if place.done() and not place.cancelled():
                    self.leave()  # admitted and cancelled in the same turn
                else:
                    self.waiting.remove(place)
                raise
        if not self.probing:
            self.probing = True
            self.loop.call_later(PROBE_S, self._probe, self.loop.time() + PROBE_S)

    def leave(self) -> None:
        self.active -= 1
        self._admit()

    def _admit(self) -> None:
        while self.waiting and self.active < self.limit:
            place = self.waiting.popleft()
            if not place.cancelled():
                self.active += 1
                place.set_result(None)

    def _probe(self, due: float) -> None:
        now = self.loop.time()
        lags = self.lags
        lag = now - due
        lags.append(lag)
        if lag > WINDOW * PROBE_S:
            # Held for longer than a whole window: the probes that could not run were late.
            self.limit = max(MIN_LIMIT, self.limit - max(1, self.limit // 4))
            lags.clear()
        elif len(lags) == WINDOW:
            late = sum(1 for lag in lags if lag > self.target_s)
            if late > WINDOW // 2:
                self.limit = max(MIN_LIMIT, self.limit - max(1, self.limit // 4))
                lags.clear()
            elif max(lags) < self.target_s / 2 and self.waiting and self.active >= self.limit:
                self.limit = min(MAX_LIMIT, self.limit + max(1, self.limit // 8))
                lags.clear()
                self._admit()
        if self.active or self.waiting:
            self.loop.call_later(PROBE_S, self._probe, now + PROBE_S)
        else:
            self.probing = False
            lags.clear()


class Admission:
    """A runtime's gates, one per event loop it serves (dropped with the loop).
    ``lag_ms``: the loop lag to keep under; None admits every run at once."""

    def __init__(self, lag_ms: float | None) -> None:
        if lag_ms is not None and lag_ms <= 0:
            raise ValueError("loop_lag_ms is a positive number of milliseconds, or None")
        self._target_s = None if lag_ms is None else lag_ms / 1000
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gate] = weakref.WeakKeyDictionary()

    def limit(self) -> int | None:
        """The running loop's current limit (None: no gate, or none made yet)."""
        gate = self._gates.get(asyncio.get_running_loop())
        return None if gate is None else gate.limit

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Await ``call()`` once the running loop's gate admits it."""
        if self._target_s is None or _INSIDE.get():
            return await call()
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = _Gate(loop, self._target_s)
        await gate.enter()
        token = _INSIDE.set(True)
        try:
            return await call()
        finally:
            _INSIDE.reset(token)
            gate.leave()
