"""Slot leases on the directory store (tracelock.storage.directory.ownership): the lease of a
run under a fresh id, kept in its runtime's mapped presence file instead of a row of
``queue.sqlite``, is as good as a row: exclusive while live (every other caller and the run
queue see it), taken over once expired or once its owner is dead, with the old holder's
appends refused for good, and still held when its runtime lets go of its mark."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.storage._lease_holder_child import start_holder
from tracelock.runtime.queue.backends import queue_for
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.ownership import LeaseLostError


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[DirectoryStore, DirectoryStore]]:
    """Two handles of one store (as two processes have)."""
    first, second = DirectoryStore(tmp_path / "store"), DirectoryStore(tmp_path / "store")
    try:
        yield first, second
    finally:
        queue_for(second).close()
        first.close()
        second.close()


def _mark(store: DirectoryStore, token: str) -> tuple[Any, str]:
    mark = store.ownership().announce(token, os.getpid())
    assert mark is not None
    return mark, f"{os.getpid()}-{token}"


def _rows(store: DirectoryStore) -> list[tuple[Any, ...]]:
    with sqlite3.connect(store.path / "queue.sqlite") as conn:
        return conn.execute("SELECT run, worker, token FROM leases ORDER BY run").fetchall()


def test_a_slot_lease_is_exclusive_and_every_caller_and_the_queue_see_it(stores: tuple[DirectoryStore, DirectoryStore]) -> None:
    first, second = stores
    mark, owner = _mark(first, "aa11")
    held = first.ownership().acquire_fresh("run-fresh", owner, 60_000)
    assert held is not None and held.owner == owner
    assert _rows(first) == []  # a slot, not a row
    first.append("run-fresh", "run.start", payload={}, meta={"status": "running"}, new_run=True)
    theirs = second.ownership()
    assert theirs.acquire("run-fresh", "B", 60_000) is None
    holder = theirs.holder("run-fresh")
    assert holder is not None and (holder.owner, holder.token, holder.live) == (owner, held.token, True)
    queue = queue_for(second)
    queue.enqueue("run-fresh", "default", "m:f", b"{}", None)
    assert queue.claim(["default"], "W", 1, 60_000, None) == []  # the queue does not take it
    assert first.ownership().release("run-fresh", held.token)
    assert not first.ownership().release("run-fresh", held.token)  # given back once
    assert theirs.holder("run-fresh") is None
    [claim] = queue.claim(["default"], "W", 1, 60_000, None)
    assert claim.item.run == "run-fresh" and claim.token != held.token
    mark.release()


def test_an_expired_slot_lease_is_taken_over_and_its_old_holder_stays_fenced(
    stores: tuple[DirectoryStore, DirectoryStore],
) -> None:
    """Refused before and after the new holder gave the run back: the take-over recorded the
    old token void, which no row shows once the new holder's row is gone."""
    first, second = stores
    mark, owner = _mark(first, "bb22")
    held = first.ownership().acquire_fresh("run-f", owner, 100)
    assert held is not None
    first.append("run-f", "run.start", payload={"n": 0}, meta={"status": "running"}, new_run=True)
    time.sleep(0.25)  # past the lease
    holder = second.ownership().holder("run-f")
    assert holder is not None and holder.owner == owner and not holder.live
    taken = second.ownership().acquire("run-f", "B", 60_000)
    assert taken is not None and taken.token != held.token
    assert second.ownership().acquire("run-f", "C", 60_000) is None  # the new holder's, live
    second.append("run-f", "effect", payload={"n": 1})
    for durable in (True, False):
        with pytest.raises(LeaseLostError) as refused:
            first.append("run-f", "effect", payload={"n": 2}, durable=durable)
        assert refused.value.details == {"run": "run-f", "token": held.token, "current": taken.token}
    assert first.ownership().renew({"run-f": held.token}, 60_000) == {"run-f"}
    assert second.ownership().release("run-f", taken.token)
    with pytest.raises(LeaseLostError):
        first.append("run-f", "effect", payload={"n": 3})
    assert not first.ownership().release("run-f", held.token)
    assert [entry.kind for entry in second.entries("run-f")] == ["run.start", "effect"]
    mark.release()


def test_a_renewed_slot_lease_is_not_taken_over(stores: tuple[DirectoryStore, DirectoryStore]) -> None:
    first, second = stores
    mark, owner = _mark(first, "cc33")
    held = first.ownership().acquire_fresh("run-r", owner, 300)
    assert held is not None
    for _ in range(3):
        time.sleep(0.1)
        assert first.ownership().renew({"run-r": held.token}, 300) == set()
        assert second.ownership().acquire("run-r", "B", 60_000) is None
    mark.release()


def test_a_dead_runtime_s_slot_lease_is_void_at_once(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    ready = tmp_path / "ready"
    child = start_holder(location, "run-fresh", ready, "fresh")
    try:
        with DirectoryStore(location) as store:
            assert _rows(store) == []
            holder = store.ownership().holder("run-fresh")
            assert holder is not None and holder.live and holder.owner.startswith(f"{child.pid}-")
            assert store.ownership().acquire("run-fresh", "B", 60_000) is None  # it lives
            child.kill()
            child.wait()
            holder = store.ownership().holder("run-fresh")
            assert holder is not None and not holder.live  # an hour's lease, void: its owner died
            assert store.ownership().acquire("run-fresh", "B", 60_000) is not None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_runtime_letting_go_of_its_mark_keeps_its_slot_leases(stores: tuple[DirectoryStore, DirectoryStore]) -> None:
    """The leases become rows before the mark goes: still held, still fenced, then given
    back as rows."""
    first, second = stores
    mark, owner = _mark(first, "dd44")
    held = first.ownership().acquire_fresh("run-m", owner, 60_000)
    assert held is not None
    first.append("run-m", "run.start", payload={}, meta={"status": "running"}, new_run=True)
    mark.release()
    assert not (first.path / "runtimes" / f"{owner}.lock").exists()
    assert _rows(first) == [("run-m", owner, held.token)]
    assert second.ownership().acquire("run-m", "B", 60_000) is None
    first.append("run-m", "effect", payload={"n": 1})
    assert first.ownership().release("run-m", held.token)
    assert _rows(first) == []
    assert second.ownership().acquire("run-m", "B", 60_000) is not None
    first.ownership().fences.hold("run-m", held.token)  # a late thread's stale registration
    with pytest.raises(LeaseLostError):
        first.append("run-m", "effect", payload={"late": True})
