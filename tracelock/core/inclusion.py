"""Verifying many inclusion proofs against one tree, sharing the work (RFC 9162 2.1.3.2).

Pure: a bundle verifier checks one proof per entry against the checkpoint's tree, and the
proofs of neighbouring entries share most of their path to the root.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import sha256 as _sha256

from tracelock.core.merkle import HASH_SIZE, ProofRootMismatchError, verify_inclusion

__all__ = ["InclusionVerifier"]


class InclusionVerifier:
    """Verifies many inclusion proofs against one tree (size, root), RFC 9162 2.1.3.2.

    Each proof must have exactly the length ``PATH`` has and 32-byte elements. A node that a
    previous proof established (its position, its hash, and the rest of that proof above it)
    lets a later proof stop as soon as it reaches the same node with the same hash and the
    same remaining elements; reaching it with another hash or other elements is a failure,
    as the full computation would be. The result is the same as verifying each proof alone
    (:func:`tracelock.core.merkle.verify_inclusion`), at a fraction of the hashing when the
    proven leaves are neighbours.
    """

    def __init__(self, size: int, root: bytes) -> None:
        self.size = size
        self.root = bytes(root)
        # (fn, sn) position -> (node hash, the proof that established it, offset of the rest)
        self._known: dict[tuple[int, int], tuple[bytes, tuple[bytes, ...], int]] = {}

    def verify(self, index: int, leaf: bytes, proof: Sequence[bytes]) -> None:
        """Raise a :class:`tracelock.errors.ProofError` unless the proof is valid."""
        size = self.size
        if len(leaf) != HASH_SIZE or len(self.root) != HASH_SIZE or not 0 <= index < size:
            verify_inclusion(index, size, leaf, proof, self.root)  # raises the precise error
            return
        nodes = tuple(proof)
        inner = (index ^ (size - 1)).bit_length()
        expected = inner + (index >> inner).bit_count()  # = len(PATH(index, D[size]))
        if len(nodes) != expected or any(
            type(node) is not bytes or len(node) != HASH_SIZE for node in nodes
        ):
            verify_inclusion(index, size, leaf, nodes, self.root)
            return
        known = self._known
        fn, sn = index, size - 1
        r = leaf
        trail: list[tuple[tuple[int, int], bytes, int]] = []
        for j, p in enumerate(nodes):
            if fn & 1 or fn == sn:
                r = _sha256(b"\x01" + p + r).digest()
                if not fn & 1:
                    while fn and not fn & 1:
                        fn >>= 1
                        sn >>= 1
            else:
                r = _sha256(b"\x01" + r + p).digest()
            fn >>= 1
            sn >>= 1
            position = (fn, sn)
            seen = known.get(position)
            if seen is not None:
                node, other, offset = seen
                if node == r and other[offset:] == nodes[j + 1 :]:
                    self._remember(trail, nodes)
                    return
                break  # another hash (or other siblings) at a proven node: cannot verify
            trail.append((position, r, j + 1))
        else:
            if r == self.root:
                self._remember(trail, nodes)
                return
        verify_inclusion(index, size, leaf, nodes, self.root)  # raises the precise error
        raise ProofRootMismatchError(  # pragma: no cover - the line above raised
            f"inclusion proof of leaf {index} does not lead to the root"
        )

    def _remember(
        self, trail: list[tuple[tuple[int, int], bytes, int]], nodes: tuple[bytes, ...]
    ) -> None:
        for position, node, offset in trail:
            self._known[position] = (node, nodes, offset)
