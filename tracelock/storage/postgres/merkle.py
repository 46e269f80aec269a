"""The Merkle tree of a PostgreSQL store: roots and proofs in O(log n) reads.

``tracelock_merkle_nodes`` keeps the roots of the tree's perfect subtrees of 16 leaves and
more (level >= 4, as the directory store's node files do): node ``idx`` of ``level`` covers
leaves ``[idx * 2**level, (idx + 1) * 2**level)``. Everything below level 4, and the ragged
right edge of a tree, is folded from at most a few stored nodes and at most 15 leaf hashes
per boundary. All hashing is :mod:`tracelock.core.merkle`'s; this module only persists.

The table is a cache of the entries' leaf hashes, like the directory store's node files:
it grows only when a Merkle query needs it (one pass over the leaves it lacks), never on the
path of an append, so a store nobody asks for proofs never pays for it. Two handles growing
it at once insert the same rows (``ON CONFLICT DO NOTHING``); each growth commits whole
16-leaf chunks with every parent they complete, so the stored nodes are always a dense
prefix of the tree. A handle that may not write the table (a role without ``INSERT``)
keeps the nodes it computed in memory instead. A proof asks the database once: the nodes
and leaf hashes it needs are collected first (the proof is planned by the core with a
recording accessor), then read in one query each.

A stored node that is missing (deleted) is recomputed from the leaves; one that was
altered gives wrong proofs, which ``verify --store`` finds by comparing every stored node
with the node the entries give (:class:`NodeTable`, read by
:class:`tracelock.storage.merkle_stream.MerkleStream`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from tracelock.core.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    ProofRequestError,
    consistency_proof,
    inclusion_proof,
    node_hash,
    subtree_root,
)
from tracelock.storage.errors import StoreConnectionError, StoreError


class NodeRows(Protocol):
    """What the tree needs of the PostgreSQL store: its entries' leaf hashes and the rows of
    its node table (a protocol, so that this module does not import the store's)."""

    def _one(self, query: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | None: ...
    def size(self) -> int: ...
    def leaf_hashes(self, start: int, end: int) -> list[bytes]: ...
    def leaves_at(self, seqs: Sequence[int]) -> dict[int, bytes]: ...
    def merkle_nodes(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]: ...
    def merkle_node_counts(self) -> dict[int, int]: ...
    def merkle_node_range(self, level: int, start: int, end: int) -> dict[int, bytes]: ...
    def save_merkle_nodes(self, rows: Sequence[tuple[int, int, bytes]]) -> None: ...

__all__ = ["CHUNK_LEVEL", "MISSING_NODE", "NodeTable", "PostgresMerkle"]

#: Lowest stored level: perfect subtrees of ``2**CHUNK_LEVEL`` leaves.
CHUNK_LEVEL = 4
_CHUNK = 1 << CHUNK_LEVEL
#: Leaf hashes read per query while the table grows.
_GROW_BATCH = 1 << 14
#: Node rows inserted per transaction (cut at chunk boundaries only).
_INSERT_BATCH = 4096
#: What :class:`NodeTable` gives for a node row that is absent inside the stored range.
MISSING_NODE = b"\x00" * HASH_SIZE

_Key = tuple[int, int]


def _parts(start: int, end: int) -> list[tuple[int, int]]:
    """The perfect subtrees (position, level) of the node range ``[start, end)``, largest
    first: one for a perfect range, the ragged right edge's pieces otherwise."""
    width = end - start
    parts: list[tuple[int, int]] = []
    pos = start
    for level in range(width.bit_length() - 1, -1, -1):
        if width >> level & 1:
            parts.append((pos, level))
            pos += 1 << level
    return parts


class PostgresMerkle:
    """Merkle queries over one store handle's tables (see the module doc)."""

    def __init__(self, store: NodeRows) -> None:
        self._store = store
        #: Nodes computed by a handle that could not store them.
        self._memory: dict[_Key, bytes] = {}
        self._memory_size = 0

    # -- growing the node table -------------------------------------------------------
    def _covered(self) -> int:
        """Leaves covered by the stored level-4 nodes (a multiple of 16)."""
        row = self._store._one(
            "SELECT coalesce(max(idx) + 1, 0) FROM tracelock_merkle_nodes WHERE level = %s", (CHUNK_LEVEL,)
        )
        stored = 0 if row is None else int(row[0]) << CHUNK_LEVEL
        return max(stored, self._memory_size)

    def grow(self, size: int) -> None:
        """Store the nodes of every whole chunk of the first ``size`` leaves."""
        target = size - size % _CHUNK
        covered = self._covered()
        if covered >= target:
            return
        # The perfect subtrees of the covered prefix, largest first: the left siblings of
        # everything grown from here.
        frontier = [(covered >> level) - 1 for level in range(63, CHUNK_LEVEL - 1, -1)]
        keys = [
            (level, index)
            for level, index in zip(range(63, CHUNK_LEVEL - 1, -1), frontier, strict=True)
            if covered >> level & 1
        ]
        known = self._nodes(keys)
        stack: list[tuple[int, bytes]] = []
        for key in keys:
            node = known.get(key)
            if node is None:
                node = self._computed(key[1] << key[0], (key[1] + 1) << key[0])
            stack.append((key[0], node))
        pending: list[tuple[int, int, bytes]] = []
        position = covered
        while position < target:
            end = min(target, position + _GROW_BATCH)
            leaves = self._store.leaf_hashes(position, end)
            for offset in range(0, len(leaves), _CHUNK):
                node = subtree_root(leaves[offset : offset + _CHUNK])
                level, index = CHUNK_LEVEL, (position + offset) >> CHUNK_LEVEL
                pending.append((level, index, node))
                while stack and stack[-1][0] == level:
                    node = node_hash(stack.pop()[1], node)
                    level, index = level + 1, index >> 1
                    pending.append((level, index, node))
                stack.append((level, node))
                if len(pending) >= _INSERT_BATCH:
                    self._save(pending, position + offset + _CHUNK)
                    pending = []
            position = end
        if pending:
            self._save(pending, target)

    def _save(self, rows: list[tuple[int, int, bytes]], covered: int) -> None:
        if not self._memory:
            try:
                self._store.save_merkle_nodes(rows)
                return
            except StoreConnectionError:
                raise
            except StoreError:
                pass  # no right to write the cache: keep the nodes for this handle
        self._memory.update(((level, index), node) for level, index, node in rows)
        self._memory_size = covered

    # -- reading ----------------------------------------------------------------------
    def _nodes(self, keys: Iterable[_Key]) -> dict[_Key, bytes]:
        wanted = [key for key in keys if key not in self._memory]
        found = {key: self._memory[key] for key in keys if key in self._memory}
        if wanted:
            found.update(self._store.merkle_nodes(wanted))
        return found

    def _computed(self, start: int, end: int) -> bytes:
        """``MTH`` of leaves ``[start, end)`` from their leaf hashes (a node not stored)."""
        return subtree_root(self._store.leaf_hashes(start, end))

    def _check(self, size: int | None) -> int:
        current = self._store.size()
        if size is None:
            return current
        if not 0 <= size <= current:
            raise ProofRequestError(
                f"tree size {size} is not between 0 and the current size {current}",
                details={"size": size, "current_size": current},
            )
        return size

    def _answer(self, size: int, plan: Callable[[Callable[[int, int], bytes]], Any]) -> Any:
        """Run ``plan`` (a core proof or root computation over a subtree accessor) twice:
        first to learn which stored nodes and leaves it needs, then with them read."""
        self.grow(size)
        ranges: list[tuple[int, int]] = []

        def record(start: int, end: int) -> bytes:
            ranges.append((start, end))
            return EMPTY_ROOT

        plan(record)
        node_keys: set[_Key] = set()
        leaf_seqs: set[int] = set()
        for start, end in ranges:
            for pos, level in _parts(start, end):
                if level >= CHUNK_LEVEL:
                    node_keys.add((level, pos >> level))
                else:
                    leaf_seqs.update(range(pos, pos + (1 << level)))
        nodes = self._nodes(node_keys)
        leaves = self._store.leaves_at(sorted(leaf_seqs)) if leaf_seqs else {}

        def perfect(pos: int, level: int) -> bytes:
            if level >= CHUNK_LEVEL:
                found = nodes.get((level, pos >> level))
                if found is None:  # absent from the cache: from the leaves
                    found = nodes[(level, pos >> level)] = self._computed(pos, pos + (1 << level))
                return found
            return subtree_root([leaves[seq] for seq in range(pos, pos + (1 << level))])

        def subtree(start: int, end: int) -> bytes:
            pieces = [perfect(pos, level) for pos, level in _parts(start, end)]
            acc = pieces[-1]
            for piece in reversed(pieces[:-1]):
                acc = node_hash(piece, acc)
            return acc

        return plan(subtree)

    def root(self, size: int | None = None) -> bytes:
        n = self._check(size)
        if n == 0:
            return EMPTY_ROOT
        result: bytes = self._answer(n, lambda subtree: subtree(0, n))
        return result

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        n = self._check(size)
        proof: list[bytes] = self._answer(n, lambda subtree: inclusion_proof(index, n, subtree))
        return proof

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        n = self._check(size2)
        self._check(size1)
        proof: list[bytes] = self._answer(n, lambda subtree: consistency_proof(size1, n, subtree))
        return proof


class NodeTable:
    """The stored nodes as :class:`tracelock.storage.merkle_stream.MerkleStream` compares
    them with the entries: a level's count is one past its highest stored index, and a row
    absent below that reads as :data:`MISSING_NODE` (so a deleted node is found too)."""

    def __init__(self, store: NodeRows) -> None:
        self._store = store
        self._counts = store.merkle_node_counts()

    def stored_levels(self) -> list[int]:
        return sorted(self._counts)

    def stored_count(self, level: int) -> int:
        return self._counts.get(level, 0)

    def stored_nodes(self, level: int, start: int, end: int) -> bytes:
        found = self._store.merkle_node_range(level, start, end)
        return b"".join(found.get(index, MISSING_NODE) for index in range(start, end))

    def close(self) -> None:
        """Nothing to release (the rows are read through the store's pool)."""
