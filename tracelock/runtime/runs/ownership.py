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

from tracelock.runtime import bridge
from tracelock.runtime.errors import RunBusyError
from tracelock.storage.backend import Store
from tracelock.storage.ownership import LeaseHolder, RunLease

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
    @contextlib.contextmanager
    def owning(
        self, run: str, *, wait_s: float | None = None, busy: Busy | None = None, fresh: bool = False
    ) -> Iterator[RunLease | None]:
        """Hold ``run``'s lease for the block (None: the caller's adopted lease is used).
        Without ``wait_s``, a live lease held elsewhere raises ``busy(holder)`` (default:
        :class:`RunBusyError`); with it, the lease is polled for until it is free, for at
        most ``wait_s`` seconds, then ``busy`` is raised.

        ``fresh``: ``run`` is an id this runtime just drew from a source nobody else draws
        the same id from (random), and nothing of the run is written yet, so nobody can
        contend for it: the store may hand out a cheaper lease
        (:meth:`~tracelock.storage.ownership.RunOwnership.acquire_fresh`)."""
        adopted = _ADOPTED.get()
        if adopted is not None and run in adopted:
            yield None
            return
        lease = self._take(run, wait_s, busy, fresh)
        try:
            yield lease
        except BaseException:
            # The run's own failure is the caller's answer; a lease the store cannot take
            # back now (a full disk) is left to the proof that its owner is gone.
            with contextlib.suppress(Exception):
                self.give_back(lease)
            raise
        self.give_back(lease)

    def _take(self, run: str, wait_s: float | None, busy: Busy | None, fresh: bool) -> RunLease:
        ownership = self.store.ownership()
        if fresh:
            taken = ownership.acquire_fresh(run, self.owner, self.lease_ms)
            if taken is not None:
                self._hold(taken)
                return taken
        deadline = None if wait_s is None else time.monotonic() + wait_s  # tracelock: allow TL-CLOCK-001 -- bounds a wait for another owner; decides nothing recorded
        pause = _FIRST_PAUSE_S
        while True:
            lease = ownership.acquire(run, self.owner, self.lease_ms)
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
            if self._beat is None or not self._beat.is_alive():
                self._beat = threading.Thread(target=self._heartbeats, name="tracelock-lease", daemon=True)
                self._beat.start()

    def give_back(self, lease: RunLease) -> None:
        with self._lock:
            if self._held.get(lease.run) == lease.token:
                del self._held[lease.run]
            self.stranded.add(lease.run)
        self.store.ownership().release(lease.run, lease.token)
        with self._lock:
            self.stranded.discard(lease.run)

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
        with self._lock:
            self._beat = None

    def close(self) -> None:
        self._wake.set()


def busy_error(run: str, holder: LeaseHolder | None) -> RunBusyError:
    """The refusal of a run another owner executes (``holder``: its lease, if still held)."""
    return RunBusyError(
        f"run {run} is being executed elsewhere right now (another process or thread holds its lease); "
        "it is left to that owner",
        details={"run": run} | ({"owner": holder.owner} if holder is not None else {}),
    )
