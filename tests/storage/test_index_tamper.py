"""``index.sqlite`` is a cache: lost, damaged, of an old schema or stale after a crash it is
rebuilt silently; readable but contradicting the journal it is reported as tampering
(STORE_INDEX_TAMPERED), on open, on the read that meets the lie, and by ``verify --store``."""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.storage_helpers import TickClock, record_run
from tracelock.cli.main import cli
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.index import (
    pack_codes,
    pack_locations,
    unpack_codes,
    unpack_locations,
)
from tracelock.storage.directory.synced_mark import MARK_FILE, encode_mark
from tracelock.storage.errors import IndexTamperedError

_LOCATION = struct.Struct("<QI")
CODE = "STORE_INDEX_TAMPERED"


def build(path: Path, runs: int = 4) -> None:
    with DirectoryStore(path, clock=TickClock()) as store:
        for number in range(runs):
            record_run(store, f"r{number}")


def edit_index(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    db = sqlite3.connect(path / "index.sqlite")
    try:
        for sql, args in statements:
            db.execute(sql, args)
        db.commit()
    finally:
        db.close()


def query(path: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path / "index.sqlite")
    try:
        return list(db.execute(sql, args))
    finally:
        db.close()


def verify_store_cli(path: Path) -> dict[str, object]:
    result = CliRunner().invoke(
        cli, ["verify", "--store", str(path), "--json"], catch_exceptions=False
    )
    document = json.loads(result.stdout)
    document["exit_code"] = result.exit_code
    return document


def verify_text(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["verify", "--store", str(path)], catch_exceptions=False)
    return result.exit_code, result.output


def assert_reported(path: Path) -> None:
    document = verify_store_cli(path)
    assert document["exit_code"] == 1
    issue = document["issue"]
    assert isinstance(issue, dict)
    assert issue["code"] == CODE
    assert "delete" in issue["message"] and "index.sqlite" in issue["message"]
    code, text = verify_text(path)
    assert code == 1 and f"[{CODE}]" in text


def swap_location(path: Path, seq_a: int, seq_b: int) -> None:
    """Exchange two entries' locations in the seq_blocks row holding both."""
    ((first, blob),) = query(
        path,
        "SELECT first_seq, locations FROM seq_blocks WHERE first_seq <= ? "
        "ORDER BY first_seq DESC LIMIT 1",
        (seq_a,),
    )
    assert isinstance(first, int) and isinstance(blob, bytes)
    items = unpack_locations(blob)
    a, b = seq_a - first, seq_b - first
    items[a], items[b] = items[b], items[a]
    packed = pack_locations(items)
    edit_index(path, ("UPDATE seq_blocks SET locations = ? WHERE first_seq = ?", (packed, first)))


# -- tampering ---------------------------------------------------------------------------


def test_rewritten_entry_location_in_last_batch_is_reported_on_open(tmp_path: Path) -> None:
    build(tmp_path)
    count = query(tmp_path, "SELECT value FROM meta WHERE key = 'entries'")[0][0]
    assert isinstance(count, str)
    swap_location(tmp_path, int(count) - 3, int(count) - 2)
    with pytest.raises(IndexTamperedError) as caught:
        DirectoryStore(tmp_path)
    assert "index.sqlite" in caught.value.message
    assert_reported(tmp_path)


def test_rewritten_entry_location_in_last_batch_makes_a_reader_use_a_private_index(
    tmp_path: Path,
) -> None:
    build(tmp_path)
    swap_location(tmp_path, 14, 15)
    with DirectoryStore(tmp_path, read_only=True) as store:
        assert store.index_problem is not None and "index.sqlite" in store.index_problem
        assert store.entry_at(14).seq == 14
    with pytest.raises(IndexTamperedError):
        DirectoryStore(tmp_path)


def test_rewritten_entry_location_anywhere_is_reported_by_verify_and_reads(tmp_path: Path) -> None:
    build(tmp_path, runs=20)  # 80 entries: more than an open spot-checks
    swap_location(tmp_path, 1, 2)
    assert_reported(tmp_path)
    with DirectoryStore(tmp_path, read_only=True) as store:
        assert store.index_problem is None
        with pytest.raises(IndexTamperedError):
            store.entry_at(1)
        # A run is read through its own entry list (run_spans), which was left intact.
        assert [entry.seq for entry in store.entries("r0")] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("column", "value"),
    [("last_hash", "0" * 64), ("entries", 2), ("closed", 0), ("status", "failed"), ("last_seq", 1)],
)
def test_run_row_that_contradicts_the_journal_is_reported_when_read(
    tmp_path: Path, column: str, value: object
) -> None:
    build(tmp_path)
    edit_index(tmp_path, (f"UPDATE runs SET {column} = ? WHERE run = 'r1'", (value,)))
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        with pytest.raises(IndexTamperedError):
            store.entries("r1")
        store.entries("r2")  # the other runs still read
    assert_reported(tmp_path)


def test_wrong_head_of_an_open_run_is_refused_before_an_append(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        store.append("open", "run.start", payload={"input": 1}, meta={"status": "running"})
        record_run(store, "later")
    edit_index(tmp_path, ("UPDATE runs SET last_hash = ? WHERE run = 'open'", ("1" * 64,)))
    with DirectoryStore(tmp_path, clock=TickClock()) as store, pytest.raises(IndexTamperedError):
        store.append("open", "effect", payload={"n": 1})
    assert_reported(tmp_path)


def test_wrong_head_of_the_last_run_is_reported_on_open(tmp_path: Path) -> None:
    build(tmp_path)
    edit_index(tmp_path, ("UPDATE runs SET status = 'failed' WHERE run = 'r3'", ()))
    with pytest.raises(IndexTamperedError):
        DirectoryStore(tmp_path)


def test_payload_location_pointing_elsewhere_is_reported(tmp_path: Path) -> None:
    build(tmp_path)
    rows = query(tmp_path, "SELECT hash, offset, length FROM payloads ORDER BY offset")
    (key, offset, _), (_, other_offset, other_length) = rows[1], rows[2]
    edit_index(
        tmp_path,
        (
            "UPDATE payloads SET offset = ?, length = ? WHERE hash = ?",
            (other_offset, other_length, key),
        ),
    )
    assert isinstance(offset, int)
    digest = (tmp_path / "journal.log").read_bytes()[offset + 1 : offset + 65].decode()
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError):
        store.get_payload_bytes(digest)
    assert_reported(tmp_path)


def test_deleted_payload_row_is_reported_by_verify_not_as_a_missing_payload(tmp_path: Path) -> None:
    build(tmp_path)
    rows = query(tmp_path, "SELECT hash FROM payloads ORDER BY offset")
    edit_index(tmp_path, ("DELETE FROM payloads WHERE hash = ?", (rows[0][0],)))
    assert_reported(tmp_path)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(column=st.sampled_from(["offset", "length"]), delta=st.integers(min_value=1, max_value=40))
def test_any_shifted_payload_location_is_reported(tmp_path: Path, column: str, delta: int) -> None:
    path = tmp_path / f"s-{column}-{delta}"
    shutil.rmtree(path, ignore_errors=True)
    build(path, runs=2)
    ((digest,),) = query(path, "SELECT hash FROM payloads ORDER BY offset LIMIT 1")
    edit_index(
        path, (f"UPDATE payloads SET {column} = {column} + ? WHERE hash = ?", (delta, digest))
    )
    assert_reported(path)


# -- honest staleness --------------------------------------------------------------------


def grow_after(path: Path) -> Callable[[], None]:
    def grow() -> None:
        with DirectoryStore(path, clock=TickClock(1_800_000_000_000)) as store:
            for number in range(3):
                record_run(store, f"late{number}")

    return grow


def test_index_behind_the_journal_is_caught_up_silently(tmp_path: Path) -> None:
    build(tmp_path)
    saved = tmp_path / "index.saved"
    shutil.copy(tmp_path / "index.sqlite", saved)
    grow_after(tmp_path)()
    shutil.copy(saved, tmp_path / "index.sqlite")
    with DirectoryStore(tmp_path) as store:
        assert [e.kind for e in store.entries("late2")][-1] == "run.end"
    document = verify_store_cli(tmp_path)
    assert document["exit_code"] == 0, document


@pytest.mark.parametrize("lost", ["cut", "nul"])
def test_index_covering_an_unsynced_tail_lost_in_a_crash_is_rebuilt(
    tmp_path: Path, lost: str
) -> None:
    build(tmp_path)
    journal = tmp_path / "journal.log"
    synced = journal.read_bytes()
    grow_after(tmp_path)()
    grown = journal.read_bytes()
    assert len(grown) > len(synced)
    # A power cut: the bytes after the last sync never reached the disk (the file ends
    # there, or they read back as NUL bytes), the mark is older, the unsynced index kept them.
    tail = b"" if lost == "cut" else b"\0" * (len(grown) - len(synced))
    journal.write_bytes(synced + tail)
    (tmp_path / MARK_FILE).write_bytes(encode_mark(len(synced)))
    with DirectoryStore(tmp_path) as store:
        assert store.size() == 4 * 4
        assert {run.run for run in store.runs()} == {f"r{n}" for n in range(4)}
    document = verify_store_cli(tmp_path)
    assert document["exit_code"] == 0, document


def test_damaged_index_file_is_rebuilt_silently(tmp_path: Path) -> None:
    build(tmp_path)
    (tmp_path / "index.sqlite").write_bytes(b"not a database at all" * 100)
    with DirectoryStore(tmp_path) as store:
        assert len(store.entries("r2")) == 4
    assert verify_store_cli(tmp_path)["exit_code"] == 0


# -- the whole comparison ----------------------------------------------------------------


def build_varied(path: Path) -> None:
    """Several handles, batches past the index's flush size, runs left open, a run with a
    parent, repeated payloads, a redaction with its erased record."""
    with DirectoryStore(path, clock=TickClock()) as store:
        for number in range(600):
            record_run(store, f"r{number}", big="same payload")
        store.append(
            "open-a",
            "run.start",
            payload={"x": 1},
            meta={"agent": "a", "parent": "r1", "status": "running"},
        )
    with DirectoryStore(path, clock=TickClock(1_750_000_000_000)) as store:
        store.append("open-a", "effect", payload={"x": 1})
        store.append("open-b", "run.start", meta={"status": "running"})
        entry = store.append(
            "gone", "run.start", payload={"card": "4111"}, meta={"status": "running"}
        )
        assert entry.payload is not None
        store.append(
            "tracelock:admin", "payload.redact", meta={"payload": entry.payload, "reason": "PII"}
        )
        assert store.erase_payload(entry.payload)


def fresh_copy(store: Path, copy: Path) -> Path:
    """``store`` copied to ``copy`` (a Hypothesis example reuses its ``tmp_path``)."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store, copy)
    return copy


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("varied") / "store"
    build_varied(path)
    return path


def test_an_honest_index_passes_the_whole_comparison(varied: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(varied, copy)
    assert verify_store_cli(copy)["exit_code"] == 0
    (copy / "index.sqlite").unlink()  # rebuilt: no row for the erased record, fewer batches
    assert verify_store_cli(copy)["exit_code"] == 0


_RUN_COLUMNS = [
    "agent",
    "parent",
    "status",
    "started_ts",
    "updated_ts",
    "first_seq",
    "last_seq",
    "entries",
    "last_hash",
    "closed",
]


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    run=st.sampled_from(["r0", "r300", "r599", "open-a", "open-b", "tracelock:admin"]),
    column=st.sampled_from(_RUN_COLUMNS),
)
def test_any_changed_run_row_field_is_reported(
    varied: Path, tmp_path: Path, run: str, column: str
) -> None:
    copy = fresh_copy(varied, tmp_path / f"{run}-{column}")
    ((value,),) = query(copy, f"SELECT {column} FROM runs WHERE run = ?", (run,))
    if isinstance(value, bytes):  # the last hash, stored as 32 bytes: one bit flipped
        changed: object = value[:-1] + bytes((value[-1] ^ 1,))
    else:
        changed = "x" + str(value) if isinstance(value, str) or value is None else int(value) + 1
    if column == "closed":
        changed = 0 if value else 1
    edit_index(copy, (f"UPDATE runs SET {column} = ? WHERE run = ?", (changed, run)))
    assert_reported(copy)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_moved_run_span_location_is_reported(
    varied: Path, tmp_path: Path, data: st.DataObject
) -> None:
    copy = fresh_copy(varied, tmp_path / "spans")
    rows = query(
        copy, "SELECT run_id, first_seq, locations FROM run_spans ORDER BY run_id, first_seq"
    )
    run_id, first_seq, blob = rows[data.draw(st.integers(0, len(rows) - 1))]
    assert isinstance(blob, bytes)
    items = unpack_locations(blob)
    at = data.draw(st.integers(0, len(items) - 1))
    offset, length = items[at]
    items[at] = (offset + data.draw(st.sampled_from([-1, 1, 100])), length)
    packed = pack_locations(items)
    edit_index(
        copy,
        (
            "UPDATE run_spans SET locations = ? WHERE run_id = ? AND first_seq = ?",
            (packed, run_id, first_seq),
        ),
    )
    assert_reported(copy)


# -- payload locations of a run's entries (run_spans.payloads, index schema 5) -----------
#
# Decoded (``index.unpack_codes``): per entry of a row a code (0: no payload; 1: the next
# (offset, length) after the codes; 2: no row for the payload; n >= 3: a record of n - 3
# bytes that ends right before the entry), then the locations of the code-1 entries.

_CODE = struct.Struct("<I")


def _spans_row(path: Path, run: str) -> tuple[int, int, bytes, bytes]:
    ((run_id, first_seq, locations, payloads),) = query(
        path,
        "SELECT s.run_id, s.first_seq, s.locations, s.payloads FROM run_spans s "
        "JOIN runs r ON r.id = s.run_id WHERE r.run = ?",
        (run,),
    )
    assert isinstance(run_id, int) and isinstance(first_seq, int)
    assert isinstance(locations, bytes) and isinstance(payloads, bytes)
    return run_id, first_seq, locations, payloads


def _codes(locations: bytes, payloads: bytes) -> tuple[list[int], list[tuple[int, int]]]:
    decoded = unpack_codes(payloads, len(unpack_locations(locations)))
    assert decoded is not None
    codes, far = decoded
    return [code for (code,) in _CODE.iter_unpack(codes)], list(_LOCATION.iter_unpack(far))


def _set_payloads(path: Path, run_id: int, first_seq: int, codes: list[int], far: list[tuple[int, int]]) -> None:
    blob = pack_codes(b"".join(_CODE.pack(code) for code in codes), b"".join(_LOCATION.pack(*item) for item in far))
    edit_index(
        path,
        ("UPDATE run_spans SET payloads = ? WHERE run_id = ? AND first_seq = ?", (blob, run_id, first_seq)),
    )


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_changed_payload_location_of_a_run_is_reported(
    varied: Path, tmp_path: Path, data: st.DataObject
) -> None:
    copy = fresh_copy(varied, tmp_path / "payload-spans")
    rows = query(copy, "SELECT run_id, first_seq, locations, payloads FROM run_spans ORDER BY run_id, first_seq")
    run_id, first_seq, locations, payloads = rows[data.draw(st.integers(0, len(rows) - 1))]
    assert isinstance(run_id, int) and isinstance(first_seq, int)
    assert isinstance(locations, bytes) and isinstance(payloads, bytes)
    codes, far = _codes(locations, payloads)
    at = data.draw(st.integers(0, len(codes) - 1))
    code = codes[at]
    if code >= 3:  # a record written with the entry: one byte longer, or said to be elsewhere
        change = data.draw(st.sampled_from(["longer", "far", "no row", "none"]))
        if change == "longer":
            codes[at] = code + 1
        elif change == "far":
            entry_offset = unpack_locations(locations)[at][0]
            codes[at] = 1
            # One byte past where the record starts.
            far.insert(sum(1 for c in codes[:at] if c == 1), (entry_offset - (code - 3), code - 3))
        else:
            codes[at] = 2 if change == "no row" else 0
    elif code == 0:
        codes[at] = data.draw(st.sampled_from([2, 3 + 10]))
    else:
        codes[at] = 0
    _set_payloads(copy, run_id, first_seq, codes, far)
    assert_reported(copy)


def _payloads_of(store: DirectoryStore, run: str) -> list[object]:
    return [store.get_payload(entry.payload) for entry in store.entries(run) if entry.payload]


def test_a_run_read_through_a_wrong_payload_location_is_reported(tmp_path: Path) -> None:
    build(tmp_path)
    with DirectoryStore(tmp_path) as store:
        honest = _payloads_of(store, "r0")
    run_id, first_seq, locations, payloads = _spans_row(tmp_path, "r0")
    codes, far = _codes(locations, payloads)
    assert far == [] and all(code >= 3 for code in codes)  # the first run: each written with its entry
    # The second effect's payload said to be the first's record: same length, other bytes.
    first_effect = unpack_locations(locations)[1][0]
    codes[2], far = 1, [(first_effect - (codes[1] - 3) - 1, codes[1] - 3)]
    _set_payloads(tmp_path, run_id, first_seq, codes, far)
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError) as caught:
        _payloads_of(store, "r0")
    assert "payload" in caught.value.message
    assert honest[0] == {"input": "r0"}  # the honest read had every payload
    assert_reported(tmp_path)


def test_payload_locations_that_do_not_fit_the_entries_are_reported(tmp_path: Path) -> None:
    build(tmp_path)
    run_id, first_seq, locations, payloads = _spans_row(tmp_path, "r1")
    edit_index(
        tmp_path,
        (
            "UPDATE run_spans SET payloads = ? WHERE run_id = ? AND first_seq = ?",
            (payloads[:-2], run_id, first_seq),
        ),
    )
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError) as caught:
        store.entries("r1")
    assert "payload locations for run r1 do not fit the run's entries" in caught.value.message
    assert_reported(tmp_path)
    codes, far = _codes(locations, payloads)
    codes[0] = 0  # run.start said to name no payload
    _set_payloads(tmp_path, run_id, first_seq, codes, far)
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError) as caught:
        store.entries("r1")
    assert "names no payload, which the entry does" in caught.value.message


def test_a_run_reads_each_payload_where_its_first_record_is(tmp_path: Path) -> None:
    """A payload stored by an earlier run (and an earlier index batch) is located at its
    first record; an entry without a payload has the code 0."""
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        record_run(store, "first", big="shared")
    with DirectoryStore(tmp_path, clock=TickClock(1_800_000_000_000)) as store:
        store.append("second", "run.start", meta={"status": "running"})
        store.append("second", "effect", payload={"tool": "t", "n": 0, "text": "shared"})
        store.append("second", "run.end", payload={"output": "second"}, meta={"status": "completed"})
        shared = store.entries("second")[1].payload
        assert shared == store.entries("first")[1].payload
        assert _payloads_of(store, "second") == [{"tool": "t", "n": 0, "text": "shared"}, {"output": "second"}]
    journal = (tmp_path / "journal.log").read_bytes()
    record = b"=" + str(shared).encode() + b" "
    assert journal.count(record) == 1
    first_record = journal.index(record)
    length = journal.index(b"\n", first_record) - first_record
    _, _, locations, payloads = _spans_row(tmp_path, "second")
    codes, far = _codes(locations, payloads)
    end_offset, _ = unpack_locations(locations)[2]
    end_record = journal.rindex(b"\n=", 0, end_offset - 1) + 1
    assert codes == [0, 1, end_offset - 1 - end_record + 3]
    assert far == [(first_record, length)]
    assert verify_store_cli(tmp_path)["exit_code"] == 0


def test_an_index_of_schema_2_is_rebuilt_with_payload_locations(tmp_path: Path) -> None:
    build(tmp_path)
    edit_index(
        tmp_path,
        ("DROP TABLE run_spans", ()),
        (
            "CREATE TABLE run_spans (run_id INTEGER NOT NULL, first_seq INTEGER NOT NULL, "
            "locations BLOB NOT NULL, PRIMARY KEY (run_id, first_seq)) WITHOUT ROWID",
            (),
        ),
        ("UPDATE meta SET value = '2' WHERE key = 'schema'", ()),
    )
    with DirectoryStore(tmp_path) as store:
        assert len(store.entries("r3")) == 4
        assert store.get_payload(store.entries("r3")[0].payload or "") == {"input": "r3"}
    assert query(tmp_path, "SELECT value FROM meta WHERE key = 'schema'") == [("5",)]
    _, _, locations, payloads = _spans_row(tmp_path, "r3")
    codes, far = _codes(locations, payloads)
    # Its start and end written with it; its two effects repeat the first run's payloads.
    assert codes[0] >= 3 and codes[3] >= 3 and codes[1:3] == [1, 1]
    _, _, first_locations, _ = _spans_row(tmp_path, "r0")
    first_effects = [unpack_locations(first_locations)[n][0] for n in (1, 2)]
    journal = (tmp_path / "journal.log").read_bytes()
    assert [journal[offset + length + 1 :].startswith(b"{") for offset, length in far] == [True, True]
    assert [offset + length + 1 for offset, length in far] == first_effects
    assert verify_store_cli(tmp_path)["exit_code"] == 0
