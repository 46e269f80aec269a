"""The store index: a SQLite cache answering "list runs" and "entries of run X" quickly.

Entry locations are not one row per entry: each batch of entries (consecutive sequence
numbers, as the journal holds them) adds one ``seq_blocks`` row packing every entry's
(offset, length), and one ``run_spans`` row per run it touches, packing that run's. A row
per entry, with its secondary-index row, cost about a seventh of a durable append's CPU;
rows per batch cost next to nothing, and both questions ("entry number N", "entries of
run X") stay one query.

A ``run_spans`` row also tells where the payload of each of its entries is stored (the
payload's first record, as the ``payloads`` table has it), in 4 bytes per entry when the
record was written right before the entry, as it usually is (:func:`payload_code`).
Reading a run (a replay, ``show``) thus needs one query whatever the store's size: looking
its payloads up by hash cost a second query, one B-tree descent per payload, into the
largest table of the index.

Rows are kept small (schema 5 made a stored run's share of the index well under half of
what it was): a payload's row is keyed by the first 4 bytes of its hash, as an integer (a
different payload with the same first bytes, an unlucky or a crafted one, gets a row keyed
by its whole hash in ``payload_collisions``: the record a key names is read to tell, see
``record_digest``), a run's last hash is 32 bytes, and packed locations are narrow: each
entry's gap from the previous entry's end and its length, two bytes each, when every one
fits (:func:`pack_locations`).

The index is derived data. It is never fsynced (``synchronous=OFF``) and may be lost or
stale at any time: it records how far into the journal it reaches (``journal_end``, and
the hash of the last entry it covers), and the store catches it up from there, or
rebuilds it from scratch when it is missing, unreadable, of an older schema, or covers bytes
that a crash may have lost. An index that is none of these but states something the journal
contradicts was altered: the store reports it (``IndexTamperedError``), never rebuilds it
silently (``docs/spec.md`` 3.6).

Several writer processes share the file (each adds the rows of the records it wrote or
caught up on, see ``directory``): SQLite's own locking serializes them (WAL, so readers
never wait), and :meth:`Index.add` keeps the index a prefix of the journal whoever adds:
rows the index already covers are skipped, and a batch that would leave a hole is refused.
"""

from __future__ import annotations

import operator
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracelock.core.entry import TERMINAL_KINDS, Entry
from tracelock.storage.backend import RunInfo
from tracelock.storage.run_fold import RUN_ROW_COLUMNS, RunRow, fold_runs

__all__ = [
    "LOCATION",
    "PAYLOAD_KEY_BYTES",
    "SCHEMA_VERSION",
    "Index",
    "IndexedPayload",
    "RecordDigest",
    "pack_codes",
    "pack_locations",
    "packed_locations",
    "payload_code",
    "payload_key",
    "payload_spots",
    "unpack_codes",
    "unpack_locations",
]

#: 3: ``run_spans.payloads`` as an (offset, length) per entry with a payload; 4: as codes
#: (:func:`payload_code`); 5: narrow locations and codes, payload rows keyed by a prefix of
#: the hash, last hashes as bytes.
_SCHEMA_VERSION = SCHEMA_VERSION = "5"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    name_key INTEGER NOT NULL,
    agent INTEGER,
    parent TEXT,
    status TEXT NOT NULL,
    started_ts INTEGER NOT NULL,
    updated_ts INTEGER NOT NULL,  -- after started_ts (a byte or two, not six)
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,  -- after first_seq
    entries INTEGER NOT NULL,
    last_hash BLOB NOT NULL,
    closed INTEGER NOT NULL
);
-- Row ids follow the order of the runs' first entries (rows are added in journal order).
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started_ts);
-- A run is found by a 4-byte key of its name (:func:`name_key`), then its name: a quarter of
-- the bytes of an index of the names, which would repeat each one.
CREATE INDEX IF NOT EXISTS runs_by_name ON runs (name_key);
-- Agents by number: runs repeat a few agents' names.
CREATE TABLE IF NOT EXISTS agents (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS seq_blocks (
    first_seq INTEGER PRIMARY KEY,
    locations BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS run_spans (
    run_id INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    locations BLOB NOT NULL,
    payloads BLOB NOT NULL,
    PRIMARY KEY (run_id, first_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS payloads (
    hash INTEGER PRIMARY KEY,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS payload_collisions (
    hash BLOB PRIMARY KEY,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL
) WITHOUT ROWID;
"""


_SCHEMA_STATEMENTS = [statement.strip() for statement in _SCHEMA.split(";") if statement.strip()]

#: Seconds a statement waits for another process's write transaction on the index.
_BUSY_TIMEOUT_S = 120.0

#: One entry's location as this module's callers get it packed: (offset, length),
#: little-endian.
_LOCATION = LOCATION = struct.Struct("<QI")

# Stored locations (``seq_blocks.locations``, ``run_spans.locations``) start with a tag.
# _NARROW: the first entry's offset (6 bytes, little-endian), then per entry a u16 gap (bytes
# between the end of the previous entry's line feed and the entry: 0 for the first) and a u16
# length. _WIDE: per entry an (offset, length) as :data:`LOCATION`, when a gap or a length
# does not fit in 16 bits.
_WIDE, _NARROW = 0, 1
_WIDE_TAG, _NARROW_TAG = bytes((_WIDE,)), bytes((_NARROW,))
_GAP_LENGTH = struct.Struct("<HH")
_BASE_BYTES = 6
_U16 = 0xFFFF

# ``run_spans.payloads``: a tag, then one code per entry of the row (a little-endian u16 when
# _NARROW, u32 when _WIDE), then an (offset, length) for each entry of code _FAR. A payload
# record is never empty, so the location (0, 0) stands for "the index has no row for this
# payload".
_CODE = struct.Struct("<I")
_CODE_WIDTHS = {_NARROW: struct.Struct("<H"), _WIDE: _CODE}
_NONE, _FAR, _UNKNOWN, _ADJACENT = 0, 1, 2, 3
_NO_PAYLOAD = _CODE.pack(_NONE)
_LONGEST_ADJACENT = 0xFFFFFFFF - _ADJACENT

#: Bytes of a payload's hash that key its row (a signed big-endian integer: 4 bytes in
#: SQLite). Two payloads of a store share them now and then (about one pair per 10^5
#: payloads in a store of a million): :meth:`Index.payload_location` tells them apart.
PAYLOAD_KEY_BYTES = 4


_KEY = struct.Struct(">i")


def payload_key(digest: bytes) -> int:
    """The ``payloads`` key of a payload's SHA-256 digest."""
    return int(_KEY.unpack_from(digest)[0])


def name_key(run: str) -> int:
    """The ``runs.name_key`` of a run: the CRC-32 of its name, as a signed 32-bit integer."""
    key = zlib.crc32(run.encode())
    return key - (1 << 32) if key >> 31 else key


def _key_hex(key: int) -> bytes:
    return (key & (1 << 8 * PAYLOAD_KEY_BYTES) - 1).to_bytes(PAYLOAD_KEY_BYTES, "big").hex().encode()


def pack_locations(locations: Sequence[tuple[int, int]]) -> bytes:
    """Entry locations (in journal order) as stored: narrow when every gap and length fits."""
    if not locations:
        return _WIDE_TAG
    first = end = locations[0][0]
    flat: list[int] = []
    for offset, length in locations:
        flat += (offset - end, length)
        end = offset + length + 1
    if not first >> 8 * _BASE_BYTES:
        try:  # a negative gap, or one or a length past 16 bits, does not pack
            return _NARROW_TAG + first.to_bytes(_BASE_BYTES, "little") + struct.pack(f"<{len(flat)}H", *flat)
        except struct.error:
            pass
    return _WIDE_TAG + b"".join(_LOCATION.pack(*location) for location in locations)


def unpack_locations(blob: bytes) -> list[tuple[int, int]]:
    """Stored entry locations as (offset, length) pairs; none when ``blob`` is no valid
    encoding (an altered index: its readers then find the entries missing)."""
    tag = blob[:1]
    if tag == _NARROW_TAG:
        body = len(blob) - 1 - _BASE_BYTES
        if body < 0 or body % _GAP_LENGTH.size:
            return []
        values = struct.unpack_from(f"<{body // 2}H", blob, 1 + _BASE_BYTES)
        offset = int.from_bytes(blob[1 : 1 + _BASE_BYTES], "little")
        out = []
        for at in range(0, len(values), 2):
            offset += values[at]
            length = values[at + 1]
            out.append((offset, length))
            offset += length + 1
        return out
    if tag == _WIDE_TAG and (len(blob) - 1) % _LOCATION.size == 0:
        return list(_LOCATION.iter_unpack(memoryview(blob)[1:]))
    return []


def packed_locations(blob: bytes) -> bytes:
    """Stored entry locations packed as :data:`LOCATION` each."""
    pack = _LOCATION.pack
    return b"".join(pack(*location) for location in unpack_locations(blob))


def payload_code(entry_offset: int, spot: tuple[int, int] | None) -> tuple[bytes, bytes]:
    """The code of the entry at ``entry_offset`` whose payload record is at ``spot`` (None:
    the entry names no payload; (0, 0): the index has no row for it), as a u32, and the bytes
    it adds after the codes. A record of length n that ends right before the entry (written
    with it) is the code n + 3; any other location is the code 1 and the location after them."""
    if spot is None:
        return _NO_PAYLOAD, b""
    offset, length = spot
    if not length:
        return _CODE.pack(_UNKNOWN), b""
    if offset + length + 1 == entry_offset and length <= _LONGEST_ADJACENT:
        return _CODE.pack(length + _ADJACENT), b""
    return _CODE.pack(_FAR), _LOCATION.pack(offset, length)


def _code(entry_offset: int, spot: tuple[int, int] | None) -> tuple[int, tuple[int, int] | None]:
    """:func:`payload_code` as an integer, and the location it leaves out (or None)."""
    if spot is None:
        return _NONE, None
    offset, length = spot
    if not length:
        return _UNKNOWN, None
    if offset + length + 1 == entry_offset and length <= _LONGEST_ADJACENT:
        return length + _ADJACENT, None
    return _FAR, spot


def _pack_codes(codes: Sequence[int], far: Sequence[tuple[int, int]]) -> bytes:
    try:
        head = _NARROW_TAG + struct.pack(f"<{len(codes)}H", *codes)
    except struct.error:
        head = _WIDE_TAG + struct.pack(f"<{len(codes)}I", *codes)
    return head + b"".join(_LOCATION.pack(*location) for location in far)


def pack_codes(codes: bytes, far: bytes) -> bytes:
    """Payload codes (u32 each, :func:`payload_code`) and the locations they leave out, as
    stored: narrow when every code fits in 16 bits."""
    return _pack_codes([code for (code,) in _CODE.iter_unpack(codes)], list(_LOCATION.iter_unpack(far)))


def unpack_codes(blob: bytes, count: int) -> tuple[bytes, bytes] | None:
    """Stored payload codes of ``count`` entries as (u32 codes, the locations they leave
    out); None when ``blob`` is no valid encoding of that many."""
    width = _CODE_WIDTHS.get(blob[0]) if blob else None
    cut = 1 + count * width.size if width is not None else -1
    if width is None or len(blob) < cut or (len(blob) - cut) % _LOCATION.size:
        return None
    if width is _CODE:
        return bytes(blob[1:cut]), bytes(blob[cut:])
    values = struct.unpack(f"<{count}H", blob[1:cut])
    return struct.pack(f"<{count}I", *values), bytes(blob[cut:])


def payload_spots(
    locations: Sequence[tuple[int, int]], payloads: bytes
) -> list[tuple[int, int] | None] | None:
    """One ``run_spans`` row's stored ``payloads`` decoded against its entry ``locations``:
    each entry's payload location, (0, 0) where the index has no row for it, None where the
    entry names none; None when the bytes are not a valid encoding."""
    count = len(locations)
    width = _CODE_WIDTHS.get(payloads[0]) if payloads else None
    cut = 1 + count * width.size if width is not None else -1
    if width is None or len(payloads) < cut or (len(payloads) - cut) % _LOCATION.size:
        return None
    codes = struct.unpack_from(f"<{count}{'H' if width.size == 2 else 'I'}", payloads, 1)
    far = _LOCATION.iter_unpack(memoryview(payloads)[cut:]) if len(payloads) > cut else iter(())
    spots: list[tuple[int, int] | None] = []
    for (offset, _), code in zip(locations, codes, strict=True):
        if code >= _ADJACENT:
            length = code - _ADJACENT
            if length >= offset:
                return None
            spots.append((offset - length - 1, length))
        elif code == _NONE:
            spots.append(None)
        elif code == _FAR:
            spot = next(far, None)
            if spot is None:
                return None
            spots.append(spot)
        else:
            spots.append((0, 0))
    return None if next(far, None) is not None else spots


_offset_of = operator.itemgetter(1)

#: A run's agent as selected: stored as the number of its name in ``agents`` (any other
#: value is what an altered row holds, shown as it is).
_AGENT = "CASE WHEN typeof({0}agent) = 'integer' THEN (SELECT name FROM agents WHERE id = {0}agent) ELSE {0}agent END"
#: The columns of a run row, in the order of :class:`RunInfo`'s fields.
_RUN_INFO_COLUMNS = (
    f"run, {_AGENT.format('')}, parent, status, started_ts, started_ts + updated_ts, entries, first_seq, "
    "first_seq + last_seq"
)
#: :data:`RUN_ROW_COLUMNS` as selected: the agent's name, the last hash (stored as 32
#: bytes) in hex.
_ROW_COLUMNS = (
    RUN_ROW_COLUMNS.replace("last_hash", "lower(hex(last_hash))")
    .replace("agent", _AGENT.format(""), 1)
    .replace("updated_ts", "started_ts + updated_ts")
    .replace("last_seq", "first_seq + last_seq")
)

#: The SHA-256 digest named by the payload record (kept or erased) at a journal offset; None
#: when no payload record starts there.
RecordDigest = Callable[[int], bytes | None]

#: A payload record's row: (SHA-256 digest, offset of the record, its length without the
#: newline). A plain tuple: the append path builds one per new payload.
IndexedPayload = tuple[bytes, int, int]


class Index:
    """One SQLite file. Not thread-safe by itself: the store serializes access."""

    def __init__(self, path: Path, *, read_only: bool = False, record_digest: RecordDigest | None = None) -> None:
        """``record_digest`` reads the journal: it tells a payload from another whose hash
        starts with the same bytes (without it, a payload row is taken to be the payload's
        when the first bytes of the hashes agree: only for an index of no journal)."""
        self.path = path
        self._record_digest = record_digest
        uri = f"file:{path}?mode={'ro' if read_only else 'rwc'}"
        # The timeout only covers another process's short index transaction (a batch of
        # rows, or the catch-up of a store being opened).
        self._db = sqlite3.connect(
            uri, uri=True, check_same_thread=False, isolation_level=None, timeout=_BUSY_TIMEOUT_S
        )
        self.read_only = read_only
        self.closed = False
        if not read_only:
            # WAL: processes that only read the index never wait for one that writes it.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")
            with self.transaction():
                # The version first: the statements of this schema may not apply to the
                # tables of another (an index on a column they lack).
                self._db.execute(_SCHEMA_STATEMENTS[0])
                if self.get_meta("schema") != _SCHEMA_VERSION:
                    self.reset()

    def close(self) -> None:
        self.closed = True
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (taken at once: ``BEGIN IMMEDIATE``) around the block, so
        that what it reads of the index is not changed by another process before it writes;
        :meth:`add` and :meth:`reset` inside it join it."""
        db = self._db
        if db.in_transaction:
            yield
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if not self.closed and db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if not self.closed and db.in_transaction:
            db.execute("COMMIT")

    def reset(self) -> None:
        """Forget everything (before a rebuild)."""
        with self.transaction():
            # ``entries``: the one-row-per-entry table of schema version 1.
            for table in ("runs", "agents", "entries", "seq_blocks", "run_spans", "payloads", "payload_collisions", "meta"):
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _SCHEMA_STATEMENTS:
                self._db.execute(statement)
            self._set_meta({"schema": _SCHEMA_VERSION, "journal_end": "0", "entries": "0", "last_hash": ""})

    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, values: dict[str, str]) -> None:
        self._db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    @property
    def journal_end(self) -> int:
        return int(self.get_meta("journal_end") or 0)

    @property
    def entry_count(self) -> int:
        return int(self.get_meta("entries") or 0)

    @property
    def last_hash(self) -> str:
        return self.get_meta("last_hash") or ""

    def add(
        self,
        entries: Sequence[tuple[Entry, int]],
        payloads: Sequence[IndexedPayload],
        *,
        journal_end: int,
        start: int | None = None,
    ) -> bool:
        """Record a batch of journal records in one transaction: entries as (entry, offset),
        in journal order, and payload records.

        ``start``: the journal offset the batch covers from (its rows being every record
        from there to ``journal_end``). Given, the batch is fitted to what the index covers
        then, as another process may have added some of the same records already: rows
        before the index's end are skipped; a batch starting after it would leave a hole
        and is refused (False: nothing added; the caller adds the records in between)."""
        with self.transaction():
            if start is not None:
                covered = self.journal_end
                if covered < start:
                    return False
                if covered >= journal_end:
                    return True
                if covered > start:
                    count = self.entry_count
                    entries = [item for item in entries if item[0].seq >= count]
                    payloads = [row for row in payloads if row[1] >= covered]
            self._add(entries, payloads, journal_end)
        return True

    def _add(
        self, entries: Sequence[tuple[Entry, int]], payloads: Sequence[IndexedPayload], journal_end: int
    ) -> None:
        db = self._db
        # Where this batch's payloads are first stored: its own records, unless one of them
        # repeats a payload stored before (its row is then ignored, and all are looked up).
        located: dict[bytes, tuple[int, int]] = {}
        if payloads:
            before = db.total_changes
            key = _KEY.unpack_from
            # In key order: hashes are random, and inserting them sorted walks the
            # B-tree's pages once instead of jumping between them (about a third cheaper).
            db.executemany(
                "INSERT OR IGNORE INTO payloads (hash, offset, length) VALUES (?, ?, ?)",
                sorted((key(digest)[0], offset, length) for digest, offset, length in payloads),
            )
            if db.total_changes - before == len(payloads):
                located = {digest: (offset, length) for digest, offset, length in payloads}
            else:
                located = self._add_shared_keys(payloads)
        if entries:
            self._add_entries(entries, located)
        meta = {"journal_end": str(journal_end)}
        if entries:
            last = entries[-1][0]
            meta["entries"] = str(last.seq + 1)
            meta["last_hash"] = last.hash
        self._set_meta(meta)

    def _add_shared_keys(self, payloads: Sequence[IndexedPayload]) -> dict[bytes, tuple[int, int]]:
        """After some of a batch's payload rows were ignored (their key was taken): which of
        the batch's records are the first of their payload. An ignored record repeats a
        payload stored before (it gets no row), or is the first of a payload whose hash
        starts as another's (a row in ``payload_collisions``)."""
        located: dict[bytes, tuple[int, int]] = {}
        for digest, offset, length in sorted(payloads, key=_offset_of):
            row = self._db.execute("SELECT offset FROM payloads WHERE hash = ?", (payload_key(digest),)).fetchone()
            if row is not None and int(row[0]) == offset:
                located[digest] = (offset, length)
            elif self.payload_location(digest) is None:
                self._db.execute(
                    "INSERT INTO payload_collisions (hash, offset, length) VALUES (?, ?, ?)", (digest, offset, length)
                )
                located[digest] = (offset, length)
        return located

    def _add_entries(self, entries: Sequence[tuple[Entry, int]], located: dict[bytes, tuple[int, int]]) -> None:
        first_seq = entries[0][0].seq
        if first_seq != self.entry_count or entries[-1][0].seq != first_seq + len(entries) - 1:
            raise ValueError("index batches must continue the journal's sequence numbers without gaps")
        spots = [(offset, len(entry.line)) for entry, offset in entries]
        self._db.execute("INSERT INTO seq_blocks (first_seq, locations) VALUES (?, ?)", (first_seq, pack_locations(spots)))
        # Each run's share of the batch: its entries' locations, payload codes, far locations.
        shares: dict[str, tuple[list[tuple[int, int]], list[int], list[tuple[int, int]]]] = {}
        for (entry, _), spot, (code, far) in zip(entries, spots, self._payload_codes(entries, located), strict=True):
            share = shares.get(entry.run)
            if share is None:
                share = shares[entry.run] = ([], [], [])
            share[0].append(spot)
            share[1].append(code)
            if far is not None:
                share[2].append(far)
        runs = self._upsert_runs(entries)
        self._db.executemany(
            "INSERT INTO run_spans (run_id, first_seq, locations, payloads) VALUES (?, ?, ?, ?)",
            [
                (*runs[run], pack_locations(locations), _pack_codes(codes, far))
                for run, (locations, codes, far) in shares.items()
            ],
        )

    def _payload_codes(
        self, entries: Sequence[tuple[Entry, int]], located: dict[bytes, tuple[int, int]]
    ) -> list[tuple[int, tuple[int, int] | None]]:
        """Each entry's payload code and the location it leaves out (:func:`payload_code`),
        its payload located from ``located`` or else the index (payloads stored before the
        batch)."""
        fromhex = bytes.fromhex
        digests = [None if entry.payload is None else fromhex(entry.payload) for entry, _ in entries]
        missing = [digest for digest in dict.fromkeys(digests) if digest is not None and digest not in located]
        if missing:
            located = {**located, **self.payload_locations(missing)}
        return [
            _code(offset, None if digest is None else located.get(digest, (0, 0)))
            for (_, offset), digest in zip(entries, digests, strict=True)
        ]

    def _upsert_runs(self, entries: Sequence[tuple[Entry, int]]) -> dict[str, tuple[int, int]]:
        """Fold a batch's entries into one row update per run (two statements per batch,
        not one per entry); returns each run's row id and first seq in the batch."""
        batch = fold_runs([entry for entry, _ in entries])
        known = self._run_ids(list(batch))
        agents = self._agent_ids({fold.agent for fold in batch.values() if fold.agent is not None})
        next_id = 0
        new_rows = []
        updates = []
        for run, fold in batch.items():
            first, last = fold.first, fold.last
            closes = int(last.kind in TERMINAL_KINDS)
            last_hash = bytes.fromhex(last.hash)
            if run in known:
                updates.append((fold.status, agents.get(fold.agent), last.ts, last.seq, fold.count, last_hash, closes, known[run]))
            else:
                if not next_id:
                    next_id = int(self._db.execute("SELECT coalesce(max(id), 0) + 1 FROM runs").fetchone()[0])
                known[run] = next_id
                new_rows.append(
                    (next_id, run, name_key(run), agents.get(fold.agent), fold.parent, fold.status or "created",
                     first.ts, last.ts - first.ts, first.seq, last.seq - first.seq, fold.count, last_hash, closes)
                )
                next_id += 1
        if updates:
            self._db.executemany(
                "UPDATE runs SET status = COALESCE(?, status), agent = COALESCE(agent, ?), "
                "updated_ts = ? - started_ts, last_seq = ? - first_seq, entries = entries + ?, last_hash = ?, closed = ? "
                "WHERE id = ?",
                updates,
            )
        if new_rows:
            self._db.executemany(
                "INSERT INTO runs (id, run, name_key, agent, parent, status, started_ts, updated_ts, first_seq, "
                "last_seq, entries, last_hash, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                new_rows,
            )
        return {run: (known[run], fold.first.seq) for run, fold in batch.items()}

    def _agent_ids(self, names: set[str]) -> dict[str | None, int]:
        """The numbers of agents' names in ``agents``, added when new."""
        ids: dict[str | None, int] = {}
        for name in sorted(names):
            self._db.execute("INSERT OR IGNORE INTO agents (name) VALUES (?)", (name,))
            ids[name] = int(self._db.execute("SELECT id FROM agents WHERE name = ?", (name,)).fetchone()[0])
        return ids

    def _run_ids(self, names: list[str]) -> dict[str, int]:
        known: dict[str, int] = {}
        for start in range(0, len(names), 500):
            chunk = names[start : start + 500]
            wanted = set(chunk)
            marks = ",".join("?" * len(chunk))
            keys = [name_key(name) for name in chunk]
            for row_id, run in self._db.execute(f"SELECT id, run FROM runs WHERE name_key IN ({marks})", keys):
                if run in wanted:
                    known[str(run)] = int(row_id)
        return known

    def runs(
        self,
        *,
        limit: int | None = None,
        status: str | None = None,
        offset: int = 0,
        agent: str | None = None,
        text: str | None = None,
        exclude: str | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first (by start time, then journal position); see ``Store.runs``."""
        where: list[str] = []
        args: list[Any] = []
        if exclude is not None:
            where.append("run <> ?")
            args.append(exclude)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if agent:
            where.append(f"instr(lower(coalesce({_AGENT.format('')}, '')), ?) > 0")
            args.append(agent.lower())
        if text:
            where.append(
                f"(instr(lower(run), ?) > 0 OR instr(lower(coalesce({_AGENT.format('')}, '')), ?) > 0"
                " OR instr(lower(coalesce(parent, '')), ?) > 0)"
            )
            args.extend([text.lower()] * 3)
        query = f"SELECT {_RUN_INFO_COLUMNS} FROM runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY started_ts DESC, id DESC LIMIT ? OFFSET ?"
        args.extend([-1 if limit is None else limit, max(0, offset)])
        return [RunInfo(*row) for row in self._db.execute(query, args)]

    def run(self, run: str) -> RunInfo | None:
        row = self._db.execute(
            f"SELECT {_RUN_INFO_COLUMNS} FROM runs WHERE name_key = ? AND run = ?",
            (name_key(run), run),
        ).fetchone()
        return None if row is None else RunInfo(*row)

    def head_state(self, run: str) -> tuple[int, str, bool] | None:
        """(index, hash, closed) of the last entry of a run; None if the run is unknown."""
        row = self._db.execute(
            "SELECT entries, last_hash, closed FROM runs WHERE name_key = ? AND run = ?", (name_key(run), run)
        ).fetchone()
        if row is None:
            return None
        return int(row[0]) - 1, _hex(row[1]), bool(row[2])

    def has_ended(self, run: str) -> bool:
        """Whether the index knows ``run`` as ended (its chain is closed for good)."""
        state = self.head_state(run)
        return state is not None and state[2]

    def head(self, run: str) -> tuple[int, str] | None:
        """(index, hash) of the last entry of an open run; None if unknown or closed."""
        state = self.head_state(run)
        if state is None or state[2]:
            return None
        return state[0], state[1]

    def entry_locations(self, run: str) -> list[tuple[int, int]]:
        """(offset, length) of every entry of ``run``, in order."""
        rows = self._db.execute(
            "SELECT s.locations FROM run_spans s JOIN runs r ON r.id = s.run_id "
            "WHERE r.name_key = ? AND r.run = ? ORDER BY s.first_seq",
            (name_key(run), run),
        )
        return [location for (blob,) in rows for location in unpack_locations(blob)]

    def entry_location(self, seq: int) -> tuple[int, int] | None:
        row = self._db.execute(
            "SELECT first_seq, locations FROM seq_blocks WHERE first_seq <= ? ORDER BY first_seq DESC LIMIT 1",
            (seq,),
        ).fetchone()
        if row is None:
            return None
        locations = unpack_locations(row[1])
        at = seq - int(row[0])
        return locations[at] if at < len(locations) else None

    def payload_location(self, digest: bytes) -> tuple[int, int] | None:
        """Where the first record of the payload ``digest`` is, by the index; None when it
        has no row for it. The row keyed by the digest's first bytes is the payload's unless
        the record there is a payload whose hash starts with the same bytes but differs (then
        its row is in ``payload_collisions``, if any). Whether the record there is a payload
        record at all is for the caller to check, as with any location the index gives."""
        row = self._db.execute(
            "SELECT offset, length FROM payloads WHERE hash = ?", (payload_key(digest),)
        ).fetchone()
        if row is None:
            return None
        found = self._record_digest(int(row[0])) if self._record_digest is not None else None
        if found is None or found == digest or found[:PAYLOAD_KEY_BYTES] != digest[:PAYLOAD_KEY_BYTES]:
            return int(row[0]), int(row[1])
        row = self._db.execute(
            "SELECT offset, length FROM payload_collisions WHERE hash = ?", (digest,)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def payload_locations(self, digests: Sequence[bytes]) -> dict[bytes, tuple[int, int]]:
        """The locations of those of ``digests`` the index holds (:meth:`payload_location`)."""
        found: dict[bytes, tuple[int, int]] = {}
        for digest in digests:
            location = self.payload_location(digest)
            if location is not None:
                found[digest] = location
        return found

    def run_counts(self, *, exclude: str) -> tuple[int, int]:
        """(runs, open runs), ``exclude`` (the admin chain) not counted."""
        row = self._db.execute(
            "SELECT count(*), coalesce(sum(closed = 0), 0) FROM runs WHERE run != ?", (exclude,)
        ).fetchone()
        return int(row[0]), int(row[1])

    def run_row(self, run: str) -> RunRow | None:
        row = self._db.execute(
            f"SELECT {_ROW_COLUMNS} FROM runs WHERE name_key = ? AND run = ?", (name_key(run), run)
        ).fetchone()
        return None if row is None else _run_row(row)

    def run_row_and_locations(
        self, run: str
    ) -> tuple[tuple[Any, ...] | None, list[tuple[int, int]], list[tuple[int, int] | None] | None]:
        """:meth:`run_row`, :meth:`entry_locations` of ``run`` and its entries' payload
        locations (:func:`payload_spots`; None when they do not decode) in one query: the
        read path of every run asks for all three. The row is as SQLite gives it, not yet
        typed (:func:`typed_run_row`): a reader that finds it equal to the row its entries
        give has no need to."""
        rows = self._db.execute(_ROW_AND_SPANS, (name_key(run), run)).fetchall()
        if not rows:
            return None, [], []
        locations: list[tuple[int, int]] = []
        spots: list[tuple[int, int] | None] | None = []
        for row in rows:
            if row[11] is None:
                continue
            span = unpack_locations(row[11])
            locations += span
            decoded = payload_spots(span, row[12])
            spots = None if decoded is None or spots is None else spots + decoded
        return rows[0][:11], locations, spots

    def last_block(self) -> tuple[int, bytes] | None:
        """The newest ``seq_blocks`` row: (first seq, packed locations)."""
        row = self._db.execute(
            "SELECT first_seq, locations FROM seq_blocks ORDER BY first_seq DESC LIMIT 1"
        ).fetchone()
        return None if row is None else (int(row[0]), packed_locations(row[1]))

    # -- whole-table reads, for verification (streamed: constant memory) ------------------
    def iter_seq_blocks(self) -> Iterator[tuple[int, bytes]]:
        """(first seq, entry locations packed as :data:`LOCATION` each) of every block."""
        for first_seq, blob in self._db.execute("SELECT first_seq, locations FROM seq_blocks ORDER BY first_seq"):
            yield int(first_seq), packed_locations(blob)

    def iter_payloads_by_offset(self) -> Iterator[tuple[bytes, int, int]]:
        """(what the row states of the payload's hash, as lowercase hex bytes: its first
        :data:`PAYLOAD_KEY_BYTES` bytes, or all of them for a row of ``payload_collisions``;
        offset, length) of every payload row, by offset. SQLite sorts in its own bounded
        memory, spilling to temporary files."""
        query = (
            "SELECT hash, offset, length FROM payloads UNION ALL "
            "SELECT hash, offset, length FROM payload_collisions ORDER BY offset"
        )
        for digest, offset, length in self._db.execute(query):
            yield (_key_hex(digest) if isinstance(digest, int) else bytes(digest).hex().encode()), offset, length

    def iter_closed_runs(self) -> Iterator[tuple[Any, ...]]:
        """(row id, *row) of every closed run, in the order their last entries come."""
        return iter(
            self._db.execute(
                f"SELECT id, {_ROW_COLUMNS} FROM runs WHERE closed != 0 ORDER BY first_seq + last_seq"
            )
        )

    def open_runs(self) -> dict[str, tuple[int, RunRow]]:
        return {
            str(row[1]): (int(row[0]), _run_row(row[1:]))
            for row in self._db.execute(f"SELECT id, {_ROW_COLUMNS} FROM runs WHERE closed = 0")
        }

    def iter_run_locations(self) -> Iterator[tuple[int, bytes, bytes]]:
        """(run row id, packed locations of all its entries, their payload codes followed
        by the locations those codes leave out, :func:`payload_code`), by row id, whatever
        rows the entries are spread over; a ``run_spans`` row of no run comes with id
        -1 - its run id."""
        current: int | None = None
        parts: list[bytes] = []
        codes: list[bytes] = []
        far: list[bytes] = []
        query = (
            "SELECT s.run_id, s.locations, s.payloads, r.id IS NULL FROM run_spans s "
            "LEFT JOIN runs r ON r.id = s.run_id ORDER BY s.run_id, s.first_seq"
        )
        for run_id, blob, payloads, orphan in self._db.execute(query):
            if orphan:
                yield -1 - int(run_id), packed_locations(blob), bytes(payloads)
                continue
            if run_id != current:
                if current is not None:
                    yield current, b"".join(parts), b"".join(codes) + b"".join(far)
                current, parts, codes, far = int(run_id), [], [], []
            span = packed_locations(blob)
            decoded = unpack_codes(payloads, len(span) // _LOCATION.size)
            parts.append(span)
            # Codes that do not decode: the row's stored bytes, which no journal gives.
            codes.append(bytes(payloads) if decoded is None else decoded[0])
            far.append(b"" if decoded is None else decoded[1])
        if current is not None:
            yield current, b"".join(parts), b"".join(codes) + b"".join(far)

    def has_payloads(self) -> bool:
        return bool(self._db.execute("SELECT EXISTS (SELECT 1 FROM payloads)").fetchone()[0])

    def payload_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM payloads").fetchone()[0])

    def payload_prefixes(self) -> Iterator[bytes]:
        """The first :data:`PAYLOAD_KEY_BYTES` bytes of the hash of every payload with a row."""
        size = PAYLOAD_KEY_BYTES
        for (key,) in self._db.execute("SELECT hash FROM payloads"):
            yield int(key).to_bytes(size, "big", signed=True)


def typed_run_row(row: Sequence[Any]) -> RunRow:
    """A run row as SQLite gave it, with the types :data:`RunRow` states."""
    return _run_row(row)


def _hex(value: Any) -> str:
    return bytes(value).hex() if isinstance(value, bytes) else str(value)


def _run_row(row: Sequence[Any]) -> RunRow:
    return (
        str(row[0]),
        None if row[1] is None else str(row[1]),
        None if row[2] is None else str(row[2]),
        str(row[3]),
        int(row[4]),
        int(row[5]),
        int(row[6]),
        int(row[7]),
        int(row[8]),
        str(row[9]),
        int(row[10]),
    )


_ROW_NAMES = RUN_ROW_COLUMNS.split(", ")
_ROW_AND_SPANS = (
    "SELECT "
    + ", ".join(
        {
            "last_hash": "lower(hex(r.last_hash))",
            "agent": _AGENT.format("r."),
            "updated_ts": "r.started_ts + r.updated_ts",
            "last_seq": "r.first_seq + r.last_seq",
        }.get(name, f"r.{name}")
        for name in _ROW_NAMES
    )
    + ", s.locations, s.payloads FROM runs r "
    "LEFT JOIN run_spans s ON s.run_id = r.id WHERE r.name_key = ? AND r.run = ? ORDER BY s.first_seq"
)
