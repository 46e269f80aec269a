"""A persistent, append-only RFC 9162 Merkle tree over a journal's leaf hashes.

Proofs and roots cost O(log n) file reads, never a scan of the log. To keep a store small,
only the nodes of levels >= 4 (perfect subtrees of 16 leaves and more) are kept on disk; the
hashes of levels 0-3 are recomputed from at most one 16-leaf chunk, whose leaf hashes come
from a callback the journal provides: ``leaf_hashes(start, end) -> list[bytes]``.

Layout of the tree directory (all integers big-endian)::

    head            56 bytes: magic "TLMERKLE", u32 version (1), u32 lowest stored level (4),
                    u64 tree size, 32-byte digest (see below)
    level-04.bin    the level-4 node hashes, 32 bytes each: node i covers leaves
    level-05.bin    [i * 2**L, (i + 1) * 2**L); level L holds exactly size >> L nodes
    ...

``digest = SHA-256("tracelock merkle head v1" || u64 size || for each level L with at least
one node: u8 L || u64 count || last node of L)`` ties the header to the level files.

The files are a cache that can be rebuilt from the journal at any time, so they are written
without fsync: :meth:`MerkleTreeFile.flush` first writes the level files, then replaces the
header atomically (write to a temporary file, rename). On open, a header that is missing,
unreadable or of another format, a level file shorter than the header says (torn), or a digest
that does not match the level files marks the tree as corrupt: :attr:`MerkleTreeFile.problem`
says why and every query raises :class:`MerkleTreeCorruptError` until :meth:`rebuild`.
Level files *longer* than the header says are the trace of a flush interrupted before its
header was written: the extra nodes are ignored and overwritten by the next flush. Whether the
tree is in step with the journal is for the store to check with :meth:`MerkleTreeFile.check`
(``expected_size``): a tree behind can be caught up with :meth:`append`, a tree ahead (journal
cut back by recovery) can be :meth:`truncate`-d, anything else rebuilt.

A tree is used by one writer at a time (the store's writer lock guards it).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from tracelock.core.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    ProofRequestError,
    consistency_proof,
    inclusion_proof,
    is_node_range,
    node_hash,
    subtree_root,
)
from tracelock.storage.errors import (
    MerkleLeafError,
    MerkleTreeCorruptError,
    MerkleTreeStaleError,
)
from tracelock.storage.merkle_stream import CHUNK_LEVEL

__all__ = ["CHUNK_SIZE", "LeafHashSource", "MerkleTreeFile", "open_node_files"]

#: Leaves per chunk; the hashes below the stored levels come from one chunk.
CHUNK_SIZE = 1 << CHUNK_LEVEL

#: ``leaf_hashes(start, end)``: the 32-byte leaf hashes of leaves ``[start, end)``.
LeafHashSource = Callable[[int, int], Sequence[bytes]]

_MAGIC = b"TLMERKLE"
_VERSION = 1
_HEAD = struct.Struct(">8sIIQ32s")
_HEAD_NAME = "head"
_DIGEST_DOMAIN = b"tracelock merkle head v1"
_REBUILD_FLUSH_EVERY = 1 << 20  # leaves


def _level_name(level: int) -> str:
    return f"level-{level:02d}.bin"


def _levels(size: int) -> range:
    """The stored levels that hold at least one node in a tree of ``size`` leaves."""
    return range(CHUNK_LEVEL, max(size.bit_length(), CHUNK_LEVEL))


class MerkleTreeFile:
    """The Merkle tree of a journal, stored under ``directory`` (created on first flush).

    ``leaf_hashes(start, end)`` must return the leaf hashes of any range of already appended
    leaves; the tree asks for at most one 16-leaf chunk per query.

    ``writable=False``: the files are only read (a process that may read the store but not
    write it); what :meth:`append` and :meth:`rebuild` add stays in memory.
    """

    def __init__(self, directory: Path, leaf_hashes: LeafHashSource, *, writable: bool = True) -> None:
        self._dir = Path(directory)
        self._source = leaf_hashes
        self._writable = writable
        self._read_fds: dict[int, int] = {}
        self._problem: MerkleTreeCorruptError | None = None
        self._reset(0)
        try:
            self._load()
        except MerkleTreeCorruptError as exc:
            self._close_fds()
            self._reset(0)
            self._problem = exc

    # -- state ---------------------------------------------------------------------------

    def _reset(self, size: int) -> None:
        self._size = size
        self._disk: dict[int, int] = {}  # level -> nodes in the level file (flushed)
        self._pending: dict[int, list[bytes]] = {}  # level -> nodes not flushed yet
        self._tail: list[bytes] | None = [] if size == 0 else None  # leaves of the open chunk
        self._dirty = False
        self._chunk_cache: tuple[int, Sequence[bytes]] | None = None
        self._ragged_cache: dict[tuple[int, int], bytes] = {}

    def _load(self) -> None:
        head_path = self._dir / _HEAD_NAME
        try:
            raw = head_path.read_bytes()
        except FileNotFoundError:
            strays = sorted(p.name for p in self._dir.glob("level-*.bin")) if self._dir.is_dir() else []
            if strays:
                raise MerkleTreeCorruptError(
                    f"Merkle node files without a header in {self._dir}",
                    details={"directory": str(self._dir), "files": strays},
                ) from None
            return
        except OSError as exc:
            raise MerkleTreeCorruptError(
                f"cannot read the Merkle header {head_path}: {exc.strerror}",
                details={"path": str(head_path)},
            ) from exc
        if len(raw) != _HEAD.size:
            raise MerkleTreeCorruptError(
                f"Merkle header {head_path} is {len(raw)} bytes, {_HEAD.size} expected (torn)",
                details={"path": str(head_path), "length": len(raw)},
            )
        magic, version, level, size, digest = _HEAD.unpack(raw)
        if magic != _MAGIC or version != _VERSION or level != CHUNK_LEVEL:
            raise MerkleTreeCorruptError(
                f"{head_path} is not a version {_VERSION} tracelock Merkle header",
                details={"path": str(head_path), "version": version, "level": level},
            )
        for lvl in _levels(size):
            count = size >> lvl
            path = self._dir / _level_name(lvl)
            try:
                length = path.stat().st_size
            except FileNotFoundError:
                length = -1
            if length < count * HASH_SIZE:
                raise MerkleTreeCorruptError(
                    f"Merkle level file {path} holds "
                    + ("nothing" if length < 0 else f"{length} bytes")
                    + f", the header needs {count * HASH_SIZE} (torn or stale)",
                    details={"path": str(path), "length": length, "needed": count * HASH_SIZE},
                )
            self._disk[lvl] = count
        self._size = size
        self._tail = [] if size % CHUNK_SIZE == 0 else None
        if self._digest() != digest:
            raise MerkleTreeCorruptError(
                f"Merkle header {head_path} does not match its level files (stale or torn)",
                details={"path": str(head_path), "size": size},
            )

    def _digest(self) -> bytes:
        h = hashlib.sha256(_DIGEST_DOMAIN)
        h.update(self._size.to_bytes(8, "big"))
        for lvl in _levels(self._size):
            count = self._count(lvl)
            h.update(bytes([lvl]) + count.to_bytes(8, "big") + self._node(lvl, count - 1))
        return h.digest()

    def _count(self, level: int) -> int:
        return self._disk.get(level, 0) + len(self._pending.get(level, ()))

    # -- status --------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def size(self) -> int:
        """Number of leaves appended (flushed or not)."""
        self._ensure_usable()
        return self._size

    @property
    def problem(self) -> MerkleTreeCorruptError | None:
        """Why the files could not be used (the tree then needs :meth:`rebuild`), or None."""
        return self._problem

    def check(
        self, expected_size: int | None = None, *, expected_root: bytes | None = None
    ) -> None:
        """Raise :class:`MerkleTreeCorruptError` if the files are unusable, and
        :class:`MerkleTreeStaleError` if the tree size differs from ``expected_size`` or, when
        ``expected_root`` is given (e.g. from the last signed checkpoint), if the root at
        ``expected_size`` differs from it."""
        self._ensure_usable()
        if expected_size is not None and expected_size != self._size:
            raise MerkleTreeStaleError(
                f"the Merkle tree in {self._dir} has {self._size} leaves, the journal has "
                f"{expected_size}",
                details={"directory": str(self._dir), "tree_size": self._size,
                         "expected_size": expected_size},
            )
        if expected_root is not None:
            size = self._size if expected_size is None else expected_size
            actual = self.root(size)
            if actual != expected_root:
                raise MerkleTreeStaleError(
                    f"the Merkle tree in {self._dir} has root {actual.hex()} at size {size}, "
                    f"expected {bytes(expected_root).hex()}",
                    details={"directory": str(self._dir), "tree_size": size,
                             "root": actual.hex(), "expected_root": bytes(expected_root).hex()},
                )

    def _ensure_usable(self) -> None:
        if self._problem is not None:
            raise MerkleTreeCorruptError(self._problem.message, details=self._problem.details)

    def stored_levels(self) -> list[int]:
        """The levels with nodes in their level file (flushed), ascending."""
        self._ensure_usable()
        return sorted(level for level, count in self._disk.items() if count)

    def stored_count(self, level: int) -> int:
        """How many nodes of ``level`` are in its level file (flushed)."""
        self._ensure_usable()
        return self._disk.get(level, 0)

    def stored_nodes(self, level: int, start: int, end: int) -> bytes:
        """The stored nodes ``[start, end)`` of ``level``, concatenated, read from its file."""
        self._ensure_usable()
        if not 0 <= start <= end <= self._disk.get(level, 0):
            raise ProofRequestError(
                f"nodes [{start}, {end}) are not stored at level {level}",
                details={"level": level, "start": start, "end": end},
            )
        if start == end:
            return b""
        data = os.pread(self._read_fd(level), (end - start) * HASH_SIZE, start * HASH_SIZE)
        if len(data) != (end - start) * HASH_SIZE:
            self._problem = MerkleTreeCorruptError(
                f"Merkle level file {self._dir / _level_name(level)} was cut short while open",
                details={"level": level, "index": start},
            )
            raise self._problem
        return data

    # -- reading -------------------------------------------------------------------------

    def _read_fd(self, level: int) -> int:
        fd = self._read_fds.get(level)
        if fd is None:
            fd = os.open(self._dir / _level_name(level), os.O_RDONLY)
            self._read_fds[level] = fd
        return fd

    def _node(self, level: int, index: int) -> bytes:
        on_disk = self._disk.get(level, 0)
        if index >= on_disk:
            return self._pending[level][index - on_disk]
        data = os.pread(self._read_fd(level), HASH_SIZE, index * HASH_SIZE)
        if len(data) != HASH_SIZE:
            self._problem = MerkleTreeCorruptError(
                f"Merkle level file {self._dir / _level_name(level)} was cut short while open",
                details={"level": level, "index": index},
            )
            raise self._problem
        return data

    def _fetch(self, start: int, end: int) -> Sequence[bytes]:
        result = self._source(start, end)
        if len(result) != end - start:
            raise MerkleLeafError(
                f"the leaf source returned {len(result)} hashes for leaves [{start}, {end})",
                details={"start": start, "end": end, "returned": len(result)},
            )
        for i, h in enumerate(result):
            if not isinstance(h, bytes) or len(h) != HASH_SIZE:
                raise MerkleLeafError(
                    f"the leaf source returned a malformed hash for leaf {start + i}",
                    details={"index": start + i},
                )
        return result

    def _leaves(self, start: int, end: int) -> Sequence[bytes]:
        """Leaf hashes of ``[start, end)``, all inside one chunk."""
        chunk = start - start % CHUNK_SIZE
        open_chunk = self._size - self._size % CHUNK_SIZE
        if chunk == open_chunk:
            if self._tail is None:
                self._tail = list(self._fetch(open_chunk, self._size))
            return self._tail[start - chunk : end - chunk]
        cached = self._chunk_cache
        if cached is None or cached[0] != chunk:
            cached = (chunk, self._fetch(chunk, chunk + CHUNK_SIZE))
            self._chunk_cache = cached
        return cached[1][start - chunk : end - chunk]

    def _perfect(self, start: int, level: int) -> bytes:
        if level >= CHUNK_LEVEL:
            return self._node(level, start >> level)
        return subtree_root(self._leaves(start, start + (1 << level)))

    def subtree_hash(self, start: int, end: int) -> bytes:
        """``MTH`` of leaves ``[start, end)``, a node range (see :func:`tracelock.merkle.is_node_range`)
        within the current size. O(log n) reads."""
        self._ensure_usable()
        if not (end <= self._size and is_node_range(start, end)):
            raise ProofRequestError(
                f"[{start}, {end}) is not a subtree of the tree of size {self._size}",
                details={"start": start, "end": end, "size": self._size},
            )
        width = end - start
        if width & (width - 1) == 0:
            return self._perfect(start, width.bit_length() - 1)
        cached = self._ragged_cache.get((start, end))
        if cached is not None:
            return cached
        # The ragged right edge: perfect subtrees of decreasing size, folded from the right.
        parts: list[bytes] = []
        pos = start
        for level in range(width.bit_length() - 1, -1, -1):
            if width >> level & 1:
                parts.append(self._perfect(pos, level))
                pos += 1 << level
        acc = parts[-1]
        for part in reversed(parts[:-1]):
            acc = node_hash(part, acc)
        if len(self._ragged_cache) > 4096:
            self._ragged_cache.clear()
        self._ragged_cache[(start, end)] = acc
        return acc

    def _check_size(self, size: int | None) -> int:
        self._ensure_usable()
        if size is None:
            return self._size
        if not 0 <= size <= self._size:
            raise ProofRequestError(
                f"tree size {size} is not between 0 and the current size {self._size}",
                details={"size": size, "current_size": self._size},
            )
        return size

    def root(self, size: int | None = None) -> bytes:
        """The root of the tree at ``size`` leaves (default: the current size)."""
        n = self._check_size(size)
        return EMPTY_ROOT if n == 0 else self.subtree_hash(0, n)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The inclusion proof of leaf ``index`` in the tree at ``size`` leaves."""
        n = self._check_size(size)
        return inclusion_proof(index, n, self.subtree_hash)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """The consistency proof from the tree at ``size1`` to the tree at ``size2``."""
        n = self._check_size(size2)
        self._check_size(size1)
        return consistency_proof(size1, n, self.subtree_hash)

    # -- writing -------------------------------------------------------------------------

    def append(self, leaf_hashes: Iterable[bytes]) -> None:
        """Add leaves at the end of the tree (in memory until :meth:`flush`)."""
        self._ensure_usable()
        for h in leaf_hashes:
            if not isinstance(h, bytes) or len(h) != HASH_SIZE:
                raise MerkleLeafError(
                    f"leaf {self._size} is not a {HASH_SIZE}-byte hash",
                    details={"index": self._size},
                )
            if self._tail is None:
                open_chunk = self._size - self._size % CHUNK_SIZE
                self._tail = list(self._fetch(open_chunk, self._size))
            self._tail.append(h)
            self._size += 1
            self._dirty = True
            if self._size % CHUNK_SIZE == 0:
                self._add_node(CHUNK_LEVEL, subtree_root(self._tail))
                self._tail = []
        self._ragged_cache.clear()

    def _add_node(self, level: int, node: bytes) -> None:
        while True:
            pending = self._pending.setdefault(level, [])
            pending.append(node)
            index = self._count(level) - 1
            if index % 2 == 0:
                return
            node = node_hash(self._node(level, index - 1), node)
            level += 1

    def truncate(self, size: int) -> None:
        """Cut the tree back to its first ``size`` leaves (after the journal was cut back)."""
        n = self._check_size(size)
        for level in list(self._pending) + list(self._disk):
            keep = n >> level
            on_disk = self._disk.get(level, 0)
            if keep < on_disk:
                self._disk[level] = keep
                self._pending[level] = []
            else:
                self._pending[level] = self._pending.get(level, [])[: keep - on_disk]
        self._size = n
        self._tail = [] if n % CHUNK_SIZE == 0 else None
        self._chunk_cache = None
        self._ragged_cache.clear()
        self._dirty = True

    def flush(self) -> None:
        """Write the new nodes and the header (no fsync: the files are a rebuildable cache)."""
        self._ensure_usable()
        if not self._dirty or not self._writable:
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        for level in sorted(set(self._disk) | set(self._pending)):
            on_disk = self._disk.get(level, 0)
            pending = self._pending.get(level, [])
            path = self._dir / _level_name(level)
            if on_disk == 0 and not pending:
                self._drop_fd(level)
                path.unlink(missing_ok=True)
                self._disk.pop(level, None)
                self._pending.pop(level, None)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if pending:
                    os.pwrite(fd, b"".join(pending), on_disk * HASH_SIZE)
                os.ftruncate(fd, (on_disk + len(pending)) * HASH_SIZE)
            finally:
                os.close(fd)
            self._disk[level] = on_disk + len(pending)
            self._pending[level] = []
        head = _HEAD.pack(_MAGIC, _VERSION, CHUNK_LEVEL, self._size, self._digest())
        tmp = self._dir / (_HEAD_NAME + ".tmp")
        tmp.write_bytes(head)
        os.replace(tmp, self._dir / _HEAD_NAME)
        self._dirty = False

    def rebuild(self, all_leaf_hashes: Iterable[bytes]) -> None:
        """Discard the files and recompute the tree from every leaf hash of the journal."""
        self._close_fds()
        if self._writable and self._dir.is_dir():
            for path in self._dir.glob("level-*.bin"):
                path.unlink()
            (self._dir / _HEAD_NAME).unlink(missing_ok=True)
        self._problem = None
        self._reset(0)
        self._dirty = True
        batch: list[bytes] = []
        for h in all_leaf_hashes:
            batch.append(h)
            if len(batch) == _REBUILD_FLUSH_EVERY:
                self.append(batch)
                self.flush()
                batch = []
        self.append(batch)
        self.flush()

    # -- lifetime ------------------------------------------------------------------------

    def _drop_fd(self, level: int) -> None:
        fd = self._read_fds.pop(level, None)
        if fd is not None:
            os.close(fd)

    def _close_fds(self) -> None:
        for level in list(self._read_fds):
            self._drop_fd(level)

    def close(self) -> None:
        """Flush if there is something to write, then release the open files."""
        try:
            if self._problem is None:
                self.flush()
        finally:
            self._close_fds()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "corrupt" if self._problem is not None else f"size={self._size}"
        return f"MerkleTreeFile({str(self._dir)!r}, {state})"


def _no_leaves(start: int, end: int) -> list[bytes]:
    raise MerkleTreeCorruptError("node files opened for comparison are read, never grown")


def open_node_files(directory: Path) -> tuple[MerkleTreeFile | None, str | None]:
    """The node files under ``directory`` opened for reading their stored nodes (to give
    :class:`MerkleStream` as ``cache``), or None and why they cannot be compared: absent
    (None, None), or torn or damaged (None, the reason; rebuilt by the next Merkle query,
    they hold nothing to compare)."""
    if not directory.is_dir():
        return None, None
    tree = MerkleTreeFile(directory, _no_leaves)
    if tree.problem is not None:
        tree.close()
        return None, tree.problem.message
    return tree, None
