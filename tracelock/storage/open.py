"""Open a store by location: a directory path, or a ``postgresql://`` connection string."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from tracelock.storage.checkpoint_records import CheckpointRecords
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.checkpoints import DirectoryCheckpoints
from tracelock.storage.errors import StoreFormatError
from tracelock.storage.postgres.location import is_postgres_location, redact_location

if TYPE_CHECKING:
    from tracelock.storage.postgres.store import PostgresStore

__all__ = ["backend_of", "checkpoint_records_at", "open_store", "shown_location"]


def open_store(
    location: str | os.PathLike[str],
    *,
    create: bool = True,
    read_only: bool = False,
    clock: Callable[[], int] | None = None,
) -> DirectoryStore | PostgresStore:
    """Open (or create) the store at ``location``.

    ``postgresql://`` (or ``postgres://``) connection strings open the PostgreSQL backend
    (its driver is imported only then); a plain path is the embedded directory store. Any
    other URL scheme is an error rather than a directory named like a URL.
    """
    text = os.fspath(location)
    if is_postgres_location(text):
        from tracelock.storage.postgres.store import PostgresStore

        return PostgresStore(text, create=create, read_only=read_only, clock=clock)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreFormatError(f"no storage backend for {scheme}:// locations in this version")
    return DirectoryStore(text, create=create, read_only=read_only, clock=clock)


def checkpoint_records_at(path: str | os.PathLike[str]) -> CheckpointRecords:
    """The checkpoint records of the directory store at ``path``, read without opening the
    store (its ``checkpoints/`` files)."""
    return DirectoryCheckpoints(path)


def backend_of(location: str | os.PathLike[str]) -> str:
    """The name of the backend a location opens: ``"postgresql"`` or ``"directory"``."""
    return "postgresql" if is_postgres_location(os.fspath(location)) else "directory"


def shown_location(location: str | os.PathLike[str]) -> str:
    """A location as it may be printed (a connection string without its password)."""
    text = os.fspath(location)
    return redact_location(text) if is_postgres_location(text) else text
