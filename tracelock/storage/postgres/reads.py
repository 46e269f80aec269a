"""Reading a PostgreSQL store: its size and footprint, runs, entries, payloads, and the
raw rows :mod:`tracelock.storage.postgres.verify` checks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, Entry
from tracelock.storage.backend import RunInfo, StoreFootprint
from tracelock.storage.errors import (
    JournalCorruptError,
    PayloadMissingError,
    PayloadRedactedError,
    RunNotFoundError,
    StoreError,
)
from tracelock.storage.postgres.access import PostgresAccess
from tracelock.storage.postgres.schema import SCHEMA_VERSION

__all__ = ["PostgresReads"]

#: The part of ``tracelock store info`` each of the store's tables counts in.
_TABLE_PARTS = {
    "tracelock_entries": "entries",
    "tracelock_runs": "runs",
    "tracelock_payloads": "payloads",
    "tracelock_merkle_nodes": "merkle",
}

_RUN_COLUMNS = "run, agent, parent, status, started_ts, updated_ts, entries, first_seq, last_seq"
_READ_BATCH = 4096


class PostgresReads(PostgresAccess):
    """The store's read queries."""

    def size(self) -> int:
        row = self._one("SELECT next_seq FROM tracelock_head WHERE id = 1")
        return 0 if row is None else int(row[0])

    def footprint(self) -> StoreFootprint:
        counts = self._one(
            "SELECT count(*), count(*) FILTER (WHERE NOT closed) FROM tracelock_runs WHERE run != %s",
            (ADMIN_RUN,),
        )
        assert counts is not None
        tables = self._all(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND c.relname LIKE 'tracelock\\_%%' AND n.nspname = current_schema()"
        )
        parts = dict.fromkeys(("entries", "runs", "payloads", "merkle", "queue", "other"), 0)
        for name, size in tables:
            part = _TABLE_PARTS.get(str(name), "queue" if str(name).startswith("tracelock_queue") else "other")
            parts[part] += int(size)
        parts["total"] = sum(parts.values())
        details = {"schema_version": SCHEMA_VERSION, "tables": {str(name): int(size) for name, size in sorted(tables)}}
        return StoreFootprint(int(counts[0]), int(counts[1]), self.size(), parts, details)

    def runs(
        self,
        *,
        limit: int | None = None,
        status: str | None = None,
        offset: int = 0,
        agent: str | None = None,
        text: str | None = None,
    ) -> list[RunInfo]:
        query = f"SELECT {_RUN_COLUMNS} FROM tracelock_runs WHERE run <> %s"
        args: list[Any] = [ADMIN_RUN]
        if status is not None:
            query += " AND status = %s"
            args.append(status)
        if agent:
            query += " AND strpos(lower(coalesce(agent, '')), %s) > 0"
            args.append(agent.lower())
        if text:
            query += (
                " AND (strpos(lower(run), %s) > 0 OR strpos(lower(coalesce(agent, '')), %s) > 0"
                " OR strpos(lower(coalesce(parent, '')), %s) > 0)"
            )
            args.extend([text.lower()] * 3)
        query += " ORDER BY started_ts DESC, first_seq DESC"
        if limit is not None:
            query += " LIMIT %s"
            args.append(limit)
        if offset > 0:
            query += " OFFSET %s"
            args.append(offset)
        return [RunInfo(*row) for row in self._all(query, tuple(args))]

    def run_info(self, run: str) -> RunInfo:
        row = self._one(f"SELECT {_RUN_COLUMNS} FROM tracelock_runs WHERE run = %s", (run,))
        if row is None:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._shown}")
        return RunInfo(*row)

    def entries(self, run: str) -> list[Entry]:
        rows = self._all("SELECT seq, line FROM tracelock_entries WHERE run = %s ORDER BY i", (run,))
        if not rows:
            raise RunNotFoundError(f"no run {run!r} in the store at {self._shown}")
        return [self._parse(seq, line) for seq, line in rows]

    def entry_at(self, seq: int) -> Entry:
        row = self._one("SELECT seq, line FROM tracelock_entries WHERE seq = %s", (seq,))
        if row is None:
            raise StoreError(f"no entry with seq {seq}")
        return self._parse(*row)

    def iter_entries(self, start_seq: int = 0) -> Iterator[Entry]:
        """Entries from ``start_seq`` to the end the journal had when iteration began."""
        end = self.size()
        position = max(0, start_seq)
        while position < end:
            rows = self._all(
                "SELECT seq, line FROM tracelock_entries WHERE seq >= %s AND seq < %s ORDER BY seq",
                (position, min(end, position + _READ_BATCH)),
            )
            for seq, line in rows:
                yield self._parse(seq, line)
            position += _READ_BATCH

    def payload_state(self, digest: str) -> str:
        row = self._one("SELECT redacted FROM tracelock_payloads WHERE hash = %s", (bytes.fromhex(digest),))
        if row is None:
            return "missing"
        return "redacted" if row[0] else "present"

    def get_payload_bytes(self, digest: str) -> bytes:
        row = self._one(
            "SELECT data, redacted FROM tracelock_payloads WHERE hash = %s", (bytes.fromhex(digest),)
        )
        if row is None:
            raise PayloadMissingError(f"payload {digest} is not in the store", details={"payload": digest})
        if row[1]:
            raise PayloadRedactedError(f"payload {digest} was redacted", details={"payload": digest})
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise JournalCorruptError(
                f"payload {digest} in {self._shown} does not match its hash", details={"payload": digest}
            )
        return data

    def get_payloads_bytes(self, digests: Sequence[str]) -> dict[str, bytes]:
        if not digests:
            return {}
        rows = self._all(
            "SELECT hash, data FROM tracelock_payloads WHERE hash = ANY(%s) AND NOT redacted",
            ([bytes.fromhex(digest) for digest in dict.fromkeys(digests)],),
        )
        found: dict[str, bytes] = {}
        for raw, value in rows:
            digest, data = bytes(raw).hex(), bytes(value)
            if hashlib.sha256(data).hexdigest() != digest:
                raise JournalCorruptError(
                    f"payload {digest} in {self._shown} does not match its hash", details={"payload": digest}
                )
            found[digest] = data
        return found

    def get_payload(self, digest: str) -> Any:
        return orjson.loads(self.get_payload_bytes(digest))

    # -- the raw rows, for verification (tracelock.storage.postgres.verify) ------------
    def entry_rows(self, start: int, end: int) -> list[tuple[int, str, int, bytes, bytes]]:
        """(seq, run, i, line, leaf) of the rows with ``start <= seq < end``, by seq."""
        rows = self._all(
            "SELECT seq, run, i, line, leaf FROM tracelock_entries WHERE seq >= %s AND seq < %s ORDER BY seq",
            (start, end),
        )
        return [(int(seq), str(run), int(i), bytes(line), bytes(leaf)) for seq, run, i, line, leaf in rows]

    def entry_row_count(self) -> tuple[int, int, int]:
        """How many entry rows there are, one past the highest ``seq``, and the head's
        ``next_seq`` (one snapshot)."""
        row = self._one(
            "SELECT count(*), coalesce(max(seq) + 1, 0), (SELECT next_seq FROM tracelock_head WHERE id = 1) "
            "FROM tracelock_entries"
        )
        return (0, 0, 0) if row is None else (int(row[0]), int(row[1]), int(row[2] or 0))

    def run_row_count(self, before: int) -> int:
        """How many runs start before entry ``before``."""
        row = self._one("SELECT count(*) FROM tracelock_runs WHERE first_seq < %s", (before,))
        return 0 if row is None else int(row[0])

    def redaction_targets(self, start: int) -> set[str]:
        """The payloads named by ``payload.redact`` entries from ``start`` on."""
        rows = self._all(
            "SELECT seq, line FROM tracelock_entries WHERE run = %s AND seq >= %s ORDER BY seq", (ADMIN_RUN, start)
        )
        targets: set[str] = set()
        for seq, line in rows:
            entry = self._parse(seq, line)
            target = (entry.meta or {}).get("payload")
            if entry.kind == REDACTION_KIND and isinstance(target, str):
                targets.add(target)
        return targets

    def payload_rows(self, after: bytes, limit: int) -> list[tuple[bytes, bytes | None, bool]]:
        """(hash, data, redacted) of up to ``limit`` payload rows with a hash after ``after``."""
        rows = self._all(
            "SELECT hash, data, redacted FROM tracelock_payloads WHERE hash > %s ORDER BY hash LIMIT %s",
            (after, limit),
        )
        return [(bytes(h), None if data is None else bytes(data), bool(red)) for h, data, red in rows]

    def payload_states(self, digests: Sequence[str]) -> dict[str, str]:
        """``present`` or ``redacted`` for each of ``digests`` that is stored."""
        rows = self._all(
            "SELECT hash, redacted FROM tracelock_payloads WHERE hash = ANY(%s)",
            ([bytes.fromhex(d) for d in digests],),
        )
        return {bytes(h).hex(): "redacted" if red else "present" for h, red in rows}

    def run_rows(self, runs: Sequence[str]) -> list[tuple[Any, ...]]:
        """The rows of ``runs``: run, agent, parent, status, started_ts, updated_ts,
        entries, first_seq, last_seq, last_hash, closed."""
        return self._all(
            f"SELECT {_RUN_COLUMNS}, last_hash, closed FROM tracelock_runs WHERE run = ANY(%s)", (list(runs),)
        )
