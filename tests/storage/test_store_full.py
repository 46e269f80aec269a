"""A store whose index cannot grow, on a real full file system (a small tmpfs, mounted by the
test: it needs root, as CI has): the append fails with ``STORE_FULL`` and the handle is
dead (every later call raises the same error, closing it does not), a reader still answers
from the journal, and once space is freed the next open indexes what the journal holds."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.small_disk import mounted_tmpfs
from tests.storage.storage_helpers import TickClock
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import StoreFullError
from tracelock.storage.verify import verify_store


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def _fill(path: Path) -> None:
    """Write ``path`` until the file system has no block left."""
    block = b"\xff" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        while True:  # the last partial block
            try:
                if os.write(fd, b"\xff") == 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)


def _lock_is_free(store_dir: Path) -> bool:
    """Whether another process could take the store's writer lock now."""
    fd = os.open(store_dir / "lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_an_index_that_cannot_grow_kills_the_handle(small_disk: Path) -> None:
    store_dir = small_disk / "store"
    store = DirectoryStore(store_dir, clock=TickClock())
    # Written to the journal; their index rows wait for a batch or a read.
    for number in range(1000):
        store.append(f"r{number}", "run.start", payload={"n": number}, meta={"status": "running"}, durable=False)
    _fill(small_disk / "ballast")
    with pytest.raises(StoreFullError) as failed:
        store.runs()  # hands the rows to the index first
    assert "index" in failed.value.message
    # Dead: every later call raises the same failure, appends included.
    for call in (
        lambda: store.append("r0", "effect", payload={"x": 1}),
        lambda: store.runs(),
        lambda: store.entries("r0"),
    ):
        with pytest.raises(StoreFullError) as again:
            call()
        assert again.value is failed.value
    assert _lock_is_free(store_dir)  # a dead handle keeps no other process waiting
    store.close()

    # A reader answers from the journal on the full disk, with an index of its own.
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert reader.size() == 1000
        assert reader.private_index_reason is not None and "index" in reader.private_index_reason
        report = verify_store(reader, compare_index=True)
        assert report.ok and any("cannot write the store's index" in note for note in report.notes)

    (small_disk / "ballast").unlink()
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        assert store.repairs == [] and store.size() == 1000
        assert store.run_info("r999").entries == 1
        store.append("r0", "effect", payload={"x": 1})
        assert verify_store(store, compare_index=True).ok


def test_a_journal_that_cannot_grow_kills_the_handle(small_disk: Path) -> None:
    store_dir = small_disk / "store"
    store = DirectoryStore(store_dir, clock=TickClock())
    store.append("r", "run.start", payload={"n": 0}, meta={"status": "running"})
    _fill(small_disk / "ballast")
    with pytest.raises(StoreFullError) as failed:
        store.append("r", "effect", payload={"big": "y" * 300_000})  # more than its free space
    assert "journal" in failed.value.message
    with pytest.raises(StoreFullError):
        store.append("r", "effect", payload={"small": 1})
    assert _lock_is_free(store_dir)
    store.close()
    (small_disk / "ballast").unlink()
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        assert [entry.kind for entry in store.entries("r")] == ["run.start"]
        store.append("r", "effect", payload={"big": "y" * 300_000})
        assert verify_store(store, compare_index=True).ok
