"""The storage interface every backend implements (embedded directory now, PostgreSQL next).

Everything above storage talks to a :class:`Store`. The contract, which a backend must keep
so that the same run produces the same entries, hashes and fingerprint on any backend:

* ``append``/``append_many`` assign the store-wide ``seq``, the run's index ``i`` and ``prev``
  atomically, build the entry with :func:`tracelock.core.entry.encode_entry`, and store any
  payload content-addressed (once per SHA-256). With ``durable=True`` they return only once
  the entries *and* their payloads survive a crash of the process or the machine; with
  ``durable=False`` they may return earlier, and the entries become durable no later than
  the next durable append or ``sync``. Entries are made durable in ``seq`` order.
* ``append_async``/``append_many_async`` are the durable appends for coroutines: the
  event loop keeps running other tasks while one waits, and concurrent waiters share syncs.
* A durability failure is fatal for the handle (``DurabilityError``): never retried.
* Reads see every entry appended through the same handle, durable or not.
* ``ownership()`` is the handle's run leases (:mod:`tracelock.storage.ownership`): whoever
  executes a run holds its lease, and the handle refuses (inside the append) every append
  of a run whose lease it held and lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, Self, runtime_checkable

from tracelock.core.canonical import Encoded, dumps
from tracelock.core.entry import Entry
from tracelock.errors import TracelockError
from tracelock.storage.checkpoint_records import CheckpointRecords
from tracelock.storage.merkle_stream import StoredNodes
from tracelock.storage.ownership import RunOwnership
from tracelock.storage.queue_backend import QueueBackend

__all__ = [
    "NO_PAYLOAD",
    "NewEntry",
    "RedactedPayload",
    "Repair",
    "RunInfo",
    "Store",
    "StoreFootprint",
    "stored_payload",
]


class _NoPayload:
    def __repr__(self) -> str:
        return "NO_PAYLOAD"


#: Marks an entry without payload (``None`` is the JSON value null, a valid payload).
NO_PAYLOAD: Any = _NoPayload()


class RedactedPayload(NamedTuple):
    """A payload value that stands for content already erased: the entry names ``digest``
    and the store keeps only its redaction marker (``tracelock store copy`` uses it to
    carry a redacted payload over without its bytes)."""

    digest: str


def stored_payload(payload: Any) -> tuple[bytes, bytes] | None:
    """What a store keeps of an appended payload: its canonical bytes and their SHA-256
    (empty bytes and the named digest for a :class:`RedactedPayload`; the bytes it carries
    for an :class:`~tracelock.core.canonical.Encoded` document, serialized by the caller);
    None for :data:`NO_PAYLOAD`. Both backends compute it in the caller's thread, before
    any lock."""
    if payload is NO_PAYLOAD:
        return None
    kind = type(payload)
    if kind is Encoded:
        data = payload.data
        return data, hashlib.sha256(data).digest()
    if kind is RedactedPayload:
        return b"", bytes.fromhex(payload.digest)
    data = dumps(payload)
    return data, hashlib.sha256(data).digest()


class NewEntry(NamedTuple):
    """An entry to append: the store fills in seq, i, prev and ts (a named tuple: one is
    built per append)."""

    run: str
    kind: str
    payload: Any = NO_PAYLOAD
    meta: dict[str, Any] | None = None
    #: The caller guarantees this is the run's first entry (a fresh run id): the backend
    #: may skip looking the run up. An id that does exist is then a caller bug.
    new_run: bool = False


@dataclass(frozen=True, slots=True)
class StoreFootprint:
    """What a store holds and what it takes on disk (``tracelock store info``)."""

    runs: int  # the admin chain not counted
    open_runs: int
    entries: int
    #: Bytes by part of the store (the backend names its parts), and ``total``.
    bytes: dict[str, int]
    #: What else the backend tells of itself (format and schema versions, segments, ...).
    details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        per_run = self.bytes["total"] / self.runs if self.runs else None
        return {
            "runs": self.runs,
            "open_runs": self.open_runs,
            "entries": self.entries,
            "bytes": dict(self.bytes),
            "bytes_per_run": None if per_run is None else round(per_run),
            **self.details,
        }


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the index knows about a run without reading its entries."""

    run: str
    agent: str | None
    parent: str | None
    status: str
    started_ts: int
    updated_ts: int
    entries: int
    first_seq: int
    last_seq: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "agent": self.agent,
            "parent": self.parent,
            "status": self.status,
            "started_ts": self.started_ts,
            "updated_ts": self.updated_ts,
            "entries": self.entries,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
        }


@dataclass(frozen=True, slots=True)
class Repair:
    """Something the store fixed when it opened (only ever an unacknowledged tail)."""

    what: str
    offset: int
    length: int
    saved_to: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "offset": self.offset,
            "length": self.length,
            "saved_to": self.saved_to,
            "details": self.details,
        }


@runtime_checkable
class Store(Protocol):
    """A journal with a content-addressed payload store and a run index."""

    @property
    def location(self) -> str: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def backend(self) -> str:
        """The backend's name: ``"directory"``, ``"postgresql"``."""
        ...

    @property
    def damage(self) -> TracelockError | None:
        """The damage a read-only open stopped at (what it shows is what lies before), if any."""
        ...

    @property
    def repairs(self) -> list[Repair]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    # -- writing -----------------------------------------------------------------------
    def append(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        durable: bool = True,
        new_run: bool = False,
    ) -> Entry: ...

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]: ...

    def append_held(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> int:
        """Append an entry that may wait in the process for this handle's next append (any
        run) or sync, and return its timestamp. Its place is fixed by this call: whatever
        commits it commits it before anything appended after it, with this timestamp. For
        the entries of effects that cannot change the world (docs/spec.md 3.4): the
        directory store writes it at once, as ``append(..., durable=False)``; the
        PostgreSQL backend, where every commit waits for a WAL flush, holds it (see
        docs/storage-postgres.md)."""
        ...

    def append_async(
        self,
        run: str,
        kind: str,
        *,
        payload: Any = NO_PAYLOAD,
        meta: dict[str, Any] | None = None,
        new_run: bool = False,
        durable: bool = True,
    ) -> Awaitable[Entry]:
        """:meth:`append` for a coroutine of the running loop, to be awaited: the entry's
        place is fixed by the call; the await returns it once it is durable (``durable``),
        or once it is where :meth:`append` with ``durable=False`` would have left it. The
        loop is not blocked meanwhile beyond the backend's own work on it (the directory
        store writes at once; its group commit runs one ``fdatasync`` on the loop for every
        coroutine waiting)."""
        ...

    def append_many_async(self, items: Sequence[NewEntry], *, durable: bool = True) -> Awaitable[list[Entry]]:
        """:meth:`append_many` for a coroutine, to be awaited, as :meth:`append_async` is for
        :meth:`append`: the entries' places are fixed by the call; the await returns them
        once durable (``durable``), or once they are where :meth:`append_many` with
        ``durable=False`` would have left them."""
        ...

    def sync(self) -> None: ...

    def sync_async(self) -> Awaitable[None]:
        """:meth:`sync` for a coroutine, to be awaited: everything appended before the call is
        durable when the await returns; the event loop is not blocked meanwhile beyond what
        the backend's commit costs on it (the directory store's group commit runs one
        ``fdatasync`` on the loop for every coroutine waiting)."""
        ...

    def catch_up(self) -> None:
        """Make this handle's next reads see what other processes appended (the directory
        store reads it under the writer lock; a PostgreSQL store's reads always do)."""
        ...

    def erase_payload(self, digest: str) -> bool:
        """Physically remove a payload's bytes (after its redaction entry was appended)."""
        ...

    # -- checkpoints and the Merkle cache (for tracelock.evidence) ----------------------
    def checkpoint_records(self) -> CheckpointRecords:
        """Where the store keeps its checkpoint history."""
        ...

    def merkle_cache(self) -> tuple[StoredNodes | None, str | None]:
        """The stored Merkle nodes to compare with the journal: (None, why) when unusable,
        (None, None) when there are none."""
        ...

    def merkle_rebuild_advice(self) -> str:
        """How to have the Merkle cache rebuilt from the journal, for people."""
        ...

    def journal_leaf_hashes(self) -> Iterator[bytes]:
        """The leaf hash of every entry in ``seq`` order, from the entries themselves."""
        ...

    # -- the run queue (tracelock.storage.queue_backend) --------------------------------
    def queue(self, *, clock_ms: Callable[[], int] | None = None) -> QueueBackend:
        """This handle's run queue (made on first use, then the same object)."""
        ...

    def has_queue(self) -> bool:
        """Whether someone ever queued a run on this store."""
        ...

    def close_queue(self) -> None:
        """Close the run queue, if it was made."""
        ...

    # -- run ownership -----------------------------------------------------------------
    def ownership(self) -> RunOwnership:
        """This handle's run leases and presence marks (made on first use; a read-only
        handle raises ``STORE_READ_ONLY``)."""
        ...

    # -- reading -----------------------------------------------------------------------
    def size(self) -> int:
        """Number of entries in the journal."""
        ...

    def runs(
        self,
        *,
        limit: int | None = None,
        status: str | None = None,
        offset: int = 0,
        agent: str | None = None,
        text: str | None = None,
    ) -> list[RunInfo]:
        """Runs (never the admin chain), newest first (start time, then journal position),
        skipping ``offset``; ``agent``: whose agent name contains it, ``text``: whose run id,
        agent or parent contains it (both case-insensitive)."""
        ...

    def run_info(self, run: str) -> RunInfo: ...

    def entries(self, run: str) -> list[Entry]: ...

    def iter_entries(self, start_seq: int = 0) -> Iterator[Entry]: ...

    def get_payload(self, digest: str) -> Any: ...

    def get_payload_bytes(self, digest: str) -> bytes: ...

    def get_payloads_bytes(self, digests: Sequence[str]) -> dict[str, bytes]:
        """The bytes of those of ``digests`` that are present, in one read where the
        backend can (a run's payloads, read together): a redacted or missing one is left
        out (:meth:`get_payload_bytes` says which); a damaged one raises
        ``JournalCorruptError``."""
        ...

    def payload_state(self, digest: str) -> str:
        """``"present"``, ``"redacted"`` or ``"missing"``."""
        ...

    def footprint(self) -> StoreFootprint:
        """How many runs and entries the store holds and the bytes it takes, by part."""
        ...

    # -- the Merkle tree over every entry, in seq order (RFC 9162) -----------------------
    def tree_size(self) -> int: ...

    def tree_root(self, size: int | None = None) -> bytes: ...

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]: ...

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]: ...
