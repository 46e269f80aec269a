"""Fencing at the store: two handles of one store (two workers), a lease taken over after it
expired, and every later append of the first holder refused inside the append itself, on
both backends, while the new holder's appends go on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tracelock.runtime.queue.backends import queue_for
from tracelock.storage.open import open_store
from tracelock.storage.queue_backend import LeaseLostError


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@contextmanager
def two_workers(location: str, clock: Clock) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Two handles of one store, each with its queue: (first, second, queue_a, queue_b)."""
    first, second = open_store(location), open_store(location)
    try:
        yield first, second, queue_for(first, clock_ms=clock), queue_for(second, clock_ms=clock)
    finally:
        for store in (first, second):
            queue_for(store).close()
            store.close()


def test_a_lost_lease_refuses_every_append_of_the_old_holder(location: str) -> None:
    clock = Clock()
    with two_workers(location, clock) as (first, second, queue_a, queue_b):
        queue_a.enqueue("r1", "default", "m:f", b"{}", None)
        [held] = queue_a.claim(["default"], "A", 1, 100, None)
        queue_a.fences.hold("r1", held.token)
        first.append("r1", "run.start", payload={"n": 0}, meta={"status": "running"})
        assert queue_b.claim(["default"], "B", 1, 10_000, None) == []  # A's lease is live
        clock.now += 10_000
        if location.startswith("postgresql"):
            import time

            time.sleep(0.2)  # PostgreSQL measures leases on the server's clock
        [taken] = queue_b.claim(["default"], "B", 1, 10_000, None)
        assert taken.recovered and taken.token > held.token
        queue_b.fences.hold("r1", taken.token)
        second.append("r1", "effect", payload={"n": 1})
        with pytest.raises(LeaseLostError) as refused:
            first.append("r1", "effect", payload={"n": 2})
        assert refused.value.code == "RUN_LEASE_LOST"
        with pytest.raises(LeaseLostError):
            first.append("r1", "effect", payload={"n": 3}, durable=False)
        # A's heartbeat learns it too; B's renews.
        assert queue_a.heartbeat("A", {"r1": held.token}, 10_000) == {"r1"}
        assert queue_b.heartbeat("B", {"r1": taken.token}, 10_000) == set()
        # Another run of A is not affected.
        first.append("free-run", "run.start", payload={}, meta={"status": "running"})
        second.append("r1", "run.end", payload={}, meta={"status": "completed"})
        assert queue_b.finish("r1", taken.token, "done", "completed")
        with pytest.raises(LeaseLostError):
            first.append("r1", "effect", payload={"n": 4})
        kinds = [(entry.kind, entry.payload) for entry in second.entries("r1")]
        assert [kind for kind, _ in kinds] == ["run.start", "effect", "run.end"]


def test_a_handed_back_run_refuses_its_old_token(location: str) -> None:
    store = open_store(location)
    try:
        queue = queue_for(store)
        queue.enqueue("r2", "default", "m:f", b"{}", None)
        [held] = queue.claim(["default"], "A", 1, 60_000, None)
        queue.fences.hold("r2", held.token)
        store.append("r2", "run.start", payload={}, meta={"status": "running"})
        assert queue.hand_back("r2", held.token)
        with pytest.raises(LeaseLostError):
            store.append("r2", "effect", payload={"late": True})
        assert queue.item("r2").state == "queued"  # type: ignore[union-attr]
        [again] = queue.claim(["default"], "B", 1, 60_000, None)
        assert not again.recovered and again.token != held.token
    finally:
        queue_for(store).close()
        store.close()


def test_the_one_call_append_refuses_a_lease_that_changed_hands(pg_url: str) -> None:
    """On PostgreSQL a handle that nobody else appended behind sends its batch in one call
    of the append function, which checks the leases itself: a takeover that appended
    nothing leaves the handle's guess of the head right, so only that check stops it."""
    import time

    clock = Clock()
    with two_workers(pg_url, clock) as (first, second, queue_a, queue_b):
        queue_a.enqueue("r3", "default", "m:f", b"{}", None)
        [held] = queue_a.claim(["default"], "A", 1, 100, None)
        queue_a.fences.hold("r3", held.token)
        for number in range(3):
            first.append("r3", "effect" if number else "run.start", payload={"n": number})
        assert "r3" in first._heads  # type: ignore[attr-defined]  # its next append is one call
        time.sleep(0.2)  # the lease (100 ms, on the server's clock) expires
        [taken] = queue_b.claim(["default"], "B", 1, 10_000, None)
        queue_b.fences.hold("r3", taken.token)
        with pytest.raises(LeaseLostError):
            first.append("r3", "effect", payload={"n": 3})
        second.append("r3", "effect", payload={"n": 4})
        assert len(second.entries("r3")) == 4  # the refused append left nothing
