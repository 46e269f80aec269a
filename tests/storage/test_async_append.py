"""Durable appends from coroutines: concurrent tasks of one event loop share each sync, and
every append is durable when its await returns."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tracelock.storage.backend import NewEntry
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import DurabilityError, StoreReadOnlyError
from tracelock.storage.verify import verify_store


def test_concurrent_tasks_share_syncs(store: DirectoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    before = store.sync_count
    log = store._log
    assert log is not None
    real_future = log.durable_future
    covered: list[bool] = []

    def checked(end: int, value: Any) -> Any:
        future = real_future(end, value)
        future.add_done_callback(lambda done: covered.append(log.durable_end >= end))
        return future

    monkeypatch.setattr(log, "durable_future", checked)

    async def writer(number: int) -> None:
        for step in range(25):
            await store.append_async(f"w{number}", "effect", payload={"n": number, "step": step})

    async def main() -> None:
        await asyncio.gather(*(writer(number) for number in range(8)))

    asyncio.run(main())
    assert store.size() == 200
    assert len(covered) == 200 and all(covered)
    # Eight tasks, each waiting on its own append: each sync covers all eight.
    assert 0 < store.sync_count - before <= 200 // 8 + 2
    assert verify_store(store).ok
    assert [entry.i for entry in store.entries("w3")] == list(range(25))


def test_an_awaited_append_is_durable(store: DirectoryStore) -> None:
    log = store._log
    assert log is not None

    async def main() -> None:
        entries = await store.append_many_async([NewEntry("r", "run.start", {"a": 1}), NewEntry("r", "effect")])
        assert [entry.i for entry in entries] == [0, 1]
        assert log.durable_end == log.queued_end

    asyncio.run(main())


def test_a_failed_sync_reaches_every_waiting_task(store: DirectoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: object) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    monkeypatch.setattr(os, "pwritev", failing)  # the write that syncs itself (RWF_DSYNC)

    async def main() -> list[object]:
        results: list[object] = await asyncio.gather(
            *(store.append_async(f"r{number}", "effect") for number in range(4)), return_exceptions=True
        )
        return results

    results = asyncio.run(main())
    assert len(results) == 4 and all(isinstance(result, DurabilityError) for result in results)
    with pytest.raises(DurabilityError):
        store.append("r9", "effect")


def test_a_read_only_store_refuses_async_appends(store_dir: Path) -> None:
    DirectoryStore(store_dir).close()

    async def main(reader: DirectoryStore) -> None:
        await reader.append_async("r", "run.start")

    with DirectoryStore(store_dir, read_only=True) as reader, pytest.raises(StoreReadOnlyError):
        asyncio.run(main(reader))
