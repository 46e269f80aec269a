"""A PostgreSQL store's checkpoint records (:mod:`tracelock.storage.checkpoint_records`): one
``tracelock_checkpoints`` row per checkpoint (number, note, consistency record, signers'
verifier keys), written in one transaction, with signers serialized by an advisory lock."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from tracelock.core.canonical import dumps, loads
from tracelock.storage.checkpoint_records import Summaries, recorded_keys

__all__ = ["TableCheckpoints"]


class _CheckpointTable(Protocol):
    """What the records need of the store."""

    @property
    def location(self) -> str: ...
    def checkpoint_numbers(self) -> list[int]: ...
    def checkpoint_record(self, number: int) -> tuple[bytes, bytes | None, str] | None: ...
    def checkpoint_lock(self) -> AbstractContextManager[None]: ...
    def add_checkpoint(self, number: int, note: bytes, consistency: bytes | None, vkeys: str) -> None: ...


class TableCheckpoints:
    """A PostgreSQL store's ``tracelock_checkpoints`` table."""

    def __init__(self, store: _CheckpointTable) -> None:
        self.store = store
        self.where = f"the tracelock_checkpoints table of {store.location}"

    def numbers(self) -> list[int]:
        return self.store.checkpoint_numbers()

    def note(self, number: int) -> bytes | None:
        record = self.store.checkpoint_record(number)
        return None if record is None else record[0]

    def consistency(self, number: int) -> bytes | None:
        record = self.store.checkpoint_record(number)
        return None if record is None else record[1]

    def vkeys(self, number: int) -> list[str]:
        record = self.store.checkpoint_record(number)
        try:
            return recorded_keys(loads(record[2])) if record is not None else []
        except ValueError:
            return []

    def place(self, number: int) -> str:
        return f"tracelock_checkpoints/{number}"

    def file(self, number: int) -> Path | None:
        return None

    def locked(self) -> AbstractContextManager[None]:
        return self.store.checkpoint_lock()

    def add(
        self,
        number: int,
        note: bytes,
        consistency: bytes | None,
        vkeys: list[str],
        summary: dict[str, Any],
        summaries: Summaries,
    ) -> None:
        self.store.add_checkpoint(number, note, consistency, dumps(vkeys).decode())

    def index(self, summaries: Summaries) -> list[dict[str, Any]]:
        return [summary | {"vkeys": self.vkeys(int(summary["number"]))} for summary in summaries()]

    def rebuild_index(self, summaries: Summaries) -> None:
        """No index is kept in the database: nothing to rebuild."""
