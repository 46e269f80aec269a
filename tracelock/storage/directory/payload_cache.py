"""Where a handle's recent payload records are: digest -> (offset, length), bounded.

A payload appended again (the same prompt, the same tool result) is located here instead of
in the index, and so is one read again. The bound keeps a long-lived writer's memory flat.

Two generations of plain dicts rather than a least-recently-used order: new locations go to
the young dict; when it is full it becomes the old one and the old one is dropped, and a hit
in the old one moves back to the young. Every operation is a dict operation; an LRU's
per-insert eviction walked a linked list of cold nodes, which cost a writer of 40,000 runs
about 2 µs per new payload once the cache had filled (measured with the README's workload,
docs/performance.md). The cache holds the last ``generation`` to ``2 * generation`` locations.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["PayloadCache"]

Location = tuple[int, int]


class PayloadCache:
    __slots__ = ("_generation", "_old", "_young", "dropped")

    def __init__(self, generation: int) -> None:
        self._generation = generation
        self._young: dict[bytes, Location] = {}
        self._old: dict[bytes, Location] = {}
        #: True once a location was dropped: a miss is then no longer proof of absence.
        self.dropped = False

    def get(self, digest: bytes) -> Location | None:
        location = self._young.get(digest)
        if location is None:
            location = self._old.pop(digest, None)
            if location is not None:
                self.put(digest, location)
        return location

    def put(self, digest: bytes, location: Location) -> None:
        young = self._young
        young[digest] = location
        if len(young) >= self._generation:
            if self._old:
                self.dropped = True
            self._old = young
            self._young = {}

    def __contains__(self, digest: object) -> bool:
        return digest in self._young or digest in self._old

    def __iter__(self) -> Iterator[bytes]:
        """Every digest held (one put again while in the old generation, twice)."""
        yield from self._young
        yield from self._old
