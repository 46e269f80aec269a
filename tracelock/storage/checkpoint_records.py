"""Where a store keeps its checkpoint history: the contract each backend implements
(``Store.checkpoint_records()``). The history itself, its numbering, signing and every check,
is the same code for every backend (``tracelock.evidence.history``); a backend only keeps the
records: per checkpoint, its signed note, the consistency record from the previous one, and
the verifier keys of its signers.

A read that fails for another reason than absence raises ``OSError`` (the history says which
checkpoint and where); an absent record is None.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

__all__ = ["CHECKPOINT_DIR", "CheckpointRecords", "Summaries", "recorded_keys"]

#: The folder of a directory store that holds its checkpoints.
CHECKPOINT_DIR = "checkpoints"

#: Each checkpoint's summary (``StoredCheckpoint.to_dict()``), in number order, as the
#: history makes them from the notes: what an index of the records is rebuilt from.
Summaries = Callable[[], list[dict[str, Any]]]


def recorded_keys(value: Any) -> list[str]:
    """The strings of a JSON list (a recorded ``vkeys``); [] for anything else."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


class CheckpointRecords(Protocol):
    """The checkpoint records of one store."""

    #: Where the records are kept, for people.
    where: str

    def numbers(self) -> list[int]:
        """The numbers of the checkpoints kept, ascending."""
        ...

    def note(self, number: int) -> bytes | None: ...

    def consistency(self, number: int) -> bytes | None: ...

    def vkeys(self, number: int) -> list[str]:
        """The verifier keys recorded for checkpoint ``number``'s signers ([] if unknown)."""
        ...

    def place(self, number: int) -> str:
        """Where checkpoint ``number`` is kept, relative to the store (a file, a row)."""
        ...

    def file(self, number: int) -> Path | None:
        """The file checkpoint ``number``'s note is kept in (None: not a file)."""
        ...

    def locked(self) -> AbstractContextManager[None]:
        """Serialize the signers of this store's checkpoints (any process, any machine)."""
        ...

    def add(
        self,
        number: int,
        note: bytes,
        consistency: bytes | None,
        vkeys: list[str],
        summary: dict[str, Any],
        summaries: Summaries,
    ) -> None:
        """Keep checkpoint ``number`` durably (``summary``: its ``StoredCheckpoint.to_dict()``;
        ``summaries``: every kept checkpoint's, for an index that must be rebuilt)."""
        ...

    def index(self, summaries: Summaries) -> list[dict[str, Any]]:
        """One document per checkpoint: its summary and ``vkeys``."""
        ...

    def rebuild_index(self, summaries: Summaries) -> None:
        """Rewrite a kept index from the notes (nothing to do where none is kept)."""
        ...
