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
from tracelock.storage.errors import IndexTamperedError
from tracelock.storage.synced_mark import MARK_FILE, encode_mark

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
    items = list(_LOCATION.iter_unpack(blob))
    a, b = seq_a - first, seq_b - first
    items[a], items[b] = items[b], items[a]
    packed = b"".join(_LOCATION.pack(*item) for item in items)
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
    (digest, _, _), (_, other_offset, other_length) = rows[1], rows[2]
    edit_index(
        tmp_path,
        (
            "UPDATE payloads SET offset = ?, length = ? WHERE hash = ?",
            (other_offset, other_length, digest),
        ),
    )
    assert isinstance(digest, bytes)
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError):
        store.get_payload_bytes(digest.hex())
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
    copy = tmp_path / f"{run}-{column}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(varied, copy)
    ((value,),) = query(copy, f"SELECT {column} FROM runs WHERE run = ?", (run,))
    changed: object = (
        "x" + str(value) if isinstance(value, str) or value is None else int(value) + 1
    )
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
    copy = tmp_path / "spans"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(varied, copy)
    rows = query(
        copy, "SELECT run_id, first_seq, locations FROM run_spans ORDER BY run_id, first_seq"
    )
    run_id, first_seq, blob = rows[data.draw(st.integers(0, len(rows) - 1))]
    assert isinstance(blob, bytes)
    items = list(_LOCATION.iter_unpack(blob))
    at = data.draw(st.integers(0, len(items) - 1))
    offset, length = items[at]
    items[at] = (offset + data.draw(st.sampled_from([-1, 1, 100])), length)
    packed = b"".join(_LOCATION.pack(*item) for item in items)
    edit_index(
        copy,
        (
            "UPDATE run_spans SET locations = ? WHERE run_id = ? AND first_seq = ?",
            (packed, run_id, first_seq),
        ),
    )
    assert_reported(copy)


# -- payload locations of a run's entries (run_spans.payloads, index schema 3) -----------


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_moved_payload_location_of_a_run_is_reported(
    varied: Path, tmp_path: Path, data: st.DataObject
) -> None:
    copy = tmp_path / "payload-spans"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(varied, copy)
    rows = query(
        copy,
        "SELECT run_id, first_seq, payloads FROM run_spans WHERE length(payloads) > 0 "
        "ORDER BY run_id, first_seq",
    )
    run_id, first_seq, blob = rows[data.draw(st.integers(0, len(rows) - 1))]
    assert isinstance(blob, bytes)
    items = list(_LOCATION.iter_unpack(blob))
    at = data.draw(st.integers(0, len(items) - 1))
    offset, length = items[at]
    items[at] = data.draw(
        st.sampled_from([(offset + 1, length), (offset, length + 1), (0, 0), (offset + 100, length)])
    )
    if items[at] == (offset, length):  # (0, 0) drawn for an entry the index has no row for
        items[at] = (offset + 1, length)
    packed = b"".join(_LOCATION.pack(*item) for item in items)
    edit_index(
        copy,
        (
            "UPDATE run_spans SET payloads = ? WHERE run_id = ? AND first_seq = ?",
            (packed, run_id, first_seq),
        ),
    )
    assert_reported(copy)


def _run_spans_payloads(path: Path, run: str) -> bytes:
    ((blob,),) = query(
        path,
        "SELECT s.payloads FROM run_spans s JOIN runs r ON r.id = s.run_id WHERE r.run = ?",
        (run,),
    )
    assert isinstance(blob, bytes)
    return blob


def _set_run_spans_payloads(path: Path, run: str, blob: bytes) -> None:
    edit_index(
        path,
        (
            "UPDATE run_spans SET payloads = ? WHERE run_id = (SELECT id FROM runs WHERE run = ?)",
            (blob, run),
        ),
    )


def _payloads_of(store: DirectoryStore, run: str) -> list[object]:
    return [store.get_payload(entry.payload) for entry in store.entries(run) if entry.payload]


def test_a_run_read_through_swapped_payload_locations_is_reported(tmp_path: Path) -> None:
    build(tmp_path)
    with DirectoryStore(tmp_path) as store:
        honest = _payloads_of(store, "r2")
    items = list(_LOCATION.iter_unpack(_run_spans_payloads(tmp_path, "r2")))
    assert len(items) == 4 and len(set(items)) == 4
    items[1], items[2] = items[2], items[1]  # two effect payloads: same length, other bytes
    _set_run_spans_payloads(tmp_path, "r2", b"".join(_LOCATION.pack(*item) for item in items))
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError) as caught:
        _payloads_of(store, "r2")
    assert "payload" in caught.value.message
    assert honest[0] == {"input": "r2"}  # the honest read had every payload
    assert_reported(tmp_path)


def test_a_run_with_fewer_payload_locations_than_payloads_is_reported(tmp_path: Path) -> None:
    build(tmp_path)
    blob = _run_spans_payloads(tmp_path, "r1")
    _set_run_spans_payloads(tmp_path, "r1", blob[: -_LOCATION.size])
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError) as caught:
        store.entries("r1")
    assert "3 payload locations for run r1, whose entries name 4 payloads" in caught.value.message
    assert_reported(tmp_path)


def test_a_run_reads_each_payload_where_its_first_record_is(tmp_path: Path) -> None:
    """A payload stored by an earlier run (and an earlier index batch) is located at its
    first record; an entry without a payload takes no location."""
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        record_run(store, "first", big="shared")
    with DirectoryStore(tmp_path, clock=TickClock(1_800_000_000_000)) as store:
        store.append("second", "run.start", meta={"status": "running"})
        store.append("second", "effect", payload={"tool": "t", "n": 0, "text": "shared"})
        store.append("second", "run.end", payload={"output": "second"}, meta={"status": "completed"})
        first = store.entries("first")
        second = store.entries("second")
        shared = second[1].payload
        assert shared == first[1].payload
        assert _payloads_of(store, "second") == [{"tool": "t", "n": 0, "text": "shared"}, {"output": "second"}]
    first_spots = list(_LOCATION.iter_unpack(_run_spans_payloads(tmp_path, "first")))
    second_spots = list(_LOCATION.iter_unpack(_run_spans_payloads(tmp_path, "second")))
    assert len(second_spots) == 2  # run.start names no payload
    assert second_spots[0] == first_spots[1]
    journal = (tmp_path / "journal.log").read_bytes()
    offset, length = second_spots[0]
    assert journal[offset : offset + length].startswith(b"=" + str(shared).encode() + b" ")
    assert journal.count(b"=" + str(shared).encode()) == 1
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
    assert query(tmp_path, "SELECT value FROM meta WHERE key = 'schema'") == [("3",)]
    assert len(_run_spans_payloads(tmp_path, "r3")) == 4 * _LOCATION.size
    assert verify_store_cli(tmp_path)["exit_code"] == 0
