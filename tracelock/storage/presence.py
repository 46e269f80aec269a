"""Which processes are running agents on a store right now.

Several processes may write one store (the directory store takes its writer lock per
commit; PostgreSQL per transaction). Recovery must not take over a run that a live process
is still executing: it would run the run's next effects a second time. A run does not say
which process executes it, so a runtime *announces* itself on the store for its whole life,
and recovery asks whether any other runtime is present before it continues a run that is
still ``running`` (``tracelock recover --force`` overrides).

The marks die with their process, whatever the way it ends:

- the directory store: a file ``runtimes/<pid>-<token>.lock`` in the store directory with an
  exclusive ``flock`` held on it (the kernel drops the lock when the process dies; a mark
  whose lock can be taken is stale and is removed);
- PostgreSQL: a shared session advisory lock held on a connection of its own (the server
  drops it when the session ends); another runtime is present when the exclusive lock
  cannot be taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any, Protocol, cast

from tracelock.storage.backend import Store

__all__ = ["Presence", "announce", "directory_of", "others_present", "sessions_of"]

#: The PostgreSQL advisory lock key of presence (an arbitrary constant, "tlpresen").
PRESENCE_KEY = 0x746C70726573656E

_DIRECTORY = "runtimes"


class Presence:
    """A runtime's mark on a store, held until :meth:`release`."""

    def __init__(self, token: str, *, path: Path | None = None, session: _Sessions | None = None) -> None:
        self.token = token
        self._path = path
        self._fd: int | None = None
        self._sessions = session
        self._session: Any = None
        if path is not None:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._fd = fd
        elif session is not None:
            self._session = session.hold_advisory_lock(PRESENCE_KEY, shared=True)

    def release(self) -> None:
        if self._fd is not None:
            assert self._path is not None
            with contextlib.suppress(OSError):
                self._path.unlink()
            os.close(self._fd)  # drops the lock
            self._fd = None
        if self._session is not None:
            assert self._sessions is not None
            self._sessions.release_advisory_lock(self._session)
            self._session = None


class _Sessions(Protocol):
    """What presence needs of a database store (PostgreSQL's session advisory locks)."""

    def hold_advisory_lock(self, key: int, *, shared: bool) -> Any: ...
    def release_advisory_lock(self, session: Any) -> None: ...
    def advisory_lock_free(self, key: int) -> bool: ...
    def try_advisory_lock(self, key: int) -> Any: ...


def announce(store: Store, token: str, pid: int) -> Presence | None:
    """Mark the runtime of process ``pid`` present on ``store`` until the mark is released
    (None for a store that keeps no marks)."""
    directory = directory_of(store)
    if directory is not None:
        return Presence(token, path=directory / _DIRECTORY / f"{pid}-{token}.lock")
    sessions = sessions_of(store)
    return None if sessions is None else Presence(token, session=sessions)


def others_present(store: Store, mine: Presence | None) -> list[str]:
    """Descriptions of the other runtimes present on ``store`` (empty: none)."""
    directory = directory_of(store)
    if directory is not None:
        return _other_files(directory / _DIRECTORY, mine._path if mine is not None else None)
    sessions = sessions_of(store)
    if sessions is None:
        return []
    if mine is not None and mine._session is not None:
        # Our own shared lock keeps the exclusive one from being taken: let go of it for the
        # look, then take it again.
        sessions.release_advisory_lock(mine._session)
        try:
            free = sessions.advisory_lock_free(PRESENCE_KEY)
        finally:
            mine._session = sessions.hold_advisory_lock(PRESENCE_KEY, shared=True)
    else:
        free = sessions.advisory_lock_free(PRESENCE_KEY)
    return [] if free else ["another session of this database"]


def _other_files(folder: Path, mine: Path | None) -> list[str]:
    found = []
    for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
        if path == mine:
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue  # released meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            found.append(f"process {path.name.split('-', 1)[0]}")
        else:
            with contextlib.suppress(OSError):
                path.unlink()  # a mark its dead process left behind
        finally:
            os.close(fd)
    return found


def directory_of(store: Store) -> Path | None:
    """The directory of a directory store (or of a wrapper that forwards to one)."""
    path = getattr(store, "path", None)
    return path if isinstance(path, Path) and (path / "store.json").is_file() else None


def sessions_of(store: Store) -> _Sessions | None:
    if all(
        callable(getattr(store, name, None))
        for name in ("hold_advisory_lock", "release_advisory_lock", "advisory_lock_free", "try_advisory_lock")
    ):
        return cast(_Sessions, store)
    return None
