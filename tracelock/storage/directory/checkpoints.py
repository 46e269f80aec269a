"""A directory store's checkpoint records (:mod:`tracelock.storage.checkpoint_records`),
files inside the store directory::

    checkpoints/00000001.note               signed checkpoint 1 (c2sp tlog-checkpoint note)
    checkpoints/00000002.consistency.json   consistency proof from checkpoint 1 to 2
    checkpoints/00000002.note
    ...
    checkpoints/index.jsonl                 one canonical JSON line per checkpoint (a cache)
    checkpoints/lock                        serializes signers

The note files are the history; ``index.jsonl`` is a convenience for people and tools, and
is rewritten from the notes whenever it disagrees with them.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracelock.core.canonical import dumps, loads
from tracelock.storage.checkpoint_records import CHECKPOINT_DIR, Summaries, recorded_keys
from tracelock.storage.directory.files import write_durably

__all__ = ["INDEX_FILE", "DirectoryCheckpoints"]

INDEX_FILE = "index.jsonl"
_NOTE_FILE = re.compile(r"([0-9]{8})\.note")


class DirectoryCheckpoints:
    """``<store>/checkpoints``: one note file per checkpoint, one consistency file, and
    ``index.jsonl`` (a cache rewritten from the notes)."""

    def __init__(self, store_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(store_dir) / CHECKPOINT_DIR
        self.where = str(self.directory)

    def numbers(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(
            int(match.group(1))
            for name in os.listdir(self.directory)
            if (match := _NOTE_FILE.fullmatch(name)) is not None
        )

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def note(self, number: int) -> bytes | None:
        return self._read(self.directory / f"{number:08d}.note")

    def consistency(self, number: int) -> bytes | None:
        return self._read(self.directory / f"{number:08d}.consistency.json")

    def vkeys(self, number: int) -> list[str]:
        """The signer keys ``index.jsonl`` records for checkpoint ``number`` (read only:
        [] when the cache lacks them)."""
        try:
            lines = [loads(line) for line in (self.directory / INDEX_FILE).read_bytes().splitlines() if line]
        except (OSError, ValueError):
            return []
        for line in lines:
            if isinstance(line, dict) and line.get("number") == number:
                return recorded_keys(line.get("vkeys"))
        return []

    def place(self, number: int) -> str:
        return f"{CHECKPOINT_DIR}/{number:08d}.note"

    def file(self, number: int) -> Path | None:
        return self.directory / f"{number:08d}.note"

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def add(
        self,
        number: int,
        note: bytes,
        consistency: bytes | None,
        vkeys: list[str],
        summary: dict[str, Any],
        summaries: Summaries,
    ) -> None:
        if consistency is not None:
            write_durably(self.directory / f"{number:08d}.consistency.json", consistency)
        write_durably(self.directory / f"{number:08d}.note", note)
        line = dumps(summary | {"vkeys": vkeys}) + b"\n"
        path = self.directory / INDEX_FILE
        if self._index_lines() != number - 1:
            self.rebuild_index(summaries)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _index_lines(self) -> int:
        try:
            return (self.directory / INDEX_FILE).read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def index(self, summaries: Summaries) -> list[dict[str, Any]]:
        path = self.directory / INDEX_FILE
        try:
            lines = [loads(line) for line in path.read_bytes().splitlines() if line]
        except (OSError, ValueError):
            lines = []
        if [line.get("number") if isinstance(line, dict) else None for line in lines] != self.numbers():
            self.rebuild_index(summaries)
            lines = [loads(line) for line in path.read_bytes().splitlines() if line]
        return [line for line in lines if isinstance(line, dict)]

    def rebuild_index(self, summaries: Summaries) -> None:
        """Rewrite ``index.jsonl`` from the note files (signer keys are then unknown)."""
        lines = [dumps(summary | {"vkeys": []}) + b"\n" for summary in summaries()]
        self.directory.mkdir(parents=True, exist_ok=True)
        write_durably(self.directory / INDEX_FILE, b"".join(lines))
