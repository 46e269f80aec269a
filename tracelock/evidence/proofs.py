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

from tracelock.core.merkle import (
    EMPTY_ROOT,
    inclusion_proof,
    node_hash,
    split_point,
)
from tracelock.evidence.history import rebuild_advice
from tracelock.storage.backend import Store
from tracelock.storage.merkle_stream import MerkleStream

__all__ = [
    "CACHE_ALTERED",
    "JOURNAL_CHANGED",
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


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
