"""Merkle queries: the tree size, roots and proofs from the shared node files (``merkle/``),
brought up to the index under the writer lock, or from a private tree."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator

from tracelock.core.merkle import leaf_hash
from tracelock.storage.directory.journal import ENTRY, Record, scan_records
from tracelock.storage.directory.merkle_tree import MerkleTreeFile, open_node_files
from tracelock.storage.directory.reads import Reads
from tracelock.storage.failures import READ_ONLY_ERRNOS, file_error
from tracelock.storage.merkle_stream import StoredNodes

__all__ = ["MerkleQueries"]


class MerkleQueries(Reads):
    """Answers tree sizes, roots and proofs; keeps the node files in step with the journal."""

    # -- the Merkle tree ---------------------------------------------------------------
    def _sync_tree(self) -> None:
        """At open: cut the tree (a cache, like the index) back if the journal lost
        entries it covers (a repaired tail). It grows only when asked (``_catch_up_tree``)."""
        tree = self._tree
        assert tree is not None
        count = self._index.entry_count
        if tree.problem is None and tree.size > count:
            tree.truncate(count)
            tree.flush()

    def _iter_leaf_hashes(self, start_seq: int) -> Iterator[bytes]:
        start = self._entry_start(start_seq) if start_seq else 0
        if start is None:
            return
        for record in scan_records(self._file, start, self._index.journal_end):
            if isinstance(record, Record) and record.kind == ENTRY:
                yield leaf_hash(record.data)

    def _leaf_hashes(self, start: int, end: int) -> list[bytes]:
        """Leaf hashes of entries ``start .. end-1`` (all already in the index)."""
        hashes: list[bytes] = []
        if start >= end:
            return hashes
        with self._index_lock:
            for digest in self._iter_leaf_hashes(start):
                hashes.append(digest)
                if len(hashes) == end - start:
                    break
        return hashes

    def _catch_up_tree(self) -> None:
        """Bring the tree up to the index (holding the index lock). Only a Merkle query
        (checkpoints, proofs) calls this: the leaves are hashed from the journal then, in
        one pass, never on the path of an append, and a store nobody asks for proofs
        never pays for its tree."""
        tree = self._tree
        if tree is None:
            return
        count = self._index.entry_count
        if tree.problem is not None:
            tree.rebuild(self._iter_leaf_hashes(0))
        elif tree.size > count:
            tree.truncate(count)
        elif tree.size < count:
            tree.append(self._iter_leaf_hashes(tree.size))

    def _merkle(self) -> MerkleTreeFile:
        """The Merkle tree, brought up to the index under the writer lock: the tree files
        are shared by every process of the store, so they are re-read (another process may
        have grown them), grown and written while no one else can; the state read then is
        answered from afterwards (the files only grow past it)."""
        self._prepare_read()
        with self._index_lock:
            tree = self._tree
            if tree is not None and tree.problem is None and tree.size == self._index.entry_count:
                return tree  # it covers the index already (a proof per entry of an export)
        with self._lock:
            held = self._held
            if not held and not self._lock_merkle():
                # A reader that cannot take the lock (a read-only directory without a lock
                # file) answers from a tree of its own, over its own index, kept in memory.
                self._tree_writable = False
                with self._index_lock:
                    return self._load_tree()
            try:
                with self._index_lock:
                    if self._log is not None:
                        self._log.flush()
                        self._flush_pending_locked()
                    try:
                        return self._load_tree()
                    except OSError as exc:
                        if not self._read_only or exc.errno not in READ_ONLY_ERRNOS:
                            raise file_error(exc, f"cannot write the Merkle tree of the store at {self._path}") from None
                        self._tree_writable = False  # a reader that may not write the tree's files
                        return self._load_tree()
            finally:
                if not held:
                    self._release_if_idle_locked()

    def _load_tree(self) -> MerkleTreeFile:
        """Open the tree files, bring the tree up to the index and write what it added
        (only in memory when this handle may not write them). Holds ``_index_lock``."""
        if self._tree is not None:
            tree, self._tree = self._tree, None
            with contextlib.suppress(OSError):  # a cache: the new tree is read from the files
                tree.close()
        self._tree = MerkleTreeFile(self._path / "merkle", self._leaf_hashes, writable=self._tree_writable)
        self._catch_up_tree()
        if self._tree.problem is None:
            self._tree.flush()
        return self._tree

    def _lock_merkle(self) -> bool:
        """Take the writer lock for a Merkle query, which maintains files every process
        shares: it waits for one commit at most. A writer catches up with other processes'
        entries first; a reader brings the on-disk index up to the journal (switching to it
        if it opened with a private one). False when the lock file cannot be opened (a
        read-only directory). Holds ``_lock``."""
        if self._lock_fd is None:
            return False
        if self._log is not None:
            self._hold_locked()
            return True
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._held = True
        try:
            with self._index_lock:
                if not self._owns_lock and self._index_writable:
                    self._use_index_file()
                with self._index.transaction():
                    self._catch_up()
        except BaseException:
            self._unlock()
            raise
        return True

    def tree_size(self) -> int:
        """Number of leaves (= entries) covered by the store's Merkle tree."""
        tree = self._merkle()
        with self._index_lock:
            return tree.size

    def tree_root(self, size: int | None = None) -> bytes:
        tree = self._merkle()
        with self._index_lock:
            return tree.root(size)

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]:
        tree = self._merkle()
        with self._index_lock:
            return tree.inclusion_proof(seq, size)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        tree = self._merkle()
        with self._index_lock:
            return tree.consistency_proof(size1, size2)

    def merkle_cache(self) -> tuple[StoredNodes | None, str | None]:
        """The stored Merkle nodes to compare with the journal: the node files under
        ``merkle/`` (see :func:`tracelock.storage.directory.merkle_tree.open_node_files`)."""
        return open_node_files(self._path / "merkle")

    def merkle_rebuild_advice(self) -> str:
        return "delete the store's merkle/ directory to have them rebuilt from the journal"

    def journal_leaf_hashes(self) -> Iterator[bytes]:
        """The leaf hash of every entry in ``seq`` order, from the journal's records
        themselves (never from a cache)."""
        for record in self.iter_records(0):
            if isinstance(record, Record) and record.kind == ENTRY:
                yield leaf_hash(record.data)
