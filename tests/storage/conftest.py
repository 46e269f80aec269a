from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_server import location, pg_cluster, pg_database, pg_url  # noqa: F401  (the PostgreSQL fixtures, and a store per backend)
from tracelock.storage.directory import DirectoryStore


class TickClock:
    """A deterministic clock for entry timestamps."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: Path) -> Iterator[DirectoryStore]:
    handle = DirectoryStore(store_dir, clock=TickClock())
    yield handle
    handle.close()


def record_run(store: DirectoryStore, run: str, effects: int = 2, *, big: str = "x" * 200) -> None:
    store.append(run, "run.start", payload={"input": run}, meta={"agent": "demo", "status": "running"})
    for number in range(effects):
        store.append(run, "effect", payload={"tool": "t", "n": number, "text": big}, durable=False)
    store.append(run, "run.end", payload={"output": run}, meta={"status": "completed"})
