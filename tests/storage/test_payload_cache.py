"""The directory store's bounded cache of payload locations, and the store with a cache
small enough to drop locations: a payload appended again after its location was dropped
is still found and stored once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory import store as directory_store
from tracelock.storage.directory.payload_cache import PayloadCache
from tracelock.storage.verify import verify_store


def digest(number: int) -> bytes:
    return number.to_bytes(32, "big")


def test_the_cache_keeps_the_last_locations_and_says_when_it_dropped_one() -> None:
    cache = PayloadCache(4)
    for number in range(7):
        cache.put(digest(number), (number, 1))
    assert not cache.dropped  # 0-3 moved to the old generation, none dropped yet
    assert all(digest(number) in cache for number in range(7))
    cache.put(digest(7), (7, 1))  # the young generation is full again: 0-3 are dropped
    assert cache.dropped
    assert [cache.get(digest(number)) for number in range(8)] == [None] * 4 + [(number, 1) for number in range(4, 8)]


def test_a_hit_in_the_old_generation_keeps_the_location() -> None:
    cache = PayloadCache(2)
    cache.put(digest(0), (0, 1))
    cache.put(digest(1), (1, 1))  # both old now
    assert cache.get(digest(0)) == (0, 1)  # back to the young generation
    cache.put(digest(2), (2, 1))  # young full: the old one (with 1) is dropped
    assert cache.get(digest(0)) == (0, 1)
    assert cache.get(digest(1)) is None
    assert sorted(cache) == [digest(0), digest(2)]


def test_a_store_whose_cache_dropped_a_payload_stores_it_once_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(directory_store, "_PAYLOAD_CACHE", 8)
    with DirectoryStore(tmp_path / "store") as store:
        for number in range(40):
            store.append(f"r{number}", "effect", payload={"n": number})
        assert store._payloads.dropped and store._filter is not None
        again = store.append("r0", "effect", payload={"n": 3})  # dropped from the cache long ago
        fresh = store.append("r0", "effect", payload={"n": 1000})
        kept = store.append("r0", "effect", payload={"n": 39})  # still cached
        assert again.payload is not None and fresh.payload is not None and kept.payload is not None
        assert store.get_payload(again.payload) == {"n": 3}
        assert verify_store(store).ok
    journal = (tmp_path / "store" / "journal.log").read_bytes()
    for payload in (again.payload, fresh.payload, kept.payload):
        assert journal.count(b"=" + payload.encode() + b" ") == 1
