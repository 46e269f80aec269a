"""Submitting a run to the queue, and the handle that waits for its result.

``submit`` writes one queue row, committed before it returns: from then on the run survives
any crash of the submitting process, and some worker will run it. The run id is fixed at
submission (the runtime's id source, or, with an idempotency key, derived from the agent and
the key exactly as ``Runtime.run`` derives it), so the same key from any process names one
run and one row. A tenant given at submission is stored with the row and passed by the
worker to the run (``Runtime.run(..., tenant=)``), so its daily budgets apply to queued work.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from tracelock.core.canonical import CanonicalError, dumps, loads
from tracelock.errors import RuntimeFault
from tracelock.runtime.errors import AgentDefinitionError, RunStateError
from tracelock.runtime.queue.backends import queue_for
from tracelock.runtime.records import load_run
from tracelock.runtime.runs.engine import RunResult, keyed_run_id, result_from_record
from tracelock.storage.errors import RunNotFoundError
from tracelock.storage.queue_backend import QueueBackend, QueueItem

if TYPE_CHECKING:
    from tracelock.runtime.runs.engine import Engine

__all__ = ["QueueRunError", "QueueTimeoutError", "RunHandle", "submit"]

#: The first and the longest pause (seconds) between two looks of a handle at its run.
_POLL_FIRST = 0.002
_POLL_MAX = 0.1


class QueueTimeoutError(RuntimeFault):
    """``RunHandle.result(timeout)`` gave up: the run had not ended within the timeout (it
    goes on; ask again later)."""

    code = "QUEUE_RESULT_TIMEOUT"


class QueueRunError(RuntimeFault):
    """No worker can run this queued run (its agent cannot be imported, its code diverged
    from its record): the row is parked in state ``error`` with the reason."""

    code = "QUEUE_RUN_ERROR"


def agent_reference(engine: Engine, agent: Callable[..., Any] | str) -> tuple[str, str]:
    """``(reference, name)``: what a worker resolves the agent by (a registered name as
    given, else ``module:qualname``), and the agent's name (the key derivation's)."""
    func, name = engine._resolve_agent(agent)
    if isinstance(agent, str):
        return agent, name
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or module == "__main__":
        raise AgentDefinitionError(
            f"agent {name!r} cannot be queued: a worker imports it by module:qualname, so it must be "
            "a module-level function of an importable module (not __main__, not a local function)"
        )
    if inspect.isclass(func):
        raise AgentDefinitionError(f"agent {name!r} is a class: queue a module-level function")
    return f"{module}:{qualname}", name


def submit(
    engine: Engine,
    agent: Callable[..., Any] | str,
    input: Any = None,
    *,
    queue: str = "default",
    idempotency_key: str | None = None,
    run_id: str | None = None,
    tenant: str | None = None,
) -> RunHandle:
    """Queue ``agent(ctx, input)`` on ``queue``; see the module docstring."""
    if not isinstance(queue, str) or not queue:
        raise AgentDefinitionError("a queue is named by a non-empty string")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise AgentDefinitionError("a tenant is a non-empty string")
    reference, name = agent_reference(engine, agent)
    try:
        data = dumps(input)
    except CanonicalError as exc:
        raise AgentDefinitionError(f"the run input is not canonical JSON: {exc.message}") from None
    if idempotency_key is not None:
        derived = keyed_run_id(name, idempotency_key)
        if run_id is not None and run_id != derived:
            raise AgentDefinitionError("give run_id or idempotency_key, not both")
        run_id = derived
    elif run_id is None:
        run_id = engine.new_run_id()
    backend = queue_for(engine.store)
    item, created = backend.enqueue(run_id, queue, reference, data, idempotency_key, tenant)
    if not created:
        _same_submission(item, data, tenant, idempotency_key)
    return RunHandle(engine, backend, run_id)


def _same_submission(item: QueueItem, data: bytes, tenant: str | None, key: str | None) -> None:
    """Refuse a submission that names a queued run (by its key or id) with another input
    or another tenant: the run already queued is not the one asked for."""
    if item.input != data:
        what = "a different input"
    elif item.tenant != tenant:
        what = f"{_tenant_text(item.tenant)}, this submission gives {_tenant_text(tenant)}"
    else:
        return
    run_id = item.run
    raise RunStateError(
        f"idempotency key {key!r} was used for run {run_id} with {what}"
        if key is not None
        else f"run {run_id!r} is already queued with {what}",
        details={"run": run_id},
    )


def _tenant_text(tenant: str | None) -> str:
    return "no tenant" if tenant is None else f"tenant {tenant!r}"


class RunHandle:
    """A queued run: ``run_id``, ``status()``, ``result(timeout)``, ``await handle``."""

    def __init__(self, engine: Engine, backend: QueueBackend, run_id: str) -> None:
        self.run_id = run_id
        self._engine = engine
        self._backend = backend

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    def status(self) -> str:
        """``queued`` (not taken yet), ``leased`` (a worker holds it, the run has not
        started), ``error`` (no worker can run it), or the run's lifecycle state
        (``running``, ``awaiting_approval``, ``blocked``, ``completed``, ``failed``,
        ``aborted``)."""
        item = self._backend.item(self.run_id)
        if item is None:
            raise RunNotFoundError(f"no queued run {self.run_id!r}", details={"run": self.run_id})
        if item.state == "error":
            return "error"
        if item.state == "done" and item.note:
            return item.note
        try:
            return self._engine.store.run_info(self.run_id).status
        except RunNotFoundError:
            return item.state

    def _settled(self) -> RunResult | None:
        """The run's result once it has ended, else None (one queue read)."""
        item = self._backend.item(self.run_id)
        if item is None:
            raise RunNotFoundError(f"no queued run {self.run_id!r}", details={"run": self.run_id})
        if item.state == "error":
            raise QueueRunError(
                f"queued run {self.run_id} cannot be run: {item.note}", details={"run": self.run_id}
            )
        if item.state != "done":
            return None
        return result_from_record(load_run(self._engine.store, self.run_id))

    def result(self, timeout: float | None = None) -> RunResult:
        """Wait until the run has ended and return its result (``QUEUE_RESULT_TIMEOUT``
        after ``timeout`` seconds; a run awaiting approval or blocked has not ended)."""
        clock, sleep = self._engine._clock_ms, self._engine._sleep
        deadline = None if timeout is None else clock() + timeout * 1000
        pause = _POLL_FIRST
        while True:
            found = self._settled()
            if found is not None:
                return found
            if deadline is not None and clock() >= deadline:
                raise self._timeout(timeout)
            sleep(pause)
            pause = min(pause * 2, _POLL_MAX)

    async def aresult(self, timeout: float | None = None) -> RunResult:
        """:meth:`result` for a coroutine: the event loop runs on while it waits."""
        clock = self._engine._clock_ms
        deadline = None if timeout is None else clock() + timeout * 1000
        pause = _POLL_FIRST
        while True:
            found = await asyncio.to_thread(self._settled)  # tracelock: allow TL-CONC-002 -- waits outside any run; its result decides nothing recorded
            if found is not None:
                return found
            if deadline is not None and clock() >= deadline:
                raise self._timeout(timeout)
            await asyncio.sleep(pause)  # tracelock: allow TL-CLOCK-002 -- a poll interval outside any run
            pause = min(pause * 2, _POLL_MAX)

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self.aresult().__await__()

    def input(self) -> Any:
        """The run's input as queued."""
        item = self._backend.item(self.run_id)
        if item is None:
            raise RunNotFoundError(f"no queued run {self.run_id!r}", details={"run": self.run_id})
        return loads(item.input)

    def tenant(self) -> str | None:
        """The tenant the run was queued with (None: none)."""
        item = self._backend.item(self.run_id)
        if item is None:
            raise RunNotFoundError(f"no queued run {self.run_id!r}", details={"run": self.run_id})
        return item.tenant

    def _timeout(self, timeout: float | None) -> QueueTimeoutError:
        return QueueTimeoutError(
            f"run {self.run_id} had not ended after {timeout:g} s (status: {self.status()})",
            details={"run": self.run_id},
        )
