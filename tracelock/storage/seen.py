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

    def add(self, digest: bytes) -> None:
        bits, mask = self._bits, self._mask
        a, b, c = _THREE_WORDS.unpack_from(digest)
        a, b, c = a & mask, b & mask, c & mask
        bits[a >> 3] |= 1 << (a & 7)
        bits[b >> 3] |= 1 << (b & 7)
        bits[c >> 3] |= 1 << (c & 7)

    def update(self, digests: Iterable[bytes]) -> None:
        for digest in digests:
            self.add(digest)

    def may_contain(self, digest: bytes) -> bool:
        # Written out (no loop, no generator): it runs for every new payload appended.
        bits, mask = self._bits, self._mask
        a, b, c = _THREE_WORDS.unpack_from(digest)
        a, b, c = a & mask, b & mask, c & mask
        return bool(bits[a >> 3] >> (a & 7) & bits[b >> 3] >> (b & 7) & bits[c >> 3] >> (c & 7) & 1)
