"""Shared parts of the tests of integrations inside an awaited run (``await runtime.arun``):
a heartbeat coroutine on the caller's loop, and an observer noting where each step ran.

The heartbeat ticks every 20 ms while the run is awaited; an effect notes the count when it
starts and ends: ticks in between happened during the effect, which a blocked loop prevents."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

TICK_S = 0.02
#: The slow effect of these tests (seconds), and the fewest ticks expected during it: 15
#: fit, 5 leave room for a busy machine. None at all happen while the loop is blocked.
SLOW_S = 0.3
MIN_TICKS = 5


class Heartbeat:
    """Counts ticks of ``TICK_S`` on the loop that runs it, between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.ticks += 1

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class Effect:
    """Where one slow effect ran: its loop and thread, and the heartbeat's count at its start
    and end."""

    def __init__(self, beat: Heartbeat) -> None:
        self.beat = beat
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.start = self.end = -1

    async def slow(self) -> None:
        self.loop, self.thread = asyncio.get_running_loop(), threading.current_thread()
        self.start = self.beat.ticks
        await asyncio.sleep(SLOW_S)
        self.end = self.beat.ticks

    @property
    def ticks(self) -> int:
        return self.end - self.start


class StepThreads:
    """A run observer noting the thread each step entered the pipeline on, and (with a
    heartbeat) the count of ticks while each step was in the pipeline. ``ended`` is set
    when a step named ``watch`` leaves the pipeline."""

    def __init__(self, beat: Heartbeat | None = None, watch: str | None = None) -> None:
        self.threads: dict[int, str] = {}
        self.ticks: dict[int, int] = {}
        self.beat = beat
        self.watch = watch
        self.ended = threading.Event()

    def run_started(self, run: Any, agent: str) -> None:
        pass

    def step_started(self, run: Any, step: int, request: Any) -> None:
        self.threads[step] = threading.current_thread().name
        if self.beat is not None:
            self.ticks[step] = -self.beat.ticks

    def step_ended(self, run: Any, step: int, request: Any, effect: Mapping[str, Any] | None) -> None:
        if self.beat is not None:
            self.ticks[step] += self.beat.ticks
        if request.name == self.watch:
            self.ended.set()

    def run_ended(self, run: Any, end: Mapping[str, Any]) -> None:
        pass


def record_then_replay(
    runtime: Any, agent: Any, input: Any, beat: Heartbeat, between: Any
) -> tuple[asyncio.AbstractEventLoop, Any, Any]:
    """On a new loop with ``beat`` ticking: ``await runtime.arun(agent, input)``, then
    ``between()`` (stop the server: the replay must need nothing of it), then
    ``await runtime.areplay``. Returns the loop, the run's result and the replay's report."""

    async def main() -> tuple[asyncio.AbstractEventLoop, Any, Any]:
        beat.start()
        try:
            result = await runtime.arun(agent, input)
            between()
            report = await runtime.areplay(result.run_id, agent)
        finally:
            await beat.stop()
        return asyncio.get_running_loop(), result, report

    return asyncio.run(main())
