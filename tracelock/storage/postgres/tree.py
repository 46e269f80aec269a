"""The Merkle tree of a PostgreSQL store: the entries' stored leaf hashes, the rows of the
node table (``tracelock_merkle_nodes``), and the roots and proofs
:class:`tracelock.storage.postgres.merkle.PostgresMerkle` computes from them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

from tracelock.core.merkle import leaf_hash
from tracelock.storage.errors import JournalCorruptError
from tracelock.storage.merkle_stream import StoredNodes
from tracelock.storage.postgres.merkle import NodeTable, PostgresMerkle
from tracelock.storage.postgres.reads import PostgresReads

__all__ = ["PostgresTree"]


class PostgresTree(PostgresReads):
    """Merkle queries: leaf hashes, node rows, roots and proofs."""

    # -- the Merkle tree: the node table (tracelock.storage.postgres.merkle) -------------
    @cached_property
    def _merkle(self) -> PostgresMerkle:
        """Made on the first Merkle query (a store that is only appended to never needs it)."""
        return PostgresMerkle(self)

    def tree_size(self) -> int:
        return self.size()

    def tree_root(self, size: int | None = None) -> bytes:
        return self._merkle.root(size)

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]:
        return self._merkle.inclusion_proof(seq, size)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        return self._merkle.consistency_proof(size1, size2)

    def leaf_hashes(self, start: int, end: int) -> list[bytes]:
        """The stored leaf hashes of entries ``start .. end-1``, in ``seq`` order."""
        rows = self._all(
            "SELECT leaf FROM tracelock_entries WHERE seq >= %s AND seq < %s ORDER BY seq", (start, end)
        )
        if len(rows) != max(0, end - start):
            raise JournalCorruptError(
                f"{self._shown} lacks entries between seq {start} and {end}",
                details={"start": start, "end": end, "found": len(rows)},
            )
        return [bytes(leaf) for (leaf,) in rows]

    def leaves_at(self, seqs: Sequence[int]) -> dict[int, bytes]:
        """The stored leaf hashes of the entries numbered ``seqs``."""
        rows = self._all("SELECT seq, leaf FROM tracelock_entries WHERE seq = ANY(%s)", (list(seqs),))
        found = {int(seq): bytes(leaf) for seq, leaf in rows}
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            raise JournalCorruptError(
                f"{self._shown} has no entry with seq {missing[0]}", details={"seq": missing[0]}
            )
        return found

    def merkle_nodes(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """The stored Merkle nodes among ``keys`` (level, index)."""
        rows = self._all(
            "SELECT n.level, n.idx, n.hash FROM tracelock_merkle_nodes n "
            "JOIN unnest(%s::smallint[], %s::bigint[]) AS k(level, idx) "
            "ON n.level = k.level AND n.idx = k.idx",
            ([level for level, _ in keys], [index for _, index in keys]),
        )
        return {(int(level), int(index)): bytes(node) for level, index, node in rows}

    def merkle_node_counts(self) -> dict[int, int]:
        """Per stored level, one past the highest node index stored."""
        rows = self._all("SELECT level, max(idx) + 1 FROM tracelock_merkle_nodes GROUP BY level")
        return {int(level): int(count) for level, count in rows}

    def merkle_node_range(self, level: int, start: int, end: int) -> dict[int, bytes]:
        """The stored nodes ``start .. end-1`` of ``level``, by index."""
        rows = self._all(
            "SELECT idx, hash FROM tracelock_merkle_nodes WHERE level = %s AND idx >= %s AND idx < %s",
            (level, start, end),
        )
        return {int(index): bytes(node) for index, node in rows}

    def save_merkle_nodes(self, rows: Sequence[tuple[int, int, bytes]]) -> None:
        """Insert computed Merkle nodes (level, index, hash) in one transaction; rows another
        handle stored already are kept."""
        with self._connection("cannot store Merkle nodes in") as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO tracelock_merkle_nodes (level, idx, hash) VALUES (%s, %s, %s) "
                "ON CONFLICT (level, idx) DO NOTHING",
                list(rows),
            )

    def merkle_cache(self) -> tuple[StoredNodes | None, str | None]:
        """The stored Merkle nodes to compare with the journal: the node table (None, None
        when it holds none)."""
        table = NodeTable(self)
        return (table, None) if table.stored_levels() else (None, None)

    def merkle_rebuild_advice(self) -> str:
        return "delete the rows of its tracelock_merkle_nodes table to have them rebuilt from the journal"

    def journal_leaf_hashes(self) -> Iterator[bytes]:
        """The leaf hash of every entry in ``seq`` order, from the entry lines themselves
        (never from the node table)."""
        for entry in self.iter_entries():
            yield leaf_hash(entry.line)
