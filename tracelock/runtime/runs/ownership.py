"""The leases one runtime holds on the runs it executes (:mod:`tracelock.storage.ownership`).

Every way a runtime continues a run (``run``, ``resume``, ``recover``, ``fork``, an
approval or resolution, a queue worker's run) goes through :meth:`RunOwner.owning`: the
run's lease is taken first, held (renewed by a heartbeat thread every third of the lease)
while the run executes, and given back when it ends or waits. A caller that finds a live
lease never executes the run: it raises ``RUN_BUSY``, or, given a wait (a ``run`` with an
idempotency key), polls until the owner has let go and then answers from the journal.

A lease the heartbeat finds lost (the process was paused past it and another owner took
the run over) is voided in the store handle's fence book at once, so the very next append
of the run is refused (``RUN_LEASE_LOST``) and the run stops before its next effect.

A queue worker holds the lease of the run it took already: it *adopts* it
(:meth:`RunOwner.adopted`) for the thread that drives the run, and ``owning`` then uses it
as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from tracelock.runtime import bridge
from tracelock.runtime.errors import RunBusyError
from tracelock.storage.backend import Store
from tracelock.storage.ownership import LeaseHolder, RunLease

T = TypeVar("T")

__all__ = ["Busy", "RunOwner", "busy_error"]

#: Makes the error a caller that finds a run busy raises: ``busy(run, holder)``.
Busy = Callable[[str, LeaseHolder | None], Exception]

#: The leases the current thread (or task) drives runs under without having taken them
#: itself (a queue worker's claim): run -> token.
_ADOPTED: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("tracelock_adopted", default=None)

#: The first and the longest pause between two looks at a busy run's lease.
_FIRST_PAUSE_S = 0.005
_LONGEST_PAUSE_S = 0.2


class RunOwner:
    """The run leases of one runtime on one store handle. ``owner`` names the runtime in
    the lease rows (``<pid>-<token>``, like its presence mark)."""

    def __init__(self, store: Store, owner: str, lease_ms: int) -> None:
        self.store = store
        # Whether a lease operation is a commit that waits for a flush (see _store_call).
        self._commits_wait = store.backend == "postgresql"
        self.owner = owner
        self.lease_ms = lease_ms
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._wake = threading.Event()
        self._beat: threading.Thread | None = None
        self._closed = False
        #: Runs whose lease could not be given back (the store failed): their rows name this
        #: runtime until they expire, or until its presence mark, left behind, proves it gone.
        self.stranded: set[str] = set()

    # -- taking and giving back --------------------------------------------------------
    def owning(
        self, run: str, *, wait_s: float | None = None, busy: Busy | None = None, fresh: bool = False
    ) -> contextlib.AbstractContextManager[RunLease | None]:
        """Hold ``run``'s lease for the block (None: the caller's adopted lease is used).
        Without ``wait_s``, a live lease held elsewhere raises ``busy(holder)`` (default:
        :class:`RunBusyError`); with it, the lease is polled for until it is free, for at
        most ``wait_s`` seconds, then ``busy`` is raised.

        ``fresh``: ``run`` is an id this runtime just drew from a source nobody else draws
        the same id from (random), and nothing of the run is written yet, so nobody can
        contend for it: the store may hand out a cheaper lease
        (:meth:`~tracelock.storage.ownership.RunOwnership.acquire_fresh`)."""
        return _Owning(self, run, wait_s, busy, fresh)

    def _store_call(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)``, a lease operation; in an awaited run on PostgreSQL, in a worker
        thread, so that the loop goes on while its commit waits for the WAL flush (many runs
        starting at once would otherwise hold the loop for a flush each). The directory
        store's lease operations take microseconds and no sync: they run inline."""
        if self._commits_wait and bridge.active():
            return bridge.wait(bridge.in_thread(func, *args))
        return func(*args)

    def _take(self, run: str, wait_s: float | None, busy: Busy | None, fresh: bool) -> RunLease:
        ownership = self.store.ownership()
        if fresh:
            taken = self._store_call(ownership.acquire_fresh, run, self.owner, self.lease_ms)
            if taken is not None:
                self._hold(taken)
                return taken
        deadline = None if wait_s is None else time.monotonic() + wait_s  # tracelock: allow TL-CLOCK-001 -- bounds a wait for another owner; decides nothing recorded
        pause = _FIRST_PAUSE_S
        while True:
            lease = self._store_call(ownership.acquire, run, self.owner, self.lease_ms)
            if lease is not None:
                self._hold(lease)
                return lease
            if deadline is None or time.monotonic() >= deadline:  # tracelock: allow TL-CLOCK-001 -- bounds a wait for another owner; decides nothing recorded
                raise (busy or busy_error)(run, ownership.holder(run))
            if bridge.active():
                bridge.wait(asyncio.sleep(pause))  # tracelock: allow TL-CLOCK-002 -- polls for another owner's lease (an awaited run: the loop goes on); decides nothing recorded
            else:
                threading.Event().wait(pause)
            pause = min(pause * 2, _LONGEST_PAUSE_S)

    def _hold(self, lease: RunLease) -> None:
        with self._lock:
            self._held[lease.run] = lease.token
            if self._beat is None:  # the heartbeat thread clears it whenever it ends
                self._beat = threading.Thread(target=self._heartbeats, name="tracelock-lease", daemon=True)
                self._beat.start()

    def give_back(self, lease: RunLease) -> None:
        run = lease.run
        with self._lock:
            if self._held.get(run) == lease.token:
                del self._held[run]
            self.stranded.add(run)
        self._store_call(self.store.ownership().release, run, lease.token)
        self.stranded.discard(run)  # one set operation: atomic

    @staticmethod
    @contextlib.contextmanager
    def adopted(run: str, token: int) -> Iterator[None]:
        """Drive ``run`` in this thread under a lease taken elsewhere (a queue worker's)."""
        held = dict(_ADOPTED.get() or {})
        held[run] = token
        reset = _ADOPTED.set(held)
        try:
            yield
        finally:
            _ADOPTED.reset(reset)

    # -- the heartbeat -----------------------------------------------------------------
    def _heartbeats(self) -> None:
        try:
            self._beat_until_idle()
        finally:
            with self._lock:
                if self._beat is threading.current_thread():
                    self._beat = None

    def _beat_until_idle(self) -> None:
        interval = self.lease_ms / 3000
        while not self._wake.wait(interval):
            with self._lock:
                held = dict(self._held)
                if not held:
                    self._beat = None
                    return
            try:
                ownership = self.store.ownership()
                gone = ownership.renew(held, self.lease_ms)
            except Exception:  # the store is unreachable or closed: the next beat tries again
                continue
            for run in sorted(gone):
                # Refuse the run's next append in this process at once (the store's own
                # check would refuse it too, one query later).
                ownership.fences.void(run, held[run])

    def close(self) -> None:
        self._wake.set()


class _Owning:
    """The block :meth:`RunOwner.owning` returns (a class: a generator-based context
    manager costs more than the lease it holds)."""

    __slots__ = ("_busy", "_fresh", "_lease", "_owner", "_run", "_wait_s")

    def __init__(self, owner: RunOwner, run: str, wait_s: float | None, busy: Busy | None, fresh: bool) -> None:
        self._owner = owner
        self._run = run
        self._wait_s = wait_s
        self._busy = busy
        self._fresh = fresh
        self._lease: RunLease | None = None

    def __enter__(self) -> RunLease | None:
        adopted = _ADOPTED.get()
        if adopted is not None and self._run in adopted:
            return None
        self._lease = self._owner._take(self._run, self._wait_s, self._busy, self._fresh)
        return self._lease

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            return
        if kind is None:
            self._owner.give_back(lease)
            return
        # The run's own failure is the caller's answer; a lease the store cannot take back
        # now (a full disk) is left to the proof that its owner is gone.
        with contextlib.suppress(Exception):
            self._owner.give_back(lease)


def busy_error(run: str, holder: LeaseHolder | None) -> RunBusyError:
    """The refusal of a run another owner executes (``holder``: its lease, if still held)."""
    return RunBusyError(
        f"run {run} is being executed elsewhere right now (another process or thread holds its lease); "
        "it is left to that owner",
        details={"run": run} | ({"owner": holder.owner} if holder is not None else {}),
    )
