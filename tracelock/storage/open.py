"""Open a store by location: a directory path now; ``postgresql://`` URLs when that backend lands."""

from __future__ import annotations

import os
from collections.abc import Callable

from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import StoreFormatError

__all__ = ["open_store"]


def open_store(
    location: str | os.PathLike[str],
    *,
    create: bool = True,
    read_only: bool = False,
    clock: Callable[[], int] | None = None,
) -> DirectoryStore:
    """Open (or create) the store at ``location``.

    A plain path is the embedded directory store. URL schemes are reserved for server
    backends; an unknown scheme is an error rather than a directory named like a URL.
    """
    text = os.fspath(location)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreFormatError(f"no storage backend for {scheme}:// locations in this version")
    return DirectoryStore(text, create=create, read_only=read_only, clock=clock)
