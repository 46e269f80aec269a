"""The Runtime: the facade an application uses. It runs agents (:class:`Engine`) and
answers for recorded runs: replays them and recovers them after a crash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracelock.runtime.bridge import bridged
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.queue.backends import close_queue, existing_queue, queue_for
from tracelock.runtime.queue.submit import RunHandle, submit
from tracelock.runtime.queue.worker import requeue_if_resumable
from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.replay.replay import ReplayReport, replay_run
from tracelock.runtime.runs.engine import (
    AsyncRunContext,
    Engine,
    RunResult,
    resolve_agent_path,
    result_from_record,
)
from tracelock.runtime.runs.recovery import RecoveryReport, abort_run, recover_runs, resolve_step

__all__ = ["Runtime", "RunResult", "AsyncRunContext", "resolve_agent_path", "result_from_record"]


class Runtime(Engine):
    """Runs agents deterministically against a store and a policy.

    ``store`` is a store or a path (default ``./.tracelock``); ``policy`` a :class:`Policy`,
    a path to a policy file, a mapping, or None for the empty policy (which denies every
    tool and LLM call). ``clock`` (ms), ``sleep`` and ``ids`` are injected; their defaults
    read the real world.
    """

    def submit(
        self,
        agent: Callable[..., Any] | str,
        input: Any = None,
        *,
        queue: str = "default",
        idempotency_key: str | None = None,
        run_id: str | None = None,
        tenant: str | None = None,
    ) -> RunHandle:
        """Queue a run for the workers of this store (``tracelock worker``) and return its
        handle: ``result(timeout)``, ``await handle``, ``status()``. Durable when it returns;
        the same ``idempotency_key`` from any process names one run (docs/queue.md).
        ``tenant``, as in ``run``, is recorded in the run's start by the worker that runs
        it, so the policy's ``daily_budgets.tenant`` applies to queued runs too."""
        return submit(
            self, agent, input, queue=queue, idempotency_key=idempotency_key, run_id=run_id, tenant=tenant
        )

    def handle(self, run_id: str) -> RunHandle:
        """The handle of a run queued earlier (by any process), to wait on or poll."""
        return RunHandle(self, queue_for(self.store), run_id)

    def approve(self, run_id: str, step: int, *, by: str, reason: str = "") -> None:
        """Record a human's approval of the step a run waits on; a queued run goes back to
        the queue, for whichever worker is free."""
        super().approve(run_id, step, by=by, reason=reason)
        self._requeue(run_id)

    def reject(self, run_id: str, step: int, *, by: str, reason: str = "") -> None:
        """Record a human's rejection of the step a run waits on (a queued run goes back to
        the queue, whose worker ends it)."""
        super().reject(run_id, step, by=by, reason=reason)
        self._requeue(run_id)

    def _requeue(self, run_id: str) -> None:
        """A parked queued run that can go on now goes back to the queue (stores without a
        queue, and runs that were never queued, are left alone)."""
        backend = existing_queue(self.store)
        if backend is not None:
            requeue_if_resumable(self, run_id, backend)

    def close(self) -> None:
        close_queue(self.store)
        super().close()

    def replay(self, run_id: str, agent: Callable[..., Any] | str | None = None) -> ReplayReport:
        """Re-execute the agent's current code against the recorded run (writes nothing)."""
        return replay_run(self, run_id, agent)

    async def areplay(self, run_id: str, agent: Callable[..., Any] | str | None = None) -> ReplayReport:
        """:meth:`replay`, awaited on the caller's event loop (an ``async def`` agent runs on it)."""
        return await self.admission.run(lambda: bridged(self.replay, run_id, agent))

    async def arecover(self, *, progress: Callable[[int, int], None] | None = None, force: bool = False) -> RecoveryReport:
        """:meth:`recover`, awaited on the caller's event loop (see :meth:`Engine.arun`)."""
        return await self.admission.run(lambda: bridged(self.recover, progress=progress, force=force))

    def fork(
        self,
        run_id: str,
        at: int,
        agent: Callable[..., Any] | str | None = None,
        *,
        new_run_id: str | None = None,
        policy: Policy | None = None,
        allow_irreversible: bool = False,
    ) -> RunResult:
        """Continue a recorded run as a new run from step ``at`` (see :func:`fork_run`)."""
        return fork_run(
            self, run_id, at, agent, new_run_id=new_run_id, policy=policy, allow_irreversible=allow_irreversible
        )

    async def afork(
        self,
        run_id: str,
        at: int,
        agent: Callable[..., Any] | str | None = None,
        *,
        new_run_id: str | None = None,
        policy: Policy | None = None,
        allow_irreversible: bool = False,
    ) -> RunResult:
        """:meth:`fork`, awaited on the caller's event loop (see :meth:`Engine.arun`)."""
        return await self.admission.run(
            lambda: bridged(
                self.fork, run_id, at, agent, new_run_id=new_run_id, policy=policy, allow_irreversible=allow_irreversible
            )
        )

    def recover(self, *, progress: Callable[[int, int], None] | None = None, force: bool = False) -> RecoveryReport:
        """Continue every unfinished run that needs no human (see :mod:`recovery`); runs the
        run queue holds are left to its workers, and runs still ``running`` while another
        runtime is present on the store are left alone unless ``force``."""
        backend = existing_queue(self.store)
        if backend is None:
            return recover_runs(self, progress=progress, force=force)

        def queued(run_id: str) -> str | None:
            item = backend.item(run_id)
            if item is None or item.state in ("done", "error"):
                return None
            return f"held by the run queue ({item.state}): its workers continue it"

        return recover_runs(self, progress=progress, skip=queued, force=force)

    def resolve(
        self,
        run_id: str,
        step: int,
        *,
        by: str,
        reason: str = "",
        result: Any = None,
        failed: str | None = None,
        retry: bool = False,
    ) -> None:
        """Say what really happened at a blocked irreversible step, or allow one retry."""
        resolve_step(self, run_id, step, by=by, reason=reason, result=result, failed=failed, retry=retry)
        self._requeue(run_id)

    def abort(self, run_id: str, *, by: str, reason: str) -> None:
        """End an unfinished run as ``aborted``."""
        abort_run(self, run_id, by=by, reason=reason)

