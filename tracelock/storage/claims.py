"""Exclusive claims on runs across processes: who is continuing a run right now.

Continuing an unfinished run (``resume``, and ``recover`` through it) executes its next
effects. Two processes continuing one run at once would both execute them, an irreversible
one included: an operator's ``recover`` racing another ``recover``, or a ``resume`` of a run
that was just approved. Presence (:mod:`tracelock.storage.presence`) keeps recovery away from
runs that a live runtime may be *executing*; a claim makes *continuing* a run exclusive. The
claim is taken before the run's journal is read, and held until the continuation returns;
it dies with its process, however that ends:

- the directory store: an exclusive ``flock`` on ``runtimes/claims/<digest>.lock``, where
  ``<digest>`` is the first 32 hex digits of the run id's SHA-256. The file is removed on
  release; a claimer that locked a file removed meanwhile (it opened the old path) finds
  the path gone or replaced and tries again, so two claimers never hold different files;
- PostgreSQL: an exclusive session advisory lock whose key is the first 8 bytes of
  SHA-256(``tracelock-run:`` + run id), on a connection of its own.

Stores of other kinds keep no claims (:func:`claim_run` then always succeeds).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any, Self

from tracelock.storage.backend import Store
from tracelock.storage.presence import directory_of, sessions_of

__all__ = ["RunClaim", "claim_run"]

_FOLDER = ("runtimes", "claims")


class RunClaim:
    """A held claim on one run, until :meth:`release` (also a context manager)."""

    def __init__(self, *, fd: int | None = None, path: Path | None = None, store: Any = None, session: Any = None) -> None:
        self._fd = fd
        self._path = path
        self._store = store
        self._session = session

    def release(self) -> None:
        if self._fd is not None:
            assert self._path is not None
            with contextlib.suppress(OSError):
                self._path.unlink()  # before the lock goes: see the module docstring
            os.close(self._fd)
            self._fd = None
        if self._session is not None:
            self._store.release_advisory_lock(self._session)
            self._session = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_run(store: Store, run: str) -> RunClaim | None:
    """Claim ``run`` on ``store`` for this caller; None when another holder has it."""
    directory = directory_of(store)
    if directory is not None:
        return _claim_file(directory.joinpath(*_FOLDER) / f"{hashlib.sha256(run.encode()).hexdigest()[:32]}.lock")
    sessions = sessions_of(store)
    if sessions is not None:
        key = int.from_bytes(hashlib.sha256(b"tracelock-run:" + run.encode()).digest()[:8], "big", signed=True)
        session = sessions.try_advisory_lock(key)
        return None if session is None else RunClaim(store=sessions, session=session)
    return RunClaim()


def _claim_file(path: Path) -> RunClaim | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return RunClaim(fd=fd, path=path)
        os.close(fd)  # a file its holder removed on release: claim the path afresh
