"""What a failure of the file system or of SQLite means for a store, as a coded error.

A store's files fail in a few ways a user can act on, each with its own code (docs/errors.md):
the device is full (``STORE_FULL``), this process may not read or write a file
(``STORE_PERMISSION_DENIED``), the file system is mounted read-only (``STORE_READ_ONLY``), a
file of the layout is not what it should be, such as a directory where the journal should
be (``STORE_FORMAT``), an input/output error (``STORE_DURABILITY_FAILED``). Anything else
is a plain ``STORE_ERROR`` that still names the file and the system's reason.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from tracelock.errors import StoreError
from tracelock.storage.errors import (
    DurabilityError,
    StoreFormatError,
    StoreFullError,
    StoreLockedError,
    StorePermissionError,
    StoreReadOnlyError,
)

__all__ = ["READ_ONLY_ERRNOS", "file_error", "index_error", "sqlite_error"]

#: The errors with which a file system refuses a write to a store this process may only read.
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def file_error(exc: OSError, what: str) -> StoreError:
    """The coded error for ``exc``, raised while doing ``what`` (a phrase such as "cannot
    open the store at /srv/store"), naming the file the system named."""
    number = exc.errno
    reason = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename is not None else ""
    details = {"path": None if exc.filename is None else str(exc.filename), "errno": errno.errorcode.get(number or 0)}
    if number in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"{what}: the device is full{where}: {reason}", details=details)
    if number in (errno.EACCES, errno.EPERM):
        return StorePermissionError(
            f"{what}: permission denied{where}: this user may not "
            "read or write that file of the store",
            details=details,
        )
    if number == errno.EROFS:
        return StoreReadOnlyError(
            f"{what}: the file system is read-only{where}; commands that only read "
            "(log, show, verify, export) work on it",
            details=details,
        )
    if number in (errno.EISDIR, errno.ENOTDIR):
        return StoreFormatError(f"{what}: {reason}{where}: not the layout of a tracelock store", details=details)
    if number == errno.EIO:
        return DurabilityError(f"{what}: input/output error{where}", details=details)
    return StoreError(f"{what}: {reason}{where}", details=details)


def index_error(exc: sqlite3.Error, path: Path) -> StoreError:
    """The coded error for a failure of SQLite on the store's index at ``path``."""
    return sqlite_error(exc, path, f"the store's index {path} cannot be written ({exc})") or StoreError(
        f"the store's index {path} cannot be written ({exc})",
        details={"path": str(path), "sqlite_error": getattr(exc, "sqlite_errorname", None)},
    )


def sqlite_error(exc: sqlite3.Error, path: Path, what: str) -> StoreError | None:
    """The coded error for a failure of SQLite on the store's file ``path`` (``what`` says
    what failed), or None when SQLite's code names none of the failures above."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    details = {"path": str(path), "sqlite_error": getattr(exc, "sqlite_errorname", None)}
    if primary == sqlite3.SQLITE_FULL:
        return StoreFullError(f"{what}: the device is full", details=details)
    if primary in (sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_AUTH):
        return StorePermissionError(f"{what}: this user may not write it", details=details)
    if primary == sqlite3.SQLITE_IOERR:
        return DurabilityError(f"{what}: input/output error", details=details)
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreLockedError(f"{what}: another process keeps it locked", details=details)
    return None
