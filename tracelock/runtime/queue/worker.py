"""A worker: takes runs from the queue and drives them, under leases that fence its appends.

Any number of workers, in any number of processes on any number of machines, serve one
store. Each run a worker takes comes with a lease and a fencing token; the worker registers
the token with its store handle (every append of the run is then checked against the lease,
see :mod:`tracelock.storage.queue_backend`) and renews its leases from a heartbeat thread.

What the worker does with a run it took:

* not started: ``Engine.run`` under the queued run id, with the queued tenant (its daily
  budgets apply);
* started and resumable (a worker died with it, it was approved, its blocked step was
  resolved): ``Engine.resume``, by today's recovery rules: recorded results are reused,
  an unfinished idempotent effect is run again with its first key, an unfinished
  irreversible effect leaves the run ``blocked`` until an operator resolves it;
* waiting for a human (approval, resolution): parked (``waiting``); ``approve`` and
  ``resolve`` queue it again, and whichever worker is free resumes it.

A worker whose lease was taken over (it was paused or cut off past the lease) has every
later append of that run refused (``RUN_LEASE_LOST``): it drops the run, which is the new
holder's. On ``stop`` (SIGTERM in ``tracelock worker``) it takes nothing more, lets the runs
in flight finish for ``grace`` seconds, then hands the rest back (their tokens are void at
once: anything the abandoned threads still try to append is refused; the abandoned async
runs are cancelled).

Where a run is driven: a sync agent's run takes a thread of the worker's pool for as long as
it is in flight; an ``async def`` agent's run is a task of the worker's one event loop
(:mod:`tracelock.runtime.queue.loop`), driven by the same code through
:func:`tracelock.runtime.bridge.bridged`, so that the runs waiting on their tools, models
and appends hold no thread. ``concurrency`` counts both.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tracelock.core.canonical import loads
from tracelock.errors import TracelockError
from tracelock.runtime.bridge import bridged
from tracelock.runtime.errors import AgentDefinitionError, AwaitRequiredError, DivergenceError
from tracelock.runtime.queue.backends import queue_for
from tracelock.runtime.queue.loop import WorkerLoop
from tracelock.runtime.records import load_run
from tracelock.runtime.runs.engine import RunResult, result_from_record
from tracelock.runtime.runs.lifecycle import TERMINAL_STATES
from tracelock.runtime.runs.ownership import RunOwner
from tracelock.runtime.runs.recovery import resumable
from tracelock.storage.errors import DurabilityError, RunNotFoundError, StoreClosedError
from tracelock.storage.queue_backend import Claim, LeaseLostError, QueueBackend

if TYPE_CHECKING:
    from tracelock.runtime.records import RunRecord
    from tracelock.runtime.runs.engine import Engine

__all__ = ["Worker", "WorkerReport", "requeue_if_resumable"]

T = TypeVar("T")


@dataclass
class WorkerReport:
    """What a worker did, run by run (``outcome``: the run's state when it left the worker,
    ``lease_lost``, ``handed_back`` or ``error``)."""

    worker: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: What went wrong outside any run (the queue unreachable for a while).
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.runs:
            out[row["outcome"]] = out.get(row["outcome"], 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "runs": self.runs, "counts": self.counts(), "notes": self.notes}


def requeue_if_resumable(engine: Engine, run_id: str, backend: QueueBackend | None = None) -> bool:
    """Queue a parked run again if it can go on without a human now (an approval or a
    resolution was journaled). True if it was queued."""
    backend = backend or queue_for(engine.store)
    item = backend.item(run_id)
    if item is None or item.state != "waiting":
        return False
    if not resumable(load_run(engine.store, run_id)):
        return False
    return backend.requeue(run_id)


class Worker:
    """Serves ``queues`` of the runtime's store (see the module docstring).

    ``concurrency``: runs in flight at once in this worker (sync agents' runs in its
    threads, async agents' runs on its event loop); ``queue_limit``: at most this
    many live leases per queue across every worker (None: no limit). ``lease_ms``: how long
    a lease lasts without a heartbeat (renewed every third of it). ``worker_id`` names the
    worker in its leases. ``wake``: the longest sleep between polls when nothing comes
    (PostgreSQL wakes it at once by ``NOTIFY``)."""

    def __init__(
        self,
        runtime: Engine,
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 1,
        queue_limit: int | None = None,
        lease_ms: int = 30_000,
        worker_id: str,
        grace: float = 30.0,
        wake: float = 2.0,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise AgentDefinitionError("a worker's concurrency is at least 1")
        if queue_limit is not None and queue_limit < 1:
            raise AgentDefinitionError("a queue's concurrency limit is at least 1")
        if lease_ms < 100:
            raise AgentDefinitionError("a lease lasts at least 100 ms")
        self.runtime = runtime
        self.backend = queue_for(runtime.store)
        self.queues = list(queues)
        self.concurrency = concurrency
        self.queue_limit = queue_limit
        self.lease_ms = lease_ms
        self.worker_id = worker_id
        self.grace = grace
        self.wake = wake
        self.on_event = on_event
        self.report = WorkerReport(worker_id)
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._state = threading.Lock()
        self._held: dict[str, int] = {}
        self._lost: set[str] = set()
        #: The event loop of the async agents' runs (made for the first one).
        self._loop: WorkerLoop | None = None
        #: The store handle failed under a run: the worker stopped (exit 1 from the CLI).
        self.failed = False

    # -- control -----------------------------------------------------------------------
    def stop(self) -> None:
        """Take nothing more; ``run`` returns once the runs in flight finished (or were
        handed back after the grace period). Safe from a signal handler."""
        self._stop.set()
        self._changed.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _event(self, row: dict[str, Any]) -> None:
        with self._state:
            self.report.runs.append(row)
        if self.on_event is not None:
            self.on_event(row)

    # -- the loop ----------------------------------------------------------------------
    def run(self, *, max_runs: int | None = None, until_idle: bool = False) -> WorkerReport:
        """Serve until :meth:`stop` (or ``max_runs`` runs were taken, or, with
        ``until_idle``, the queues had nothing to take and nothing is in flight)."""
        pool = concurrent.futures.ThreadPoolExecutor(self.concurrency, thread_name_prefix="tracelock-worker")
        beat = threading.Thread(target=self._heartbeats, name="tracelock-heartbeat", daemon=True)
        beat.start()
        futures: dict[str, tuple[int, concurrent.futures.Future[None]]] = {}
        taken = 0
        pause = 0.01
        try:
            while not self._stop.is_set():
                for run in [run for run, (_, future) in futures.items() if future.done()]:
                    del futures[run]
                free = self.concurrency - len(futures)
                if max_runs is not None:
                    free = min(free, max_runs - taken)
                claims: list[Claim] = []
                if free > 0:
                    try:
                        claims = self.backend.claim(self.queues, self.worker_id, free, self.lease_ms, self.queue_limit)
                    except TracelockError as exc:
                        # The queue is unreachable (a server restart): try again after the
                        # backoff; the runs in flight go on meanwhile.
                        with self._state:
                            self.report.notes.append(f"queue unreachable: {exc.message}")
                        self._stop.wait(pause)
                        pause = min(pause * 2, self.wake)
                        continue
                for claim in claims:
                    run = claim.item.run
                    if run in futures and not futures[run][1].done():
                        # Our own lease on a run still in flight here expired (this process
                        # was paused): the thread's token is void; the run goes back.
                        self.backend.fences.hold(run, -1)
                        self.backend.hand_back(run, claim.token)
                        continue
                    with self._state:
                        self._held[run] = claim.token
                    self.backend.fences.hold(run, claim.token)
                    futures[run] = (claim.token, self._start(claim, pool))
                    taken += 1
                if claims:
                    pause = 0.01
                    continue
                if max_runs is not None and taken >= max_runs and not futures:
                    break
                if until_idle and not futures:
                    break
                if free > 0:
                    # Nothing to take: sleep on the queue's wake-up (NOTIFY) with backoff,
                    # or until a run in flight ends.
                    self.backend.wait(pause)
                    pause = min(pause * 2, self.wake)
                else:
                    self._changed.wait(self.wake)
                    self._changed.clear()
        finally:
            self._stop.set()
            self._finish(futures, pool)
        return self.report

    def _start(self, claim: Claim, pool: concurrent.futures.ThreadPoolExecutor) -> concurrent.futures.Future[None]:
        """Drive the claimed run: on the event loop if its agent is ``async def``, else in a
        thread of ``pool``."""
        if not self._is_async(claim.item.agent):
            return pool.submit(self._serve, claim)
        if self._loop is None:
            self._loop = WorkerLoop()
        return self._loop.start(bridged(self._serve, claim))

    def _is_async(self, agent: str) -> bool:
        """Whether the queued agent reference names an ``async def`` agent (one that cannot
        be resolved goes to a thread, which parks the run with the reason)."""
        try:
            func, _ = self.runtime._resolve_agent(agent)
        except AwaitRequiredError:
            return True  # an async agent, seen from a thread that runs a loop of its own
        except Exception:
            return False
        return inspect.iscoroutinefunction(func)

    def _finish(self, futures: dict[str, tuple[int, concurrent.futures.Future[None]]], pool: Any) -> None:
        """The runs in flight get ``grace`` seconds; the rest are handed back."""
        pending = [future for _, future in futures.values()]
        concurrent.futures.wait(pending, timeout=self.grace)
        abandoned = False
        for run, (token, future) in futures.items():
            if future.done():
                continue
            abandoned = True
            self.backend.fences.hold(run, -1)  # refuse the run's appends at once, in this process too
            handed = self.backend.hand_back(run, token)
            future.cancel()  # an async run's task stops where it is; a thread cannot be stopped
            self._event({"run": run, "outcome": "handed_back" if handed else "lease_lost"})
        pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.close(wait=not abandoned)
            self._loop = None

    def _blocking(self, func: Callable[..., T], /, *args: Any) -> T:
        """A blocking queue call of a run's: off the event loop for an async run."""
        loop = self._loop
        return loop.blocking(func, *args) if loop is not None else func(*args)

    def _heartbeats(self) -> None:
        interval = self.lease_ms / 3000
        while not self._stop.wait(interval):
            with self._state:
                held = dict(self._held)
            if not held:
                continue
            try:
                gone = self.backend.heartbeat(self.worker_id, held, self.lease_ms)
            except TracelockError:
                continue  # the store is unreachable: the next beat tries again
            if gone:
                with self._state:
                    self._lost |= gone

    # -- one run -----------------------------------------------------------------------
    def _serve(self, claim: Claim) -> None:
        run = claim.item.run
        row: dict[str, Any] = {"run": run, "token": claim.token, "recovered": claim.recovered}
        try:
            result = self._drive(claim)
        except LeaseLostError as exc:
            row.update(outcome="lease_lost", reason=exc.message)
        except (AgentDefinitionError, DivergenceError) as exc:
            # Deterministic: no other worker would do better. Parked with the reason.
            self._blocking(self.backend.finish, run, claim.token, "error", f"{exc.code}: {exc.message}")
            row.update(outcome="error", reason=f"{exc.code}: {exc.message}")
        except (DurabilityError, StoreClosedError) as exc:
            # This process's store handle is done (a commit in doubt): the worker stops, so
            # that its supervisor starts a fresh one; the run is taken over once its lease
            # expires.
            row.update(outcome="error", reason=f"{exc.code}: {exc.message}")
            self.failed = True
            self.stop()
        except Exception as exc:
            lost = self._lease_lost(run, exc)
            if not lost:
                # The store failed under the run (a lost connection, a full disk): another
                # worker takes it over once the lease expires; nothing is released here.
                row.update(outcome="error", reason=f"{type(exc).__name__}: {exc}")
            else:
                row.update(outcome="lease_lost", reason=str(exc))
        else:
            row.update(self._leave(claim, result))
        finally:
            self.backend.fences.drop(run, claim.token)
            with self._state:
                if self._held.get(run) == claim.token:
                    self._held.pop(run, None)
                    self._lost.discard(run)
            self._changed.set()
        self._event(row)

    def _lease_lost(self, run: str, exc: BaseException) -> bool:
        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, LeaseLostError):
                return True
            seen = seen.__cause__ or seen.__context__
        with self._state:
            return run in self._lost

    def _drive(self, claim: Claim) -> RunResult:
        # The claim's lease is the run's lease: the runtime drives the run under it. The
        # adoption is a context variable, set here, in the thread or the loop task that
        # drives this run: each run sees its own.
        with RunOwner.adopted(claim.item.run, claim.token):
            return self._drive_adopted(claim)

    def _drive_adopted(self, claim: Claim) -> RunResult:
        runtime = self.runtime
        run = claim.item.run
        record = self._blocking(self._record, run)
        if record is None:
            return runtime.run(claim.item.agent, loads(claim.item.input), run_id=run, tenant=claim.item.tenant)
        if record.status in TERMINAL_STATES or not resumable(record):
            return result_from_record(record)
        return runtime.resume(run, record=record)

    def _record(self, run: str) -> RunRecord | None:
        """The run's record as the store has it now (None: not started)."""
        self.runtime.store.catch_up()  # see what the previous holder appended
        try:
            return load_run(self.runtime.store, run)
        except RunNotFoundError:
            return None

    def _leave(self, claim: Claim, result: RunResult) -> dict[str, Any]:
        """Release the run's lease in the state its result calls for."""
        return self._blocking(self._release, claim, result)

    def _release(self, claim: Claim, result: RunResult) -> dict[str, Any]:
        run = claim.item.run
        flush = getattr(self.runtime.store, "flush", None)
        if callable(flush):
            flush()  # the directory store: other processes read the run from the index
        if result.status in TERMINAL_STATES:
            kept = self.backend.finish(run, claim.token, "done", result.status)
            return {"outcome": result.status if kept else "lease_lost", "status": result.status}
        kept = self.backend.finish(run, claim.token, "waiting", result.status)
        if kept:
            # An approval or resolution that came between the suspension and the release
            # found the run still leased: look again now that it is parked.
            requeue_if_resumable(self.runtime, run, self.backend)
        return {"outcome": result.status if kept else "lease_lost", "status": result.status}
