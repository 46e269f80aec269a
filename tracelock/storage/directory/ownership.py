"""Run ownership of the embedded directory store (:mod:`tracelock.storage.ownership`).

A lease is held in one of two ways:

- **Rows**: the rows of the ``leases`` table of ``<store>/queue.sqlite``, the run queue's own
  (a worker's lease is the run's lease), with tokens from its ``token`` counter. The lease
  connection commits with ``synchronous=NORMAL``: a lease matters only while its owner's
  process lives, and a machine crash ends every owner, so it is not worth a sync (the
  queue's own rows are written with ``FULL``).
- **Slot leases**: a run a runtime starts under a fresh random id
  (:meth:`DirectoryOwnership.acquire_fresh`) is held in a slot of the runtime's own presence
  file (:mod:`tracelock.storage.directory.run_slots`): a few stores into mapped memory to
  take it, one to give it back, instead of a SQLite insert and delete (tens of
  microseconds, most of a run's ownership cost). Nobody can contend for such a run before
  its first entry is in the journal, and the slot is filled before that entry is written,
  so whoever learns the run's id from the journal and asks for its lease (``resume``,
  ``recover``, ``--force`` included, ``approve``, a queue claim) finds the slot: every
  acquirer looks the run up in the slots of the runtimes present before it inserts a row
  (only for ids a slot may hold: those starting ``run-``, as the random ones do, so a run
  under an idempotency key's ``idem-`` id pays no look).
  A slot lease lasts like a row: until given back, until it expires (the runtime's
  heartbeat renews it in the slot), or until its owner's mark is stale (the process died).
  The alternatives measured against it: keeping a row but batching its delete with the
  next insert still pays one SQLite commit per run; a store-wide mapped table needs a lock
  (two system calls) per change and the queue's SQL could not see it; taking the row lazily
  before the run's first write moves the cost without removing it.

Expiry is measured on the machine's wall clock (one machine, one clock; never the store's
injected entry clock, which a lease must not advance).

Fencing: the guard (:class:`_Fence`) checks the handle's tokens under the store's writer
lock, inside the append (``DirectoryStore.append_guard``). A take-over of an expired or
dead owner's lease (row or slot) happens under that same writer lock (``flock`` on
``<store>/lock``) and writes the new holder's row, so an append either finished before the
take-over (and the new holder reads it in the journal) or comes after it and is refused. A
lease taken where there was none needs no lock: nobody appends under a token that was never
drawn.

The fence reads anything only when the **take-over epoch** moved since it last found the
handle's tokens current: an 8-byte counter in ``<store>/leases.epoch``, mapped into memory,
that every take-over (and a queue worker's hand-back) increments under the writer lock
before it lets go. Nothing else can void a live token (only its owner gives a lease back),
so an unchanged epoch proves the handle's tokens current, and an append pays a read of
mapped memory. When it moved, a row lease is current while its row carries its token; a
slot lease while its token is not among the **voided tokens** a take-over of a slot lease
writes after the epoch (:mod:`tracelock.storage.directory.lease_epoch`): the taken run's
slot is its old owner's to write, so the take-over records the void where that owner's
fence reads it.

Presence: the runtime's file ``runtimes/<pid>-<token>.lock`` with an exclusive ``flock``
held on it (the kernel drops the lock when the process dies; a mark whose lock can be taken
is stale); the same file holds its slots. A runtime's leases name it by that same
``<pid>-<token>``, so a lease whose owner's mark is stale is void at once: its process is
dead, whatever the lease's expiry says (a mark that is missing proves nothing, and the
lease then lasts until it expires). A runtime that lets go of its mark while it still holds
slot leases turns them into rows first. A stale mark is removed once no row names its owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tracelock.errors import StoreError
from tracelock.storage.directory.lease_epoch import EPOCH_FILE, LeaseEpoch, bump_epoch
from tracelock.storage.directory.queue import QUEUE_FILE, open_queue_db, renew_leases
from tracelock.storage.directory.run_slots import (
    PRESENCE_FOLDER,
    SlotLease,
    SlotReader,
    SlotTable,
    mark_is_stale,
)
from tracelock.storage.failures import sqlite_error
from tracelock.storage.ownership import FenceBook, LeaseHolder, Presence, RunLease, lost
from tracelock.storage.queue_backend import QueueError

__all__ = ["DirectoryOwnership"]

_PRESENCE = PRESENCE_FOLDER

#: How many fencing tokens a handle reserves at once.
_TOKEN_BLOCK = 1024


class _Fence:
    """The append guard of a directory store handle (see the module docstring)."""

    def __init__(self, book: FenceBook, path: Path) -> None:
        self.book = book
        self._path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._epoch: LeaseEpoch | None = None
        #: The take-over epoch when the tokens below were last found current.
        self._version: int | None = None
        self._current: dict[str, int] = {}
        #: The runs this handle holds under slot leases, with their tokens.
        self._slots: dict[str, int] = {}
        #: The epoch when the voided tokens were last read.
        self._voids_read: int | None = None

    def tokens(self, runs: Iterable[str]) -> dict[str, int]:
        return self.book.wanted(runs)

    def refused(self, cursor: Any, runs: Sequence[str]) -> dict[str, StoreError]:
        # The usual answer without a lock or a dict: the epoch has not moved since every
        # token asked about was found current. Single looks at dicts are atomic; the store
        # calls this under its writer lock, which every take-over needs, so the epoch cannot
        # move meanwhile, and a token leaves _current only when its lease is given back.
        book = self.book
        epoch = self._epoch
        if epoch is not None and epoch.value() == self._version:
            current = self._current
            for run in runs:
                token = book.token(run)
                if token is not None and current.get(run) != token:
                    break
            else:
                return {}
        wanted = book.wanted(runs)
        if not wanted:
            return {}
        with self._lock:
            epoch = self._epoch_locked()
            version = epoch.value()
            voided = self._voided_locked(epoch, version)
            if version != self._version:
                self._current.clear()
                self._version = version
            # A slot lease is current until a take-over voids its token; any other token is
            # current while its row carries it.
            rows: dict[str, int] = {}
            for run, token in wanted.items():
                if self._slots.get(run) == token and token not in voided:
                    self._current[run] = token
                else:
                    rows[run] = token
            if not rows:
                return {}
            if self._conn is None:
                self._conn = open_queue_db(self._path, synchronous="NORMAL")
            marks = ",".join("?" * len(rows))
            found_rows = self._conn.execute(f"SELECT run, token FROM leases WHERE run IN ({marks})", list(rows)).fetchall()
            found = {str(run): int(token) for run, token in found_rows}
            self._current.update(found)
        return {run: lost(run, token, found.get(run)) for run, token in rows.items() if found.get(run) != token}

    def _epoch_locked(self) -> LeaseEpoch:
        if self._epoch is None:
            self._epoch = LeaseEpoch(self._path.with_name(EPOCH_FILE))
        return self._epoch

    def _voided_locked(self, epoch: LeaseEpoch, version: int) -> set[int]:
        if version != self._voids_read:
            epoch.read_voided()
            self._voids_read = version
        return epoch.voided

    def voided(self, token: int) -> bool:
        """Whether a take-over voided the slot lease held with ``token``."""
        with self._lock:
            epoch = self._epoch_locked()
            return token in self._voided_locked(epoch, epoch.value())

    def slot_held(self, run: str, token: int) -> None:
        """This handle took ``run``'s slot lease with ``token`` (current: nobody could take
        it over before now, so no epoch is to be checked)."""
        with self._lock:
            self._slots[run] = token
            self._current[run] = token

    def forget(self, run: str) -> None:
        """This handle gave ``run``'s lease back: its token is no longer current."""
        with self._lock:
            self._slots.pop(run, None)
            self._current.pop(run, None)

    def slot_given_back(self, run: str, token: int) -> bool:
        """:meth:`forget` for a slot lease; False when a take-over had voided it."""
        with self._lock:
            self._slots.pop(run, None)
            self._current.pop(run, None)
            epoch = self._epoch_locked()
            return token not in self._voided_locked(epoch, epoch.value())

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._epoch is not None:
                self._epoch.close()
                self._epoch = None


class _FilePresence:
    """A runtime's mark: an exclusive ``flock`` on its own file (its slot table), until
    released."""

    def __init__(self, token: str, table: SlotTable, ownership: DirectoryOwnership) -> None:
        self.token = token
        self.table = table
        self._ownership = ownership

    @property
    def path(self) -> Path:
        return self.table.path

    def release(self, *, leave_mark: bool = False) -> None:
        self._ownership.let_go(self.table, leave_mark=leave_mark)


class DirectoryOwnership:
    """The run leases of the directory store at ``store_dir`` (one object per store handle,
    whose appends its fence guards)."""

    def __init__(self, store_dir: Path, *, clock_ms: Callable[[], int], writer_lock: Callable[[], Any]) -> None:
        self._dir = store_dir
        self._path = store_dir / QUEUE_FILE
        self._clock = clock_ms
        #: A context manager holding the store's writer lock (ordered with fenced appends).
        self._writer_lock = writer_lock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        #: Tokens this handle reserved and has not used yet (see :meth:`_token`).
        self._tokens: list[int] = []
        #: The slot tables of the runtimes this handle marked present, by owner name.
        self._tables: dict[str, SlotTable] = {}
        #: The runs this handle holds under slot leases: run -> (table, slot, token).
        self._slotted: dict[str, tuple[SlotTable, int, int]] = {}
        self._reader = SlotReader(store_dir / _PRESENCE)
        self.fences = FenceBook()
        self.guard = _Fence(self.fences, self._path)

    # -- the lease table ---------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The leases' connection (made on first use). Holds ``_lock``."""
        if self._closed:
            raise QueueError("the store is closed")
        if self._conn is None:
            self._conn = open_queue_db(self._path, synchronous="NORMAL")
        return self._conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._failed(exc) from None

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        """The coded error for a failed write of the leases (a full disk is ``STORE_FULL``)."""
        what = f"the run leases in {self._path} cannot be written ({exc})"
        return sqlite_error(exc, self._path, what) or QueueError(what, details={"path": str(self._path)})

    def _token(self) -> int:
        """A fencing token no other lease ever had: drawn from the store's ``token`` counter
        a block at a time (a token is compared only for equality, so a block this handle
        reserved serves its leases in any order). Holds ``_lock``."""
        if not self._tokens:
            conn = self._connection()
            try:
                top = int(
                    conn.execute(
                        "UPDATE counters SET value = value + ? WHERE name = 'token' RETURNING value", (_TOKEN_BLOCK,)
                    ).fetchone()[0]
                )
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            self._tokens = list(range(top, top - _TOKEN_BLOCK, -1))
        return self._tokens.pop()

    def acquire_fresh(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        # A slot lease (module docstring, "Slot leases"): a few stores into this runtime's
        # own mapped file. Without a slot (no mark of this owner on this handle, all slots
        # taken, a long id or one without the slot prefix), the run gets a row like any other.
        with self._lock:
            table = self._tables.get(owner)
            if table is not None and not self._closed:
                token = self._token()
                expires = self._clock() + lease_ms
                slot = table.take(run, token, expires)
                if slot is not None:
                    self._slotted[run] = (table, slot, token)
                    self.guard.slot_held(run, token)
                    self.fences.hold(run, token)
                    return RunLease(run, owner, token, expires)
                self._tokens.append(token)
        return self.acquire(run, owner, lease_ms)

    def acquire(self, run: str, owner: str, lease_ms: int) -> RunLease | None:
        # Most runs have no lease at all: one insert, without the writer lock (nobody
        # appends under a token that was never drawn), once no runtime holds a slot lease
        # on the run.
        taken: RunLease | str | None = None
        with self._lock:
            if self._reader.find(run) is None:
                token = self._token()
                expires = self._clock() + lease_ms
                try:
                    inserted = self._connection().execute(
                        "INSERT INTO leases (run, worker, token, expires_ms) VALUES (?, ?, ?, ?) ON CONFLICT (run) DO NOTHING",
                        (run, owner, token, expires),
                    ).rowcount
                except sqlite3.Error as exc:
                    raise self._failed(exc) from None
                if inserted:
                    taken = RunLease(run, owner, token, expires)
                else:
                    self._tokens.append(token)
        if taken is None:
            taken = self._take(run, owner, lease_ms, take_over=False)
        if isinstance(taken, str):  # an expired (or dead) owner's lease: take it over
            previous = taken
            with self._writer_lock():
                taken = self._take(run, owner, lease_ms, take_over=True)
            if taken is not None and self._dead(previous) and not self._names_a_lease(previous):
                with contextlib.suppress(OSError):
                    (self._dir / _PRESENCE / f"{previous}.lock").unlink()  # its last lease is gone
        if taken is None or isinstance(taken, str):
            return None
        self.fences.hold(run, taken.token)
        return taken

    def _take(self, run: str, owner: str, lease_ms: int, *, take_over: bool) -> RunLease | str | None:
        """The lease; None while someone holds it live; or, when it can be taken over only
        under the writer lock (not ``take_over``), the name of its expired or dead owner."""
        with self._write() as conn:
            now = self._clock()
            row = conn.execute("SELECT expires_ms, worker FROM leases WHERE run = ?", (run,)).fetchone()
            if row is not None:
                if int(row[0]) >= now and not self._dead(str(row[1])):
                    return None
                if not take_over:
                    return str(row[1])
            slot = self._reader.find(run)
            voided: list[int] = []
            if slot is not None and not self.guard.voided(slot.token):
                if self._slot_live(slot, now):
                    return None
                if not take_over:
                    return slot.owner
                voided.append(slot.token)
            token = self._token()
            conn.execute(
                "INSERT INTO leases (run, worker, token, expires_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run) DO UPDATE SET worker = excluded.worker, token = excluded.token, "
                "expires_ms = excluded.expires_ms",
                (run, owner, token, now + lease_ms),
            )
            if row is not None or voided:
                # Under the writer lock (take_over): the old token is void.
                bump_epoch(self._dir, voided)
            return RunLease(run, owner, token, now + lease_ms)

    def _slot_live(self, slot: SlotLease, now: int) -> bool:
        return slot.expires_ms >= now and not self._dead(slot.owner)

    def renew(self, held: Mapping[str, int], lease_ms: int) -> set[str]:
        if not held:
            return set()
        gone: set[str] = set()
        rows: dict[str, int] = {}
        with self._lock:
            expires = self._clock() + lease_ms
            for run, token in held.items():
                slotted = self._slotted.get(run)
                if slotted is None or slotted[2] != token:
                    rows[run] = token
                elif self.guard.voided(token):
                    gone.add(run)
                else:
                    slotted[0].renew(slotted[1], expires)
        if rows:
            with self._write() as conn:
                gone |= renew_leases(conn, rows, expires)
        return gone

    def release(self, run: str, token: int) -> bool:
        self.fences.drop(run, token)
        with self._lock:
            slotted = self._slotted.get(run)
            if slotted is not None and slotted[2] == token:
                del self._slotted[run]
                slotted[0].free(slotted[1])
                return self.guard.slot_given_back(run, token)
            self.guard.forget(run)
            conn = self._connection()
            try:
                return bool(conn.execute("DELETE FROM leases WHERE run = ? AND token = ?", (run, token)).rowcount)
            except sqlite3.Error as exc:
                raise self._failed(exc) from None

    def holder(self, run: str) -> LeaseHolder | None:
        if not self._path.exists() and not (self._dir / _PRESENCE).is_dir():
            return None
        with self._write() as conn:
            row = conn.execute("SELECT worker, token, expires_ms FROM leases WHERE run = ?", (run,)).fetchone()
            now = self._clock()
            slot = self._reader.find(run) if row is None else None
        if row is not None:
            live = int(row[2]) >= now and not self._dead(str(row[0]))
            return LeaseHolder(run, str(row[0]), int(row[1]), int(row[2]), live)
        if slot is None:
            return None
        live = not self.guard.voided(slot.token) and self._slot_live(slot, now)
        return LeaseHolder(run, slot.owner, slot.token, slot.expires_ms, live)

    def _dead(self, owner: str) -> bool:
        """Whether ``owner`` is a runtime whose presence mark is stale (its process died)."""
        return mark_is_stale(self._dir / _PRESENCE, owner)

    # -- presence ----------------------------------------------------------------------
    def announce(self, token: str, pid: int) -> Presence | None:
        table = SlotTable(self._dir / _PRESENCE / f"{pid}-{token}.lock")
        with self._lock:
            self._tables[table.owner] = table
        return _FilePresence(token, table, self)

    def let_go(self, table: SlotTable, *, leave_mark: bool) -> None:
        """Release a runtime's mark. Its slot leases still held become rows first (with
        their tokens and expiry: held as before, until they are given back or expire), so
        that no moment finds them unheld while their runs may still append. Rows that
        cannot be written leave the mark behind: stale, it proves the leases void."""
        with self._lock:
            self._tables.pop(table.owner, None)
            moving = {run: slotted for run, slotted in self._slotted.items() if slotted[0] is table}
        if moving:
            try:
                with self._write() as conn:
                    expires = self._clock()
                    conn.executemany(
                        "INSERT INTO leases (run, worker, token, expires_ms) VALUES (?, ?, ?, ?) ON CONFLICT (run) DO NOTHING",
                        [(run, table.owner, token, table.expiry(slot) or expires) for run, (_, slot, token) in moving.items()],
                    )
            except StoreError:
                # The mark stays behind, stale: it proves these leases void, so this
                # handle refuses their appends from now on.
                leave_mark = True
                for run, (_, _, token) in moving.items():
                    self.fences.void(run, token)
            else:
                with self._lock:
                    for run in moving:
                        self._slotted.pop(run, None)
                        self.guard.forget(run)
        table.close(unlink=not leave_mark)

    def others_present(self, mine: Presence | None) -> list[str]:
        folder = self._dir / _PRESENCE
        own = mine.path if isinstance(mine, _FilePresence) else None
        found = []
        for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
            if path == own:
                continue
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # released meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.append(f"process {path.name.split('-', 1)[0]}")
            else:
                # A mark its dead process left behind; kept while a lease names that process,
                # which the mark proves void.
                if not self._names_a_lease(path.stem):
                    with contextlib.suppress(OSError):
                        path.unlink()
            finally:
                os.close(fd)
        return found

    def _names_a_lease(self, owner: str) -> bool:
        if not self._path.exists():
            return False
        with self._write() as conn:
            return conn.execute("SELECT 1 FROM leases WHERE worker = ? LIMIT 1", (owner,)).fetchone() is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._reader.close()
        self.guard.close()
