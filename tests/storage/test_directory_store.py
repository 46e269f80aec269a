"""The embedded directory store: appends, payload dedup, index, locking, failures."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.storage.storage_helpers import TickClock, record_run
from tracelock import merkle
from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, encode_entry
from tracelock.storage.backend import NewEntry
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.journal import PAYLOAD, Record, scan_records
from tracelock.storage.directory.synced_mark import encode_mark
from tracelock.storage.errors import (
    DurabilityError,
    JournalCorruptError,
    PayloadMissingError,
    PayloadRedactedError,
    RunNotFoundError,
    StoreClosedError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from tracelock.storage.verify import verify_run, verify_store


def _records(store_dir: Path) -> list[Record]:
    fd = os.open(store_dir / "journal.log", os.O_RDONLY)
    try:
        return [r for r in scan_records(fd, 0) if isinstance(r, Record)]
    finally:
        os.close(fd)


def test_append_assigns_seq_index_and_chain(store: DirectoryStore) -> None:
    a0 = store.append("a", "run.start", payload={"x": 1})
    b0 = store.append("b", "run.start", payload={"x": 2})
    a1 = store.append("a", "effect", payload={"y": 1})
    assert [a0.seq, b0.seq, a1.seq] == [0, 1, 2]
    assert (a0.i, a0.prev) == (0, None)
    assert (a1.i, a1.prev) == (1, a0.hash)
    assert b0.prev is None
    assert [e.hash for e in store.entries("a")] == [a0.hash, a1.hash]
    assert store.get_payload(a1.payload or "") == {"y": 1}


def test_same_payload_is_stored_once(store: DirectoryStore, store_dir: Path) -> None:
    response = {"choices": [{"text": "the same long LLM answer " * 40}]}
    for number in range(50):
        store.append(f"r{number}", "effect", payload=response, durable=False)
    store.sync()
    payload_records = [r for r in _records(store_dir) if r.kind == PAYLOAD]
    assert len(payload_records) == 1
    assert store.size() == 50


def test_dedup_survives_reopen(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as first:
        first.append("r1", "effect", payload={"big": "z" * 500})
    with DirectoryStore(store_dir) as second:
        second.append("r2", "effect", payload={"big": "z" * 500})
    assert len([r for r in _records(store_dir) if r.kind == PAYLOAD]) == 1


def test_null_payload_differs_from_no_payload(store: DirectoryStore) -> None:
    with_null = store.append("r", "effect", payload=None)
    without = store.append("r", "effect")
    assert with_null.payload is not None and store.get_payload(with_null.payload) is None
    assert without.payload is None


def test_index_lists_runs_newest_first_with_status(store: DirectoryStore) -> None:
    record_run(store, "first")
    record_run(store, "second")
    store.append("third", "run.start", meta={"agent": "other", "status": "running"})
    runs = store.runs()
    assert [r.run for r in runs] == ["third", "second", "first"]
    assert [r.status for r in runs] == ["running", "completed", "completed"]
    assert runs[0].agent == "other" and runs[1].entries == 4
    assert [r.run for r in store.runs(status="completed", limit=1)] == ["second"]


def test_index_is_rebuilt_when_lost_or_damaged(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(20):
            record_run(store, f"r{number}")
        expected = [(r.run, r.status, r.entries) for r in store.runs()]
    (store_dir / "index.sqlite").unlink()
    for suffix in ("-wal", "-shm"):
        (store_dir / f"index.sqlite{suffix}").unlink(missing_ok=True)
    with DirectoryStore(store_dir) as store:
        assert [(r.run, r.status, r.entries) for r in store.runs()] == expected
    (store_dir / "index.sqlite").write_bytes(b"this is not sqlite" * 100)
    with DirectoryStore(store_dir) as store:
        assert [(r.run, r.status, r.entries) for r in store.runs()] == expected


def test_an_index_of_an_older_schema_is_rebuilt(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(5):
            record_run(store, f"r{number}")
        expected = {run: [entry.line for entry in store.entries(run)] for run in ("r0", "r4")}
    with sqlite3.connect(store_dir / "index.sqlite") as db:  # what schema version 1 left
        db.execute("DROP TABLE seq_blocks")
        db.execute("DROP TABLE run_spans")
        db.execute("CREATE TABLE entries (seq INTEGER PRIMARY KEY, run_id INTEGER, offset INTEGER, length INTEGER)")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    db.close()
    with DirectoryStore(store_dir) as store:
        assert {run: [entry.line for entry in store.entries(run)] for run in expected} == expected
        assert store.entry_at(19).kind == "run.end"
        assert store.size() == 20


def test_entry_locations_span_many_index_batches(store_dir: Path) -> None:
    """A run whose entries reach the index in many flushes, interleaved with other runs."""
    with DirectoryStore(store_dir) as store:
        lines = []
        for number in range(30):
            lines.append(store.append("long", "effect", payload={"n": number}, durable=False).line)
            store.append(f"short-{number}", "effect", payload={"n": number}, durable=False)
            if number % 7 == 0:
                assert store.size() == 2 * number + 2  # a read flushes the pending rows
        assert [entry.line for entry in store.entries("long")] == lines
        assert [store.entry_at(seq).seq for seq in range(60)] == list(range(60))
    with DirectoryStore(store_dir) as store:
        assert [entry.line for entry in store.entries("long")] == lines
        assert [entry.seq for entry in store.iter_entries(45)] == list(range(45, 60))


def test_stale_index_catches_up_from_the_journal(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        record_run(store, "old")
    snapshot = {p.name: p.read_bytes() for p in store_dir.glob("index.sqlite*")}
    with DirectoryStore(store_dir) as store:
        record_run(store, "new")
    for name, data in snapshot.items():
        (store_dir / name).write_bytes(data)
    with DirectoryStore(store_dir) as store:
        assert {r.run for r in store.runs()} == {"old", "new"}
        assert verify_store(store).ok


def test_appending_to_an_ended_run_is_refused(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        record_run(store, "done")
        with pytest.raises(StoreError, match="has ended"):
            store.append("done", "effect")
    with DirectoryStore(store_dir) as store, pytest.raises(StoreError, match="has ended"):
        store.append("done", "effect")


@pytest.mark.parametrize("index", [True, False], ids=["with-index", "without-index"])
def test_a_journal_that_restarts_an_ended_run_is_refused(store_dir: Path, index: bool) -> None:
    """Chain rule 4: a complete entry that starts an ended run's chain again (i 0, prev null)
    after its end is no crash damage: a writer refuses the journal, with or without the
    index that knows the run ended."""
    with DirectoryStore(store_dir) as store:
        record_run(store, "done")
        size = store.size()
    restart = encode_entry(seq=size, run="done", i=0, kind="run.start", payload=None, prev=None, ts=1)
    journal = store_dir / "journal.log"
    data = journal.read_bytes().rstrip(b"\0")
    journal.write_bytes(data + restart.line + b"\n")
    if not index:
        for path in store_dir.glob("index.sqlite*"):
            path.unlink()
    with pytest.raises(JournalCorruptError, match=r"after its run\.end"):
        DirectoryStore(store_dir)


def test_unfinished_run_continues_its_chain_after_reopen(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        first = store.append("r", "run.start")
    with DirectoryStore(store_dir) as store:
        second = store.append("r", "effect")
        assert (second.i, second.prev) == (1, first.hash)
        assert verify_store(store).ok


def test_second_writer_shares_the_store_one_commit_at_a_time(store_dir: Path, store: DirectoryStore) -> None:
    # The writer lock is held per commit: a second handle opens and appends between the
    # first one's commits, each building on the entries the other appended.
    with DirectoryStore(store_dir) as second:
        first_start = store.append("a", "run.start")
        second_start = second.append("b", "run.start")
        shared = store.append("b", "effect", payload={"from": "first"})
        closing = second.append("b", "run.end", meta={"status": "completed"})
        assert (first_start.seq, second_start.seq, shared.seq, closing.seq) == (0, 1, 2, 3)
        assert (shared.i, shared.prev) == (1, second_start.hash)
        assert (closing.i, closing.prev) == (2, shared.hash)
        with pytest.raises(StoreError, match="has ended"):
            store.append("b", "effect")
        assert second.get_payload(shared.payload or "") == {"from": "first"}
        assert [e.seq for e in second.entries("b")] == [1, 2, 3]
    store.sync()
    assert verify_store(store).ok
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert verify_store(reader, compare_index=True).ok


def test_reader_works_while_a_writer_holds_the_lock(store_dir: Path, store: DirectoryStore) -> None:
    record_run(store, "r")
    store.sync()
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert [r.run for r in reader.runs()] == ["r"]
        assert verify_store(reader).ok
        with pytest.raises(StoreReadOnlyError):
            reader.append("x", "run.start")


def test_missing_and_foreign_stores(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        DirectoryStore(tmp_path / "absent", create=False)
    with pytest.raises(StoreNotFoundError):
        DirectoryStore(tmp_path / "absent", read_only=True)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "store.json").write_text('{"format": "something-else"}')
    with pytest.raises(StoreFormatError):
        DirectoryStore(tmp_path / "foreign")


def test_missing_payload_and_unknown_run(store: DirectoryStore) -> None:
    with pytest.raises(PayloadMissingError):
        store.get_payload("0" * 64)
    with pytest.raises(RunNotFoundError):
        store.entries("nope")
    with pytest.raises(RunNotFoundError):
        store.run_info("nope")


def _indexed_runs(store_dir: Path) -> dict[str, int]:
    """The runs the index file holds, with their entry counts, read beside the store."""
    with sqlite3.connect(f"file:{store_dir / 'index.sqlite'}?mode=ro", uri=True) as db:
        return dict(db.execute("SELECT run, entries FROM runs").fetchall())


def test_a_run_s_info_waits_for_no_other_run_s_index_rows(tmp_path: Path) -> None:
    """The info of a run with nothing pending is read as the index holds it, which is
    current: other runs' rows wait for their batch (a runtime asks for the admin chain's
    info every quarter second, and indexing everything first cost whichever run asked a
    flush of up to a batch). A run with rows pending is indexed first, as before."""
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir) as store:
        store.append("quiet", "run.start", payload={"n": 0}, meta={"status": "running"}, new_run=True)
        assert store.run_info("quiet").entries == 1  # pending: indexed by the ask
        for step in range(5):
            store.append("busy", "effect", payload={"step": step}, durable=False)
        before = _indexed_runs(store_dir)
        assert before == {"quiet": 1}
        info = store.run_info("quiet")
        assert (info.entries, info.last_seq) == (1, 0)
        assert _indexed_runs(store_dir) == before  # busy's rows still wait
        busy = store.run_info("busy")
        assert (busy.entries, busy.first_seq, busy.last_seq) == (5, 1, 5)
        assert _indexed_runs(store_dir) == {"quiet": 1, "busy": 5}


def test_group_commit_shares_fsyncs(store: DirectoryStore) -> None:
    barrier = threading.Barrier(8)
    per_thread = 50

    def worker(number: int) -> None:
        barrier.wait()
        for step in range(per_thread):
            store.append(f"w{number}", "effect", payload={"step": step})

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    before = store.sync_count
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.size() == 8 * per_thread
    assert store.sync_count - before < 8 * per_thread
    report = verify_store(store)
    assert report.ok, report.issue


def test_unsynced_appends_during_another_thread_s_sync_queue_behind_it(
    store: DirectoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unsynced append writes at once only when no other thread writes or syncs. During a
    sync it queues behind it without holding the handle: a third thread's append is built
    and queued meanwhile too, and one more sync covers both."""
    # Written, not synced: the next durable append then syncs with fdatasync (after a sync,
    # it would write with RWF_DSYNC instead).
    store.append("warm", "effect", durable=False)
    syncing, release = threading.Event(), threading.Event()
    real = os.fdatasync

    def held_sync(fd: int) -> None:
        syncing.set()
        assert release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", held_sync)
    log = store._log  # the queue of bytes not written yet: what this test watches
    assert log is not None
    durable = threading.Thread(target=store.append, args=("a", "effect"))
    durable.start()
    assert syncing.wait(10)
    queued = log.queued_end
    late = [
        threading.Thread(target=store.append, args=(run, "effect"), kwargs={"durable": False})
        for run in ("b", "c")
    ]
    try:
        for thread in late:
            thread.start()
        deadline = time.monotonic() + 5
        while log.queued_end == queued or len(log._pending) < 2:
            assert time.monotonic() < deadline, "an unsynced append blocked the other while a sync ran"
            time.sleep(0.001)
    finally:
        monkeypatch.setattr(os, "fdatasync", real)
        release.set()
    for thread in [durable, *late]:
        thread.join(10)
        assert not thread.is_alive()
    assert [entry.run for entry in store.entries("b") + store.entries("c")] == ["b", "c"]
    report = verify_store(store)
    assert report.ok, report.issue


def test_fsync_failure_is_fatal_and_never_retried(
    store: DirectoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append("r", "run.start")
    calls = _failing_syncs(monkeypatch)
    with pytest.raises(DurabilityError):
        store.append("r", "effect")
    monkeypatch.undo()
    with pytest.raises(DurabilityError):
        store.append("r", "effect")
    assert len(calls) == 1


def test_a_failed_sync_after_unsynced_writes_is_fatal(
    store: DirectoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append("r", "run.start", durable=False)  # written, not synced: the next sync is an fdatasync
    calls = _failing_syncs(monkeypatch)
    with pytest.raises(DurabilityError):
        store.append("r", "effect")
    assert calls == ["fdatasync"]


def _failing_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every way the journal could sync fail with EIO: ``fdatasync``, and a write that
    syncs itself (``RWF_DSYNC``; the journal makes none, and the test would say so)."""
    calls: list[str] = []
    real_pwritev = os.pwritev

    def failing_fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        raise OSError(errno.EIO, "Input/output error")

    def pwritev(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        if flags & os.RWF_DSYNC:
            calls.append("dsync write")
            raise OSError(errno.EIO, "Input/output error")
        return real_pwritev(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    monkeypatch.setattr(os, "pwritev", pwritev)
    return calls


def test_full_disk_is_reported_as_such(store: DirectoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.pwrite

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(StoreFullError):
        store.append("r", "run.start", payload={"a": 1})
    monkeypatch.setattr(os, "pwrite", real_write)
    with pytest.raises(StoreFullError):
        store.append("r", "run.start")


def test_closed_store_refuses_work(store_dir: Path) -> None:
    handle = DirectoryStore(store_dir)
    handle.close()
    with pytest.raises(StoreClosedError):
        handle.append("r", "run.start")


def test_redaction_keeps_the_chain_verifying(store: DirectoryStore) -> None:
    secret = store.append("r", "run.start", payload={"prompt": "my card is 4111 1111 1111 1111"})
    store.append("r", "run.end", payload={"ok": True}, meta={"status": "completed"})
    assert secret.payload is not None
    store.append(ADMIN_RUN, REDACTION_KIND, meta={"payload": secret.payload, "reason": "PII"})
    assert store.erase_payload(secret.payload)
    assert not store.erase_payload(secret.payload)
    with pytest.raises(PayloadRedactedError):
        store.get_payload(secret.payload)
    assert store.payload_state(secret.payload) == "redacted"
    report = verify_store(store)
    assert report.ok and report.redacted == 1
    run_report = verify_run(store, "r")
    assert run_report.ok and run_report.redacted == 1
    data = (Path(store.location) / "journal.log").read_bytes()
    assert b"4111" not in data


def test_erasing_without_a_redaction_entry_is_detected(store: DirectoryStore) -> None:
    entry = store.append("r", "run.start", payload={"prompt": "private"})
    assert entry.payload is not None
    store.erase_payload(entry.payload)
    report = verify_store(store)
    assert not report.ok and report.issue is not None
    assert report.issue.code == "PAYLOAD_ERASED_WITHOUT_REDACTION"


def test_clock_is_injected(store_dir: Path) -> None:
    with DirectoryStore(store_dir, clock=TickClock(start=41)) as store:
        assert store.append("r", "run.start").ts == 42


def test_payloads_stored_before_opening_or_evicted_are_still_found(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh store answers payload look-ups from its cache alone; once the cache has
    evicted, or for payloads stored before the store was opened, the index answers."""
    monkeypatch.setattr("tracelock.storage.directory.store._PAYLOAD_CACHE", 4)
    with DirectoryStore(store_dir) as store:
        first = [store.append(f"r{n}", "effect", payload={"n": n}) for n in range(10)]
        # "n": 0 was evicted from the cache: appending it again must not store it twice.
        again = store.append("r99", "effect", payload={"n": 0})
        assert again.payload == first[0].payload
        assert store.get_payload(first[0].payload or "") == {"n": 0}
    with DirectoryStore(store_dir) as store:
        store.append("r100", "effect", payload={"n": 1})
        store.sync()
        assert len([r for r in _records(store_dir) if r.kind == PAYLOAD]) == 10


def _journal_leaves(store_dir: Path) -> list[bytes]:
    """RFC 9162 leaf hashes of the journal's entry lines, computed here from the file."""
    lines = (store_dir / "journal.log").read_bytes().rstrip(b"\0").split(b"\n")
    return [hashlib.sha256(b"\0" + line).digest() for line in lines if line.startswith(b"{")]


def test_the_merkle_tree_is_built_when_asked_and_rebuilt_when_damaged(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(40):
            store.append(f"run-{number % 3}", "effect", payload={"n": number}, durable=False)
    # Appends and close leave the tree alone: nothing asked for it.
    assert not (store_dir / "merkle" / "head").exists()
    with DirectoryStore(store_dir) as store:
        assert store.tree_root() == merkle.root(_journal_leaves(store_dir))
        assert store.tree_size() == 40
    with DirectoryStore(store_dir) as store:
        store.append("run-9", "effect", payload={"n": 40})
        assert store.tree_size() == 41
    level = store_dir / "merkle" / "level-04.bin"
    level.write_bytes(b"\xff" * level.stat().st_size)
    with DirectoryStore(store_dir) as store:
        assert store.tree_root() == merkle.root(_journal_leaves(store_dir))


def test_a_repaired_tail_cuts_the_merkle_tree_back(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(20):
            store.append("run-1", "effect", payload={"n": number})
        assert store.tree_size() == 20
    journal = store_dir / "journal.log"
    data = journal.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    journal.write_bytes(data[:cut] + b'{"i":19,"kind"')  # torn last entry
    (store_dir / "journal.synced").write_bytes(encode_mark(cut))  # it was never synced
    with DirectoryStore(store_dir) as store:
        assert [repair.what for repair in store.repairs] == ["torn tail: last record has no newline"]
        assert store.tree_size() == 19
        assert store.tree_root() == merkle.root(_journal_leaves(store_dir))


@pytest.mark.parametrize(
    "bad",
    [
        NewEntry("run-1", "Not A Kind", {"n": 3}),  # refused while the entry is built
        NewEntry("run-1", "effect", {"n": 3}, new_run=True),  # the run exists
        NewEntry("run-2", "effect", {"n": 3}),  # run-2 ends earlier in the same batch
    ],
)
def test_a_batch_with_a_bad_item_changes_nothing(store_dir: Path, bad: NewEntry) -> None:
    with DirectoryStore(store_dir) as store:
        store.append("run-1", "effect", payload={"n": 0})
        store.append("run-2", "run.start", payload={"n": 0})
        with pytest.raises(StoreError):
            store.append_many(
                [
                    NewEntry("run-1", "effect", {"n": 1}),
                    NewEntry("run-2", "run.end", {"n": 2}),
                    NewEntry("run-3", "effect", {"shared": True}),
                    bad,
                ]
            )
        # Nothing of the batch was queued or remembered: the chains go on where they were.
        after = store.append("run-1", "effect", payload={"n": 1})
        assert (after.seq, after.i) == (2, 1)
        assert store.append("run-2", "effect", payload={"n": 2}).i == 1
        assert store.append("run-3", "effect", payload={"shared": True}).i == 0
        assert [entry.i for entry in store.entries("run-1")] == [0, 1]
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader)
        assert report.ok, report.issue
        assert report.entries == 5


def test_a_reader_opened_on_an_empty_store_reads_payloads_stored_after_it(tmp_path: Path) -> None:
    """A handle that knew every payload when it opened (none) must still find payloads
    another handle stores later: its "I know them all" shortcut is for appends only."""
    path = tmp_path / "store"
    DirectoryStore(path).close()
    with DirectoryStore(path, read_only=True) as reader:
        with DirectoryStore(path) as writer:
            entry = writer.append("r", "run.start", payload={"x": 1})
        assert reader.entry_at(entry.seq) == entry
        assert reader.get_payload(entry.payload) == {"x": 1}


def test_store_json_is_created_with_the_mode_of_the_stores_other_files(tmp_path: Path) -> None:
    """store.json is written under a name of its own and linked into place (two processes
    may create one store at once); it still gets the usual mode, as journal.log does."""
    path = tmp_path / "store"
    DirectoryStore(path).close()
    assert (path / "store.json").stat().st_mode & 0o777 == (path / "journal.log").stat().st_mode & 0o777
    assert not list(path.glob("store.json.*"))  # no temporary name left behind


@pytest.mark.parametrize("seal_bytes", [None, 512])
def test_a_run_s_payloads_read_together_are_each_checked(tmp_path: Path, seal_bytes: int | None) -> None:
    """After ``entries(run)``, ``get_payloads_bytes`` reads the run's payload records in one
    read (journal or sealed segment): it returns what reading them one by one returns,
    leaves out a redacted one, and fails on one whose bytes no longer match its hash."""
    path = tmp_path / "s"
    documents = [{"n": n, "text": "x" * (40 + n)} for n in range(4)]
    with DirectoryStore(path, seal_bytes=seal_bytes) as store:
        for n in range(3):  # other runs' records before and after: the read is a run's own
            store.append(f"other-{n}", "run.start", payload={"other": n})
        digests = [
            store.append("r", "effect" if n else "run.start", payload=doc).payload for n, doc in enumerate(documents)
        ]
        store.append("other-9", "run.start", payload={"other": 9})
        gone = digests[2]
        assert gone is not None
        store.append(ADMIN_RUN, REDACTION_KIND, meta={"payload": gone, "reason": "test"})
        assert store.erase_payload(gone)
        store.append("r", "run.end", payload={"end": True})
    present = [digest for digest in digests if digest is not None and digest != gone]
    with DirectoryStore(path, read_only=True) as reader:
        assert len(reader.entries("r")) == 5
        together = reader.get_payloads_bytes([*digests, "0" * 64])  # type: ignore[list-item]
        assert together == {digest: reader.get_payload_bytes(digest) for digest in present}
        assert [json.loads(together[digest]) for digest in present] == [documents[0], documents[1], documents[3]]
    if seal_bytes is not None:
        assert any((path / "sealed").iterdir())  # the run's records were read from a segment
        return
    journal = path / "journal.log"
    data = journal.read_bytes()
    at = data.index(b'"text":"' + b"x" * 41)
    journal.write_bytes(data[:at] + b'"text":"y' + data[at + 9 :])
    with DirectoryStore(path, read_only=True) as reader:
        reader.entries("r")
        with pytest.raises(StoreError, match="does not match its hash"):
            reader.get_payloads_bytes(present)
