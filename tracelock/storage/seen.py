"""A Bloom filter over payload hashes: "certainly not stored" answers without a query.

Most payload look-ups while appending are for new content, which the index cannot have;
the filter answers those from memory. A "maybe" still goes to the index, so a false
positive costs one query and a false negative cannot happen. The digests are uniformly
random already, so their own bytes serve as the filter's hash functions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["PayloadFilter"]

_THREE_WORDS = struct.Struct(">III")  # three probes from the digest's first 12 bytes


class PayloadFilter:
    def __init__(self, expected: int) -> None:
        bits = 1 << max(23, (max(expected, 1) * 16 - 1).bit_length())  # >= 16 bits per item
        self._mask = bits - 1
        self._bits = bytearray(bits // 8)

    def _positions(self, digest: bytes) -> tuple[int, int, int]:
        mask = self._mask
        a, b, c = _THREE_WORDS.unpack_from(digest)
        return a & mask, b & mask, c & mask

    def add(self, digest: bytes) -> None:
        bits = self._bits
        for position in self._positions(digest):
            bits[position >> 3] |= 1 << (position & 7)

    def update(self, digests: Iterable[bytes]) -> None:
        for digest in digests:
            self.add(digest)

    def may_contain(self, digest: bytes) -> bool:
        bits = self._bits
        return all(bits[position >> 3] & (1 << (position & 7)) for position in self._positions(digest))
