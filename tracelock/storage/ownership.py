"""Run ownership: every execution of a run has exactly one owner, whoever calls.

Continuing a run executes its next effects, an irreversible one included. Two callers
continuing one run at once (a client's retry beside the original call, two replicas of a
service given one idempotency key, ``recover --force`` beside a live writer, a queue
worker) would both execute them. So whoever executes a run (``run``, ``resume``,
``recover``, ``fork``, an approval's continuation, a queue worker) first takes the run's
**lease**: a row ``(run, owner, token, expires_ms)`` in the store, one per run. The
``token`` comes from a store-wide counter each time the lease changes hands.

- A lease is taken only when the run has none, or when its lease has expired (its owner
  died, or was paused or cut off past the lease). A caller that finds a live lease never
  executes the run.
- The owner renews its leases from a heartbeat (every third of the lease) and gives each
  back when it stops executing the run (the run ended, or waits for a human).
- **Fencing.** The owner registers each lease with its store handle's :class:`FenceBook`;
  the store calls its :class:`AppendGuard` inside every append of a fenced run, where the
  append is atomic (inside the PostgreSQL transaction; under the directory store's writer
  lock). An append whose lease row no longer carries the owner's token is refused with
  :class:`LeaseLostError` (``RUN_LEASE_LOST``) and nothing of it is written. A take-over of
  an expired lease is ordered with those checks, so once a new owner has taken a run and
  read its journal, no entry of the previous owner can appear behind its back: the previous
  owner stops at its next append, which for an effect is the intent written before it runs.

The run queue's leases are these same rows (``tracelock.storage.queue_backend``): a worker
that takes a queued run holds the run's lease. Each backend keeps them (the directory
store: the ``leases`` table of ``<store>/queue.sqlite``, expiry on the store's clock;
PostgreSQL: ``tracelock_queue_leases``, expiry on the server's clock) and implements
:class:`RunOwnership`; a store hands out its own through ``Store.ownership()``. A run
started under a fresh random id cannot be contended before its first entry is written, so
its lease may be kept more cheaply (:meth:`RunOwnership.acquire_fresh`; the directory store
keeps it in its runtime's mapped presence file, without a row), as long as every other
caller still finds it.

Presence (:class:`Presence`) is the coarser mark a runtime keeps on a store for its whole
life: ``recover`` without ``--force`` leaves ``running`` runs alone while another runtime is
present, since a run a paused process executes may outlive its lease.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from tracelock.errors import StoreError

__all__ = [
    "DEFAULT_LEASE_MS",
    "AppendGuard",
    "FenceBook",
    "LeaseHolder",
    "LeaseLostError",
    "Presence",
    "RunLease",
    "RunOwnership",
    "lost",
]

#: How long a lease lasts without a heartbeat (renewed every third of it).
DEFAULT_LEASE_MS = 30_000


class LeaseLostError(StoreError):
    """An append of a run was refused: the caller's lease on the run was taken over (it
    expired while the owner was paused or cut off) or given back. Nothing of the append
    was written; the run belongs to another owner now."""

    code = "RUN_LEASE_LOST"


def lost(run: str, token: int, found: int | None) -> LeaseLostError:
    how = "was given back or finished" if found is None else f"was taken over (token {found})"
    return LeaseLostError(
        f"the lease on run {run!r} held with token {token} {how}: this owner's appends to it are refused",
        details={"run": run, "token": token, "current": found},
    )


class RunLease(NamedTuple):
    """A lease this caller holds on a run (a named tuple: immutable, and taken for every
    run, several times cheaper to make than a frozen dataclass)."""

    run: str
    owner: str
    token: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who holds a run's lease, as the store has it now."""

    run: str
    owner: str
    token: int
    expires_ms: int
    #: Not expired yet (on the clock the backend measures expiry with), and its owner not
    #: known dead.
    live: bool


class FenceBook:
    """The runs one store handle appends to under a lease, with their tokens (thread-safe:
    runs register and leave from several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, int] = {}

    def hold(self, run: str, token: int) -> None:
        with self._lock:
            self._tokens[run] = token

    def drop(self, run: str, token: int | None = None) -> None:
        """Forget ``run`` (only if it is still held with ``token``, when given)."""
        with self._lock:
            if token is None or self._tokens.get(run) == token:
                self._tokens.pop(run, None)

    def void(self, run: str, token: int) -> None:
        """Refuse this handle's appends to ``run`` at once (its lease held with ``token`` is
        known lost): the fence then finds no row with the void token."""
        with self._lock:
            if self._tokens.get(run) == token:
                self._tokens[run] = -1

    def token(self, run: str) -> int | None:
        """The token ``run`` is held with (None: not held); one look, without the lock."""
        return self._tokens.get(run)

    def wanted(self, runs: Iterable[str]) -> dict[str, int]:
        """The tokens of those of ``runs`` this handle holds under a lease."""
        tokens = self._tokens
        if not tokens:
            return {}
        with self._lock:
            return {run: tokens[run] for run in runs if run in tokens}

    def __len__(self) -> int:
        return len(self._tokens)


@runtime_checkable
class AppendGuard(Protocol):
    """What a store calls inside each append (see the module docstring)."""

    def tokens(self, runs: Iterable[str]) -> dict[str, int]:
        """The lease token each of ``runs`` is appended to under (the guarded ones only):
        the PostgreSQL append function checks them inside its transaction."""
        ...

    def refused(self, cursor: Any, runs: Sequence[str]) -> dict[str, StoreError]:
        """Those of ``runs`` whose appends must be refused, with the error to give (nothing,
        at no cost beyond a look at the fence book, for runs appended to under no lease). Called
        where the append is atomic: ``cursor`` is the PostgreSQL append transaction's (None
        on the directory store, which calls it under its writer lock)."""
        ...


class Presence(Protocol):
    """A runtime's mark on a store, held until :meth:`release`."""

    token: str

    def release(self, *, leave_mark: bool = False) -> None:
        """Let go of the mark; ``leave_mark``: leave it behind, stale, where the backend keeps
        one (a lease the runtime could not give back then reads as its dead owner's)."""
        ...


class RunOwnership(Protocol):
    """The run leases of one store handle (``Store.ownership()``)."""

    #: The leases this handle's appends are fenced by (the queue's workers register theirs
    #: here too).
    fences: FenceBook

    def acquire(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        """Take ``run``'s lease for ``owner`` when nobody holds a live one (a take-over of an
        expired lease is ordered with the fenced appends), register it with :attr:`fences`
        and return it; None while another lease on the run is live."""
        ...

    def acquire_fresh(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        """:meth:`acquire` for a run nobody can contend for yet: ``owner`` just drew its id
        from a random source and has written nothing of it. The lease is as good as one
        :meth:`acquire` takes (exclusive, renewed, given back, taken over once expired or
        its owner dead, fencing), but a backend may keep it more cheaply, since no other
        caller can ask for the run before its first entry is in the store."""
        ...

    def renew(self, held: Mapping[str, int], lease_ms: int) -> set[str]:
        """Extend the leases ``held`` (run -> token) by ``lease_ms`` from now; returns the
        runs whose lease is no longer this token's (lost)."""
        ...

    def release(self, run: str, token: int) -> bool:
        """Give the lease back (only if it still carries ``token``) and stop fencing the run;
        False when it had been lost already."""
        ...

    def holder(self, run: str) -> LeaseHolder | None:
        """Who holds ``run``'s lease (None: nobody)."""
        ...

    def announce(self, token: str, pid: int) -> Presence | None:
        """Mark the runtime of process ``pid`` present until the mark is released."""
        ...

    def others_present(self, mine: Presence | None) -> list[str]:
        """Descriptions of the other runtimes present on the store (empty: none)."""
        ...

    def close(self) -> None: ...
