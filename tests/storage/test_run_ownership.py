"""The run-ownership contract (``Store.ownership()``, tracelock.storage.ownership), one suite
run against every backend: a lease is exclusive while live, taken over only once expired or
once its owner is dead, renewed by its holder, and every append of a run whose lease its
handle lost is refused inside the append; the run queue never takes a run another owner
holds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.storage._lease_holder_child import start_holder
from tracelock.runtime.queue.backends import queue_for
from tracelock.storage.open import open_store
from tracelock.storage.ownership import LeaseLostError


def _expire() -> None:
    """Wait past a lease of 100 ms (both backends measure expiry on a real clock here)."""
    time.sleep(0.25)


def test_a_lease_is_exclusive_until_given_back(location: str) -> None:
    with open_store(location) as first, open_store(location) as second:
        mine, theirs = first.ownership(), second.ownership()
        held = mine.acquire("run-1", "A", 60_000)
        assert held is not None and held.run == "run-1" and held.owner == "A"
        assert theirs.acquire("run-1", "B", 60_000) is None
        assert mine.acquire("run-1", "A", 60_000) is None  # not re-entrant, even for its owner
        other = theirs.acquire("run-2", "B", 60_000)  # another run is independent
        assert other is not None and other.token != held.token
        holder = theirs.holder("run-1")
        assert holder is not None and (holder.owner, holder.token, holder.live) == ("A", held.token, True)
        assert mine.release("run-1", held.token)
        assert not mine.release("run-1", held.token)  # given back once
        assert theirs.holder("run-1") is None
        again = theirs.acquire("run-1", "B", 60_000)
        assert again is not None and again.token > held.token


def test_an_expired_lease_is_taken_over_and_its_old_holder_is_fenced(location: str) -> None:
    with open_store(location) as first, open_store(location) as second:
        held = first.ownership().acquire("run-1", "A", 100)
        assert held is not None
        first.append("run-1", "run.start", payload={"n": 0}, meta={"status": "running"})
        _expire()
        holder = second.ownership().holder("run-1")
        assert holder is not None and not holder.live
        taken = second.ownership().acquire("run-1", "B", 60_000)
        assert taken is not None and taken.token > held.token
        second.append("run-1", "effect", payload={"n": 1})
        for durable in (True, False):
            with pytest.raises(LeaseLostError) as refused:
                first.append("run-1", "effect", payload={"n": 2}, durable=durable)
            assert refused.value.code == "RUN_LEASE_LOST"
            assert refused.value.details["run"] == "run-1"
        # The old holder's heartbeat learns it; the new one's renews.
        assert first.ownership().renew({"run-1": held.token}, 60_000) == {"run-1"}
        assert second.ownership().renew({"run-1": taken.token}, 60_000) == set()
        first.append("free-run", "run.start", payload={}, meta={"status": "running"})  # others unaffected
        assert [entry.kind for entry in second.entries("run-1")] == ["run.start", "effect"]


def test_a_renewed_lease_is_not_taken_over(location: str) -> None:
    with open_store(location) as first, open_store(location) as second:
        held = first.ownership().acquire("run-1", "A", 300)
        assert held is not None
        for _ in range(3):
            time.sleep(0.1)
            assert first.ownership().renew({"run-1": held.token}, 300) == set()
            assert second.ownership().acquire("run-1", "B", 60_000) is None


def test_a_given_back_lease_refuses_its_old_token(location: str) -> None:
    with open_store(location) as store:
        ownership = store.ownership()
        held = ownership.acquire("run-1", "A", 60_000)
        assert held is not None
        store.append("run-1", "run.start", payload={}, meta={"status": "running"})
        ownership.fences.hold("run-1", held.token)  # a stale registration, as a late thread has
        assert ownership.release("run-1", held.token)
        ownership.fences.hold("run-1", held.token)
        with pytest.raises(LeaseLostError):
            store.append("run-1", "effect", payload={"late": True})


def test_a_dead_runtime_s_lease_is_void_at_once(location: str, tmp_path: Path) -> None:
    """A runtime's lease names it; once its process is gone (killed), another caller takes the
    run over without waiting for the lease to expire. A caller whose process lives keeps it."""
    ready = tmp_path / "ready"
    child = start_holder(location, "run-1", ready)
    try:
        with open_store(location) as store:
            holder = store.ownership().holder("run-1")
            assert holder is not None and holder.live and holder.owner.startswith(f"{child.pid}-")
            assert store.ownership().acquire("run-1", "B", 60_000) is None  # it lives
            child.kill()
            child.wait()
            # An hour's lease, void once its owner is seen dead: at once on the directory store
            # (its flock goes with the process); on PostgreSQL, once the server has ended the
            # dead client's session (its advisory lock goes with it), which under load can
            # take the server a moment after the process is gone.
            for _ in range(200):
                holder = store.ownership().holder("run-1")
                if holder is None or not holder.live:
                    break
                time.sleep(0.05)
            assert holder is not None and not holder.live
            taken = store.ownership().acquire("run-1", "B", 60_000)
            assert taken is not None and taken.token > holder.token
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_queue_does_not_take_a_run_another_owner_holds(location: str) -> None:
    with open_store(location) as store, open_store(location) as worker_side:
        queue = queue_for(worker_side)
        try:
            queue.enqueue("run-q", "default", "m:f", b"{}", None)
            held = store.ownership().acquire("run-q", "direct", 60_000)
            assert held is not None
            assert queue.claim(["default"], "W", 1, 60_000, None) == []
            assert store.ownership().release("run-q", held.token)
            [claim] = queue.claim(["default"], "W", 1, 60_000, None)
            assert claim.item.run == "run-q" and claim.token > held.token
            # The worker's lease is the run's lease: no other owner gets it.
            assert store.ownership().acquire("run-q", "direct", 60_000) is None
        finally:
            queue.close()
