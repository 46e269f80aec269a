"""The run queue's storage contract.

A queued run is a row: its run id, queue, agent, input, tenant (if any) and state
(``queued``, ``leased``, ``waiting`` for a human, ``done``, or ``error`` when no worker can
run it). A worker that takes a run holds the run's **lease**: the same lease every owner of
a run holds (:mod:`tracelock.storage.ownership`), a row (run, worker, token, expires) whose
``token`` is drawn from a store-wide counter each time the lease changes hands. The lease is
renewed by a heartbeat; once it has expired, another worker (or any other caller) may take
the run over, which draws a new token. A queued run whose lease another caller holds (a
``run`` with the idempotency key it was submitted with) is not taken until that lease is
given back or expires.

**Fencing** is the ownership's: a worker registers each run it holds with its store
handle's fence book (``store.ownership().fences``), and every append of such a run is
refused with ``RUN_LEASE_LOST`` once the lease row no longer carries the worker's token.

The backends: :mod:`tracelock.storage.postgres.queue` (``FOR UPDATE SKIP LOCKED``, woken by
``LISTEN/NOTIFY``) and :mod:`tracelock.storage.directory.queue` (SQLite beside the journal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tracelock.errors import StoreError
from tracelock.storage.ownership import AppendGuard, FenceBook, LeaseLostError

__all__ = [
    "ITEM_COLUMNS",
    "ITEM_WIDTH",
    "QUEUE_STATES",
    "AppendGuard",
    "Claim",
    "FenceBook",
    "LeaseLostError",
    "QueueBackend",
    "QueueError",
    "QueueItem",
    "QueueLeasedError",
    "QueueNotEmptyError",
    "QueueRow",
]

QUEUE_STATES = ("queued", "leased", "waiting", "done", "error")


class QueueError(StoreError):
    """The run queue's storage failed or was asked something impossible."""

    code = "QUEUE_ERROR"


class QueueLeasedError(QueueError):
    """Queue rows could not be copied: some runs are leased (a worker holds them, and may
    still append to them and change their rows)."""

    code = "QUEUE_RUNS_LEASED"


class QueueNotEmptyError(QueueError):
    """Queue rows can be restored only into a queue that holds none."""

    code = "QUEUE_NOT_EMPTY"


#: The columns a queue item is read from (a queued-runs table aliased ``r``), in the order
#: :meth:`QueueItem.from_row` takes them: the same on both backends.
ITEM_COLUMNS = (
    "r.run, r.queue, r.agent, r.input, r.state, r.attempts, r.enqueued_ms, r.idempotency_key, r.note, r.tenant"
)
#: How many columns :data:`ITEM_COLUMNS` names: a query selecting more after them (the
#: lease's worker, the position) finds them from this index on.
ITEM_WIDTH = len(ITEM_COLUMNS.split(","))


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A queued run as the queue knows it."""

    run: str
    queue: str
    agent: str
    input: bytes
    state: str
    attempts: int
    enqueued_ms: int
    idempotency_key: str | None = None
    #: The run's status when it left the worker (``completed``, ``awaiting_approval``...)
    #: or, in state ``error``, why no worker could run it.
    note: str | None = None
    worker: str | None = None
    #: The tenant key the run was submitted with (its daily budgets), if any.
    tenant: str | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any], worker: str | None = None) -> QueueItem:
        """An item from a row of :data:`ITEM_COLUMNS` (either backend's)."""
        return cls(
            run=str(row[0]),
            queue=str(row[1]),
            agent=str(row[2]),
            input=bytes(row[3]),
            state=str(row[4]),
            attempts=int(row[5]),
            enqueued_ms=int(row[6]),
            idempotency_key=None if row[7] is None else str(row[7]),
            note=None if row[8] is None else str(row[8]),
            worker=worker,
            tenant=None if row[9] is None else str(row[9]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "queue": self.queue,
            "agent": self.agent,
            "state": self.state,
            "attempts": self.attempts,
            "enqueued_ms": self.enqueued_ms,
            "idempotency_key": self.idempotency_key,
            "note": self.note,
            "worker": self.worker,
            "tenant": self.tenant,
        }


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue row as stored, with its position (the order runs are taken in): what a copy
    of the queue reads and restores."""

    position: int
    item: QueueItem

    def columns(self) -> dict[str, Any]:
        """Every stored column of the row (the lease's worker is not one)."""
        item = self.item
        return {
            "run": item.run,
            "queue": item.queue,
            "agent": item.agent,
            "input": item.input,
            "state": item.state,
            "attempts": item.attempts,
            "enqueued_ms": item.enqueued_ms,
            "idempotency_key": item.idempotency_key,
            "note": item.note,
            "tenant": item.tenant,
            "position": self.position,
        }


def leased_error(rows: Sequence[QueueRow], where: str) -> QueueLeasedError:
    """The refusal of a copy of ``rows`` (some of them leased) out of the queue ``where``."""
    leased = [row.item for row in rows if row.item.state == "leased"]
    workers = sorted({item.worker for item in leased if item.worker})
    held_by = f" (held by {', '.join(workers)})" if workers else ""
    return QueueLeasedError(
        f"the run queue of {where} has {len(leased)} leased run{'' if len(leased) == 1 else 's'}{held_by}: "
        "a worker holds them and may still change them, so they cannot be copied consistently; "
        "stop the workers (`tracelock worker` hands its runs back on SIGTERM; a run whose worker died "
        "stays leased until another worker takes it over once its lease expired) and copy again",
        details={"leased": len(leased), "runs": [item.run for item in leased[:20]], "workers": workers},
    )


@dataclass(frozen=True, slots=True)
class Claim:
    """A run a worker took: the item and its lease's fencing token."""

    item: QueueItem
    token: int
    #: Whether the run was taken over from a worker whose lease expired.
    recovered: bool


class QueueBackend(Protocol):
    """The queue over one store (a backend object per process and store)."""

    fences: FenceBook

    def enqueue(
        self, run: str, queue: str, agent: str, input: bytes, key: str | None, tenant: str | None = None
    ) -> tuple[QueueItem, bool]:
        """Queue a run durably (committed when this returns); ``(item, created)``: a run id
        already queued is never queued twice, the first row is returned (the caller
        compares its input and tenant)."""
        ...

    def claim(
        self, queues: Sequence[str], worker: str, limit: int, lease_ms: int, queue_limit: int | None
    ) -> list[Claim]:
        """Take up to ``limit`` runs: queued ones (oldest first), and leased ones whose lease
        expired. ``queue_limit`` caps the live leases of each queue across every worker."""
        ...

    def heartbeat(self, worker: str, held: dict[str, int], lease_ms: int) -> set[str]:
        """Renew the leases ``held`` (run -> token); returns the runs whose lease is lost."""
        ...

    def finish(self, run: str, token: int, state: str, note: str | None) -> bool:
        """Leave a held run in ``state`` (``done``, ``waiting``, ``error``), releasing the
        lease; False if the lease was lost meanwhile (nothing changed)."""
        ...

    def hand_back(self, run: str, token: int) -> bool:
        """Put a held run back in the queue (graceful shutdown); its token is void at once."""
        ...

    def requeue(self, run: str) -> bool:
        """A ``waiting`` run goes back to ``queued`` (an approval or a resolution came)."""
        ...

    def item(self, run: str) -> QueueItem | None: ...

    def items(self, *, queue: str | None = None, state: str | None = None, limit: int | None = None) -> list[QueueItem]: ...

    def counts(self) -> dict[str, dict[str, int]]:
        """Per queue, how many runs are in each state."""
        ...

    def rows(self) -> list[QueueRow]:
        """Every row with its position, in position order, read in one transaction (the
        leased ones name their worker)."""
        ...

    def restore(self, rows: Sequence[QueueRow]) -> int:
        """Insert ``rows`` as given (every column and position) into this queue, which must
        hold no row (``QUEUE_NOT_EMPTY``), in one transaction; leased rows are refused
        (``QUEUE_RUNS_LEASED``: no lease comes with them). The position counter then
        continues after the highest position restored; fencing tokens stay this queue's own.
        Returns the number of rows restored."""
        ...

    def wait(self, timeout: float) -> bool:
        """Block until something may have been queued (or ``timeout`` seconds); True if woken."""
        ...

    def close(self) -> None: ...
