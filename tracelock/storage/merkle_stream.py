"""The RFC 9162 root of a journal computed while it is read, in O(log n) memory.

A tree of ``n`` leaves is the fold, from the right, of the perfect subtrees given by the set
bits of ``n`` (largest first); :class:`MerkleStream` keeps only those subtree roots. Roots at
chosen sizes (``marks``: the sizes of signed checkpoints) are taken as the stream passes
them. Given the store's Merkle node files, it also compares every stored node (level 4 and
up) with the node it computes from the journal, so a node file that disagrees with the
journal is found, not trusted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tracelock.core.merkle import EMPTY_ROOT, HASH_SIZE

__all__ = ["CHUNK_LEVEL", "CacheMismatch", "MerkleStream", "StoredNodes"]

#: Lowest level whose nodes a store keeps (both backends): subtrees of ``2**CHUNK_LEVEL`` leaves.
CHUNK_LEVEL = 4

_NODE_PREFIX = b"\x01"
# Stored nodes read per level file access while comparing.
_NODE_BATCH = 4096


class StoredNodes(Protocol):
    """Stored Merkle nodes to compare: the directory store's node files
    (``storage/directory/merkle_tree.py``) or PostgreSQL's node table."""

    def stored_levels(self) -> list[int]: ...

    def stored_count(self, level: int) -> int: ...

    def stored_nodes(self, level: int, start: int, end: int) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class CacheMismatch:
    """The first stored node that differs from the journal: level, index, leaves covered."""

    level: int
    index: int

    @property
    def first_leaf(self) -> int:
        return self.index << self.level

    @property
    def last_leaf(self) -> int:
        return ((self.index + 1) << self.level) - 1


class _StoredNodes:
    """The nodes of one level of a node file, read in batches, front to back."""

    def __init__(self, tree: StoredNodes, level: int) -> None:
        self.tree = tree
        self.level = level
        self.count = tree.stored_count(level)
        self.start = 0
        self.data = b""

    def get(self, index: int) -> bytes | None:
        if index >= self.count:
            return None
        offset = (index - self.start) * HASH_SIZE
        if not 0 <= offset < len(self.data):
            self.start = index
            self.data = self.tree.stored_nodes(self.level, index, min(self.count, index + _NODE_BATCH))
            offset = 0
        return self.data[offset : offset + HASH_SIZE]


class MerkleStream:
    """Leaf hashes in, roots out. ``marks``: sizes whose root is kept in :attr:`roots`;
    ``cache``: node files to compare (see :attr:`mismatch`)."""

    def __init__(self, marks: Iterable[int] = (), cache: StoredNodes | None = None) -> None:
        self.size = 0
        self._stack: list[bytes] = []  # roots of the perfect subtrees, largest first
        self._marks = sorted({mark for mark in marks if mark >= 0}, reverse=True)
        #: Root at each mark the stream has reached.
        self.roots: dict[int, bytes] = {}
        if self._marks and self._marks[-1] == 0:
            self.roots[self._marks.pop()] = EMPTY_ROOT
        self._levels: dict[int, _StoredNodes] = {}
        if cache is not None:
            self._levels = {
                level: _StoredNodes(cache, level)
                for level in cache.stored_levels()
                if cache.stored_count(level)
            }
        #: The first stored node found to differ from the journal, if any.
        self.mismatch: CacheMismatch | None = None

    def add(self, leaves: Sequence[bytes]) -> None:
        """Append leaf hashes (``SHA-256(0x00 || entry line)``)."""
        stack = self._stack
        sha256 = hashlib.sha256
        size = self.size
        next_mark = self._marks[-1] if self._marks else -1
        check = bool(self._levels) and self.mismatch is None
        for node in leaves:
            carry = size
            level = 0
            # One merge per trailing set bit of the size: those subtrees are now complete.
            while carry & 1:
                node = sha256(_NODE_PREFIX + stack.pop() + node).digest()
                carry >>= 1
                level += 1
                if check and level >= CHUNK_LEVEL:
                    check = self._compare(level, ((size + 1) >> level) - 1, node)
            stack.append(node)
            size += 1
            if size == next_mark:
                self.size = size
                self.roots[size] = self.root()
                self._marks.pop()
                next_mark = self._marks[-1] if self._marks else -1
        self.size = size

    def _compare(self, level: int, index: int, node: bytes) -> bool:
        """Compare a completed node with the stored one; False once they differ."""
        stored = self._levels.get(level)
        if stored is None:
            return True
        kept = stored.get(index)
        if kept is not None and kept != node:
            self.mismatch = CacheMismatch(level, index)
            return False
        return True

    def root(self) -> bytes:
        """The root of the leaves added so far."""
        stack = self._stack
        if not stack:
            return EMPTY_ROOT
        acc = stack[-1]
        for node in reversed(stack[:-1]):
            acc = hashlib.sha256(_NODE_PREFIX + node + acc).digest()
        return acc
