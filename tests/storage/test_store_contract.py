"""The ``Store`` contract (tracelock.storage.backend), one suite run against every backend:
what the layers above storage may rely on, through the protocol alone. The run-ownership part
of the contract has its own suite (test_run_ownership.py)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from tracelock.core.canonical import dumps
from tracelock.core.merkle import leaf_hash, root, verify_consistency, verify_inclusion
from tracelock.storage.backend import NO_PAYLOAD, NewEntry, Store
from tracelock.storage.errors import RunNotFoundError, StoreReadOnlyError
from tracelock.storage.open import backend_of, open_store
from tracelock.storage.verify import verify_store


def _fill(store: Store) -> None:
    store.append("run-a", "run.start", payload={"input": 1}, meta={"status": "running", "agent": "a"})
    store.append("run-a", "effect", payload={"big": "x" * 300}, durable=False)
    store.append_held("run-a", "effect", payload={"held": True})
    store.append_many([NewEntry("run-b", "run.start", {"input": 2}, {"status": "running"}), NewEntry("run-a", "effect")])
    store.append("run-a", "run.end", payload={"output": 3}, meta={"status": "completed"})
    store.sync()


def test_appends_chain_each_run_and_number_the_store(location: str) -> None:
    with open_store(location) as store:
        assert isinstance(store, Store)
        assert store.backend == backend_of(location)
        _fill(store)
        entries = list(store.iter_entries())
        assert [entry.seq for entry in entries] == list(range(len(entries)))
        assert store.size() == len(entries) == 6
        for run in ("run-a", "run-b"):
            chain = store.entries(run)
            assert [entry.i for entry in chain] == list(range(len(chain)))
            assert [entry.prev for entry in chain] == [None] + [entry.hash for entry in chain[:-1]]
        info = store.run_info("run-a")
        assert (info.status, info.entries, info.first_seq, info.last_seq) == ("completed", 5, 0, 5)
        assert {run.run for run in store.runs()} == {"run-a", "run-b"}
        assert [run.run for run in store.runs(status="running")] == ["run-b"]
        with pytest.raises(RunNotFoundError):
            store.entries("run-none")
        footprint = store.footprint()
        assert (footprint.runs, footprint.open_runs, footprint.entries) == (2, 1, 6)
        assert footprint.bytes["total"] > 0


def test_payloads_are_content_addressed_and_can_be_erased(location: str) -> None:
    with open_store(location) as store:
        _fill(store)
        big = store.entries("run-a")[1]
        assert big.payload == hashlib.sha256(dumps({"big": "x" * 300})).hexdigest()
        assert store.get_payload(big.payload) == {"big": "x" * 300}
        assert store.get_payload_bytes(big.payload) == dumps({"big": "x" * 300})
        digests = [entry.payload for entry in store.entries("run-a") if entry.payload is not None]
        assert set(store.get_payloads_bytes(digests)) == set(digests)
        assert store.payload_state(big.payload) == "present"
        assert store.payload_state("0" * 64) == "missing"
        assert store.entries("run-a")[3].payload is None  # NO_PAYLOAD
        store.append("tracelock:admin", "payload.redact", payload={"digest": big.payload})
        assert store.erase_payload(big.payload)
        assert store.payload_state(big.payload) == "redacted"
        assert big.payload not in store.get_payloads_bytes([big.payload])


def test_the_merkle_tree_is_over_every_entry_line(location: str) -> None:
    with open_store(location) as store:
        _fill(store)
        leaves = [leaf_hash(entry.line) for entry in store.iter_entries()]
        assert list(store.journal_leaf_hashes()) == leaves
        size = store.tree_size()
        assert size == len(leaves)
        assert store.tree_root() == root(leaves)
        assert store.tree_root(3) == root(leaves[:3])
        for seq in range(size):
            verify_inclusion(seq, size, leaves[seq], store.inclusion_proof(seq), store.tree_root())
        verify_consistency(2, size, store.consistency_proof(2), root(leaves[:2]), store.tree_root())
        _, problem = store.merkle_cache()
        assert problem is None
        assert store.merkle_rebuild_advice()


def test_async_appends_share_the_loop(location: str) -> None:
    with open_store(location) as store:

        async def append_all() -> list[int]:
            made = await asyncio.gather(
                *(store.append_async(f"run-{n}", "run.start", payload={"n": n}, meta={"status": "running"}) for n in range(5)),
                store.append_many_async([NewEntry("run-x", "run.start", NO_PAYLOAD, {"status": "running"})]),
            )
            return [entry.seq for entry in made[:5]] + [made[5][0].seq]

        seqs = asyncio.run(append_all())
        assert sorted(seqs) == list(range(6))
        assert verify_store(store).ok


def test_a_coroutine_appends_without_a_sync_and_makes_held_entries_durable(location: str) -> None:
    """``append_async(durable=False)`` leaves the entry where ``append(durable=False)`` would;
    ``sync_async`` makes everything appended before it durable: a handle opened afterwards
    (another process, after this one's crash) reads every entry."""
    with open_store(location) as store:

        async def append_all() -> list[int]:
            start = await store.append_async("run-s", "run.start", payload={"n": 1}, meta={"status": "running"}, durable=False)
            store.append_held("run-s", "effect", payload={"held": True})
            await store.sync_async()
            await store.sync_async()  # nothing more to make durable: done at once
            return [start.seq]

        assert asyncio.run(append_all()) == [0]
        with open_store(location) as other:
            assert [entry.kind for entry in other.entries("run-s")] == ["run.start", "effect"]


def test_checkpoint_records_are_kept_where_the_backend_keeps_them(location: str) -> None:
    with open_store(location) as store:
        _fill(store)
        records = store.checkpoint_records()
        assert records.numbers() == [] and records.note(1) is None
        summaries = lambda: [{"number": 1}]  # noqa: E731
        with records.locked():
            records.add(1, b"note one\n", None, ["vkey"], {"number": 1}, summaries)
        again = store.checkpoint_records()
        assert again.numbers() == [1]
        assert again.note(1) == b"note one\n" and again.consistency(1) is None
        assert again.vkeys(1) == ["vkey"]
        assert again.place(1)
        assert [line["number"] for line in again.index(summaries)] == [1]


def test_the_run_queue_exists_once_someone_queues(location: str) -> None:
    with open_store(location) as store:
        _fill(store)
        assert not store.has_queue()
        queue = store.queue()
        assert queue is store.queue()
        queue.enqueue("run-q", "default", "m:f", b"{}", None)
        assert store.has_queue()
        store.close_queue()
        assert store.queue() is not queue  # made afresh after close
        assert store.queue().item("run-q") is not None


def test_a_read_only_handle_reads_and_owns_nothing(location: str) -> None:
    with open_store(location) as writer:
        _fill(writer)
    with open_store(location, create=False, read_only=True) as reader:
        assert reader.read_only and reader.damage is None
        assert reader.size() == 6
        assert verify_store(reader).ok
        with pytest.raises(StoreReadOnlyError):
            reader.ownership()
        with pytest.raises(StoreReadOnlyError):
            reader.append("run-c", "run.start", payload={}, meta={"status": "running"})
