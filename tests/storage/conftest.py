from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_server import location, pg_cluster, pg_database, pg_url  # noqa: F401  (the PostgreSQL fixtures, and a store per backend)
from tests.storage.storage_helpers import TickClock
from tracelock.storage.directory import DirectoryStore


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: Path) -> Iterator[DirectoryStore]:
    handle = DirectoryStore(store_dir, clock=TickClock())
    yield handle
    handle.close()
