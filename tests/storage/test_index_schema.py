"""The directory store's index (schema 5): its rows stay small, a payload is found by its
hash even when another payload's hash starts with the same bytes, and an index of an
older schema is rebuilt from the journal on open."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from tests.storage.storage_helpers import TickClock
from tests.storage.test_index_tamper import verify_store_cli
from tracelock.core.canonical import dumps
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.index import PAYLOAD_KEY_BYTES, SCHEMA_VERSION

# Two payloads whose SHA-256 digests share their first 4 bytes (8e3265b9), found by search.
_TWINS = ({"n": 7335}, {"n": 13654})


def _digest(value: object) -> str:
    data = dumps(value)
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path / "index.sqlite")
    try:
        return list(db.execute(sql))
    finally:
        db.close()


def _record(store: DirectoryStore, run: str, number: int) -> None:
    """A run shaped as the README's (6 entries, 5 payloads of their own)."""
    store.append(run, "run.start", payload={"task": f"where is order {number}?"}, meta={"agent": "demo", "status": "running"})
    store.append(run, "effect", payload={"llm": f"plan {number}"}, durable=False)
    store.append(run, "effect", payload={"tool": "search", "order": f"A-{number}"}, durable=False)
    store.append(run, "effect.intent", meta={"tool": "send"})
    store.append(run, "effect.result", payload={"sent": f"msg-{number}"}, durable=False)
    store.append(run, "run.end", payload={"output": number}, meta={"status": "completed"})


def test_the_index_holds_well_under_half_the_bytes_per_run_it_did(tmp_path: Path) -> None:
    """What SQLite stores of every row (record bytes, dbstat's ``payload``: no page slack)
    per run of the README's shape. Schema 4 held 621 bytes per such run (payload rows keyed
    by the whole hash, 12-byte locations, a hex last hash, an index repeating run names)."""
    runs = 300
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        for number in range(runs):
            _record(store, f"run-{number:020x}", number)
    ((stored,),) = _query(tmp_path, "SELECT sum(payload) FROM dbstat WHERE name NOT IN ('meta', 'sqlite_schema')")
    assert isinstance(stored, int)
    assert stored / runs < 300
    ((key_type,),) = _query(tmp_path, "SELECT DISTINCT typeof(hash) FROM payloads")
    assert key_type == "integer"


def test_payloads_whose_hashes_start_alike_are_each_found(tmp_path: Path) -> None:
    first, second = (_digest(value) for value in _TWINS)
    assert first[: 2 * PAYLOAD_KEY_BYTES] == second[: 2 * PAYLOAD_KEY_BYTES] and first != second
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        store.append("a", "run.start", payload=_TWINS[0])
        store.append("a", "run.end", meta={"status": "completed"})
        store.append("b", "run.start", payload=_TWINS[1])
        store.append("b", "effect", payload=_TWINS[0])  # stored before: not written again
        store.append("b", "run.end", payload=_TWINS[1], meta={"status": "completed"})
        assert store.get_payload(second) == _TWINS[1]
    assert _query(tmp_path, "SELECT count(*) FROM payload_collisions") == [(1,)]
    journal = (tmp_path / "journal.log").read_bytes()
    assert journal.count(f"={first} ".encode()) == 1 and journal.count(f"={second} ".encode()) == 1
    for rebuilt in (False, True):
        if rebuilt:
            (tmp_path / "index.sqlite").unlink()
        with DirectoryStore(tmp_path, read_only=rebuilt) as store:
            assert store.get_payload(first) == _TWINS[0]
            assert store.get_payload(second) == _TWINS[1]
            assert [entry.payload for entry in store.entries("b")] == [second, first, second]
            assert store.get_payloads_bytes([first, second]) == {first: b'{"n":7335}', second: b'{"n":13654}'}
    assert verify_store_cli(tmp_path)["exit_code"] == 0


def test_an_index_of_schema_4_is_rebuilt_on_open(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        for number in range(3):
            _record(store, f"r{number}", number)
    # The tables of schema 4 (hash keys, 12-byte locations, hex last hashes), claiming to
    # cover the whole journal with no rows: trusted, every read would find nothing.
    db = sqlite3.connect(tmp_path / "index.sqlite")
    try:
        end, entries, last = (
            value for (value,) in db.execute("SELECT value FROM meta WHERE key IN ('journal_end', 'entries', 'last_hash') ORDER BY key")
        )
        for table in ("runs", "seq_blocks", "run_spans", "payloads", "payload_collisions"):
            db.execute(f"DROP TABLE {table}")
        db.execute(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, run TEXT NOT NULL UNIQUE, agent TEXT, parent TEXT, "
            "status TEXT NOT NULL, started_ts INTEGER NOT NULL, updated_ts INTEGER NOT NULL, "
            "first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, entries INTEGER NOT NULL, "
            "last_hash TEXT NOT NULL, closed INTEGER NOT NULL)"
        )
        db.execute("CREATE TABLE seq_blocks (first_seq INTEGER PRIMARY KEY, locations BLOB NOT NULL)")
        db.execute(
            "CREATE TABLE run_spans (run_id INTEGER NOT NULL, first_seq INTEGER NOT NULL, locations BLOB NOT NULL, "
            "payloads BLOB NOT NULL, PRIMARY KEY (run_id, first_seq)) WITHOUT ROWID"
        )
        db.execute("CREATE TABLE payloads (hash BLOB PRIMARY KEY, offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID")
        db.execute("UPDATE meta SET value = '4' WHERE key = 'schema'")
        db.commit()
    finally:
        db.close()
    assert (end, entries, last) != ("0", "0", "")
    with DirectoryStore(tmp_path) as store:
        assert [info.run for info in store.runs()] == ["r2", "r1", "r0"]
        assert store.get_payload(store.entries("r1")[4].payload or "") == {"sent": "msg-1"}
    assert _query(tmp_path, "SELECT value FROM meta WHERE key = 'schema'") == [(SCHEMA_VERSION,)] == [("5",)]
    assert _query(tmp_path, "SELECT count(*) FROM payloads") == [(15,)]
    assert verify_store_cli(tmp_path)["exit_code"] == 0
