"""Many inclusion proofs in one tree, computed in one pass over its leaves.

A bundle needs a proof for each of its entries against one checkpoint. Asking the store for
each proof separately costs a lookup per proof; when the bundle holds a good share of the
tree, one streaming pass over every leaf hash is much cheaper. The pass keeps only the
perfect subtrees (aligned, ``2^L`` leaves) that some proof needs: the sibling of every
target's ancestor at every level, and the subtrees of the right edge of the tree (the binary
decomposition of its size). Every range an RFC 9162 ``PATH`` asks for is one of those, or a
right-edge range made of them. Memory is proportional to the number of proofs times the
height of the tree, not to the size of the tree.

:func:`judge_tree_mismatch` says which side is wrong when the store's cached tree does not
give a checkpoint's root: the node files (a cache) or the journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from hashlib import sha256 as _sha256

from tracelock.core.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    ProofRootMismatchError,
    inclusion_proof,
    node_hash,
    split_point,
    verify_inclusion,
)
from tracelock.evidence.history import rebuild_advice
from tracelock.storage.backend import Store
from tracelock.storage.merkle_stream import MerkleStream

__all__ = [
    "CACHE_ALTERED",
    "JOURNAL_CHANGED",
    "InclusionVerifier",
    "batch_inclusion_proofs",
    "journal_leaf_hashes",
    "judge_tree_mismatch",
]

#: Which side :func:`judge_tree_mismatch` found wrong.
CACHE_ALTERED = "merkle_cache"
JOURNAL_CHANGED = "journal"


def journal_leaf_hashes(store: Store) -> Iterator[bytes]:
    """The leaf hash of every entry in ``seq`` order, computed from the entries themselves
    (the directory store's journal records, a PostgreSQL store's lines), never from a cache."""
    return store.journal_leaf_hashes()


def judge_tree_mismatch(store: Store, number: int, size: int, root: bytes) -> tuple[str, str]:
    """The store's Merkle tree does not give checkpoint ``number``'s (``size``, ``root``):
    recompute the root of the journal's first ``size`` entries from the journal itself (one
    streamed pass, O(log n) memory) and say which side is wrong, as (side, message)."""
    stream = MerkleStream([size])
    for leaf in journal_leaf_hashes(store):
        if stream.size >= size:
            break
        stream.add((leaf,))
    if size in stream.roots and stream.roots[size] == root:
        return CACHE_ALTERED, (
            f"the store's Merkle node files do not match checkpoint {number}, but its journal "
            f"does: the node files (a cache) were altered. {_sentence(rebuild_advice(store))}"
        )
    if size not in stream.roots:
        return JOURNAL_CHANGED, (
            f"the journal holds {stream.size} entries, checkpoint {number} covers {size}: it was "
            "truncated (entries deleted) since the checkpoint was signed"
        )
    return JOURNAL_CHANGED, (
        f"the journal does not match checkpoint {number}: the root of its first {size} entries "
        "differs from the signed one, so it was rewritten since the checkpoint was signed"
    )


def _needed(targets: Iterable[int], size: int) -> set[tuple[int, int]]:
    keep: set[tuple[int, int]] = set()
    for index in targets:
        level = 0
        while (1 << level) < size:
            keep.add((level, (index >> level) ^ 1))
            level += 1
    for level in range(size.bit_length()):
        if size >> level & 1:
            keep.add((level, (size >> level) - 1))
    return keep


def batch_inclusion_proofs(
    leaf_hashes: Iterable[bytes], size: int, targets: Sequence[int]
) -> tuple[bytes, dict[int, list[bytes]]]:
    """Stream the first ``size`` leaf hashes of a tree; return its root and the inclusion
    proof of every index in ``targets`` (each ``< size``). Raises ``ValueError`` when fewer
    than ``size`` leaf hashes come."""
    if size == 0:
        if targets:
            raise ValueError("no inclusion proof in the empty tree")
        return EMPTY_ROOT, {}
    keep = _needed(targets, size)
    nodes: dict[tuple[int, int], bytes] = {}
    stack: list[tuple[int, bytes]] = []  # (level, hash) of the pending perfect subtrees
    count = 0
    for leaf in leaf_hashes:
        if count == size:
            break
        level, current, index = 0, leaf, count
        if (0, index) in keep:
            nodes[(0, index)] = current
        while stack and stack[-1][0] == level:
            _, left = stack.pop()
            current = node_hash(left, current)
            level += 1
            index >>= 1
            if (level, index) in keep:
                nodes[(level, index)] = current
        stack.append((level, current))
        count += 1
    if count != size:
        raise ValueError(f"the tree has {count} leaves, not {size}")
    cache: dict[tuple[int, int], bytes] = {}

    def subtree(start: int, end: int) -> bytes:
        width = end - start
        if width & (width - 1) == 0 and start % width == 0:
            level = width.bit_length() - 1
            return nodes[(level, start >> level)]
        found = cache.get((start, end))
        if found is None:
            k = split_point(width)
            found = node_hash(subtree(start, start + k), subtree(start + k, end))
            cache[(start, end)] = found
        return found

    root = subtree(0, size)
    return root, {index: inclusion_proof(index, size, subtree) for index in targets}


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


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
