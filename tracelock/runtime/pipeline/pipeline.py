"""The pipeline of one run: the entry every door calls."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import Any

from tracelock.core.canonical import dumps
from tracelock.runtime import bridge
from tracelock.runtime.errors import Diverged, StepError
from tracelock.runtime.pipeline.phases import live, receive
from tracelock.runtime.pipeline.recorded import added, answer, check_pending, diverge, judge_gather
from tracelock.runtime.pipeline.request import StepRequest
from tracelock.runtime.pipeline.state import RunState

__all__ = ["Pipeline"]


class Pipeline(RunState):
    """One run's step pipeline. :meth:`run` is the entry: a :class:`StepRequest` in, the
    step's result out (or the :class:`StepError` it ended with).

    A step the recording answers is matched and answered from it (replay, resume, a fork's
    prefix); a step whose intent was journaled but not its result is run again if its
    class allows (resume); every other step passes the seven phases live (record; in a
    replay it is a divergence: the recording does not have it).
    """

    __slots__ = ()

    def run(self, request: StepRequest, step: int | None = None) -> Any:
        """Take ``request`` through the pipeline as step ``step`` (numbered by RECEIVE when
        not given, as it is for a gather's members)."""
        if self.divergence is not None:
            raise Diverged(self.divergence)
        if step is None:
            self.finish_stream()
            step = receive(self)
        observer = self.env.observer
        if observer is None:
            return self._step(request, step)
        observer.step_started(self, step, request)
        try:
            return self._step(request, step)
        finally:
            observer.step_ended(self, step, request, self.effects.get(step))

    def _step(self, request: StepRequest, step: int) -> Any:
        recording = self.recording
        if recording is not None and (self.fork_before is None or step < self.fork_before):
            doc = recording.effects.get(step)
            if doc is not None:
                return answer(self, step, request, doc)
            if step in recording.pending and not self.replay_only:
                key = check_pending(self, step, request, recording.pending[step])
                return live(self, step, request, intent_written=True, key=key)
        if self.replay_only:
            added(self, step, request)
        return live(self, step, request)

    def gather(self, requests: list[StepRequest]) -> list[Any]:
        """Run several requests concurrently. Results come back in argument order; the
        order in which they completed is recorded, and replayed exactly.

        Against a recording, every member is judged before any of them runs, in argument
        order: the first member whose request differs is the divergence, and then a member
        count different from the recorded gather's."""
        if self.divergence is not None:
            raise Diverged(self.divergence)
        self.finish_stream()
        first = receive(self, len(requests))
        steps = list(range(first, first + len(requests)))
        outcomes: dict[int, tuple[bool, Any]] = {}
        recorded_order = None
        recording = self.recording
        if recording is not None:
            judge_gather(self, first, requests)
            if self.is_usable(first):
                recorded_order = recording.gather_orders.get(first)
        # A fork point inside a gather can leave the recorded order naming other members.
        if recorded_order is not None and sorted(recorded_order) == steps and all(self._is_recorded(step) for step in steps):
            for step in recorded_order:
                outcomes[step] = self._capture(step, requests[step - first])
            order = list(recorded_order)
        else:
            # Every member finishes (and is journaled) before gather returns or raises: a
            # member that suspends the run (approval) must not leave its siblings running
            # past the suspension. The lowest such step (argument order) is raised.
            members = list(zip(steps, requests, strict=True))
            if bridge.active():
                order, escaped = bridge.wait(self._on_loop(members, outcomes))
            else:
                order, escaped = self._on_threads(members, outcomes)
            if self.divergence is not None:
                raise Diverged(self.divergence)
            if escaped:
                raise escaped[min(escaped)]
        if self.journal is not None and not self.replay_only:
            self.journal.gather_order(first, order)
        results = []
        for step in steps:
            ok, value = outcomes[step]
            if not ok:
                raise value
            results.append(value)
        return results

    def _on_threads(
        self, members: list[tuple[int, StepRequest]], outcomes: dict[int, tuple[bool, Any]]
    ) -> tuple[list[int], dict[int, BaseException]]:
        """Run a gather's members on the gather pool; their completion order, and what
        escaped of each (a suspension, a divergence)."""
        pool = self.env.gather_pool
        futures = {pool.submit(self._capture, step, request): step for step, request in members}
        order: list[int] = []
        escaped: dict[int, BaseException] = {}
        for future in concurrent.futures.as_completed(futures):
            step = futures[future]
            try:
                outcomes[step] = future.result()
            except BaseException as exc:  # re-raised by gather, once every member is done
                escaped[step] = exc
                continue
            order.append(step)
        return order, escaped

    async def _on_loop(
        self, members: list[tuple[int, StepRequest]], outcomes: dict[int, tuple[bool, Any]]
    ) -> tuple[list[int], dict[int, BaseException]]:
        """:meth:`_on_threads` for a bridged run: each member a task of the caller's loop."""
        order: list[int] = []
        escaped: dict[int, BaseException] = {}

        def finished(step: int, task: asyncio.Future[tuple[bool, Any]]) -> None:
            if task.cancelled():
                escaped[step] = asyncio.CancelledError()
            elif (exc := task.exception()) is not None:
                escaped[step] = exc
            else:
                outcomes[step] = task.result()
                order.append(step)

        tasks = []
        for step, request in members:
            task = asyncio.ensure_future(bridge.bridged(self._capture, step, request))  # tracelock: allow TL-CONC-002 -- the completion order is recorded (gather.order) and replayed
            task.add_done_callback(functools.partial(finished, step))
            tasks.append(task)
        try:
            await asyncio.wait(tasks)  # tracelock: allow TL-CONC-002 -- the completion order is recorded (gather.order) and replayed
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)  # tracelock: allow TL-CONC-002 -- cancelled members end; nothing of them is answered
            raise
        return order, escaped

    def finish_stream(self) -> None:
        """Finish the response a caller is still reading (its step is in EXECUTE), so that
        the next step is numbered and journaled after it."""
        stream = self.open_stream
        if stream is not None:
            stream.before_step()

    def end_stream(self) -> None:
        """At the end of the agent: record a response still open as closed by the caller."""
        stream = self.open_stream
        if stream is not None:
            stream.abandon()

    def _capture(self, step: int, request: StepRequest) -> tuple[bool, Any]:
        try:
            return True, self.run(request, step)
        except StepError as exc:
            return False, exc

    def _is_recorded(self, step: int) -> bool:
        recording = self.recording
        if recording is None or (self.fork_before is not None and step >= self.fork_before):
            return False
        return step in recording.effects

    # -- what is recorded beside the steps --------------------------------------------
    def route(self, decision: dict[str, Any]) -> None:
        """Record a routing decision (against a recording: it must equal the recorded one)."""
        if self.divergence is not None:
            raise Diverged(self.divergence)
        position = len(self.routing)
        if self.recording is not None and self.fork_before is None:
            was = self.recording.routing
            if position < len(was):
                if dumps(was[position]) != dumps(decision):
                    diverge(
                        self,
                        {
                            "message": f"routing decision {position} differs from the recorded one",
                            "step": None,
                            "kind": "changed_routing",
                            "recorded": was[position],
                            "requested": decision,
                        },
                    )
                self.routing.append(decision)
                return
            if self.replay_only:
                diverge(
                    self,
                    {
                        "message": f"routing decision {position} was not recorded",
                        "step": None,
                        "kind": "added_routing",
                        "recorded": None,
                        "requested": decision,
                    },
                )
        self.routing.append(decision)
        if self.journal is not None:
            self.journal.route(decision)

    def patched(self, change_id: str) -> bool:
        """Whether the run follows the code path introduced by ``change_id``: a recorded run
        does when it recorded the marker; a new run does, and records it."""
        if self.divergence is not None:
            raise Diverged(self.divergence)
        recording = self.recording
        if recording is not None and self.fork_before is None:
            return change_id in recording.patches
        if self.journal is not None and change_id not in self.patches:
            self.journal.mark("patch", {"id": change_id})
        self.patches.add(change_id)
        return True

    def mark(self, kind: str, doc: dict[str, Any]) -> None:
        """Journal an informational entry (not an effect; not part of the fingerprint)."""
        if self.divergence is not None:
            raise Diverged(self.divergence)
        if self.journal is not None and not self.replay_only and not self._is_replaying_marks():
            self.journal.mark(kind, doc)

    def _is_replaying_marks(self) -> bool:
        # While a resumed run is still answered from its recording, its marks exist already.
        recording = self.recording
        return recording is not None and self.fork_before is None and self.next_step <= max(
            recording.effects, default=-1
        )
