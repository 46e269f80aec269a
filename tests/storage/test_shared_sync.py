"""Writers of one directory store sync outside the writer lock: the lock orders the writes,
and a sync, whoever makes it, makes durable every byte written before it.

So a process places its bytes while another one's ``fdatasync`` runs, a process whose bytes
another's completed sync covered does not sync again, and after a power cut every entry
any writer acknowledged is there, in journal order."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from tests.storage._simdisk import MODES, PowerCut, SimDisk, SimHandle
from tests.storage.storage_helpers import TickClock
from tracelock.core.entry import Entry
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.fileio import OS_FILES, JournalFile
from tracelock.storage.directory.synced_mark import SyncedMark
from tracelock.storage.verify import verify_store

REPO = Path(__file__).resolve().parents[2]

#: A second process: opens the store, writes one entry of a new run (not synced: its sync
#: would wait for the one under way, the sync lock's order), then ends at once.
_OTHER_WRITER = """
import os, sys
from tracelock.storage.directory import DirectoryStore
store = DirectoryStore(sys.argv[1])
entry = store.append("other", "run.start", payload={"by": "another process"}, new_run=True, durable=False)
print(entry.seq, entry.hash, flush=True)
os._exit(0)
"""


class _GatedJournal:
    """The journal file of the real file system, whose ``fdatasync`` waits at a gate once
    armed (and says that it did)."""

    def __init__(self, file: JournalFile, gates: GatedFiles) -> None:
        self._file = file
        self._gates = gates

    def size(self) -> int:
        return self._file.size()

    def pread(self, length: int, offset: int) -> bytes:
        return self._file.pread(length, offset)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        return self._file.pwrite(data, offset)

    def fdatasync(self) -> None:
        if self._gates.armed:
            self._gates.armed = False
            self._gates.entered.set()
            self._gates.gate.wait()
        self._file.fdatasync()

    def truncate(self, length: int) -> None:
        self._file.truncate(length)

    def close(self) -> None:
        self._file.close()


class GatedFiles:
    """The real file system; the journal's next ``fdatasync`` after :attr:`armed` is set
    waits until :attr:`gate` is set."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def open(self, path: Path, *, write: bool) -> JournalFile:
        file = OS_FILES.open(path, write=write)
        return _GatedJournal(file, self) if path.name == "journal.log" else file


def test_another_process_places_and_syncs_its_entry_while_a_writer_is_inside_fdatasync(tmp_path: Path) -> None:
    path = tmp_path / "store"
    files = GatedFiles()
    store = DirectoryStore(path, files=files, clock=TickClock())
    store.append("mine", "run.start", payload={"n": 0}, new_run=True, durable=False)
    files.armed = True
    done: list[Entry] = []
    appender = threading.Thread(target=lambda: done.append(store.append("mine", "effect", payload={"n": 1})))
    appender.start()
    try:
        assert files.entered.wait(60), "the durable append never reached its sync"
        # The append's bytes are written and its sync is under way: the writer lock is free.
        fd = os.open(path / "lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while it is held
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        other = subprocess.run(
            [sys.executable, "-c", _OTHER_WRITER, str(path)],
            capture_output=True, text=True, check=True, timeout=120,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    finally:
        files.gate.set()
        appender.join()
    seq, digest = other.stdout.split()
    assert done[0].seq < int(seq)  # placed after the entry whose sync was under way
    store.close()
    with DirectoryStore(path, read_only=True) as reader:
        entries = list(reader.iter_entries())
        assert [(entry.run, entry.kind) for entry in entries] == [("mine", "run.start"), ("mine", "effect"), ("other", "run.start")]
        assert entries[2].hash == digest and entries[1].hash == done[0].hash
        assert verify_store(reader).ok


def test_a_writer_whose_bytes_another_writers_sync_covered_does_not_sync_again(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with DirectoryStore(path, clock=TickClock()) as first, DirectoryStore(path, clock=TickClock()) as second:
        first.append("a", "run.start", payload={"n": 0}, new_run=True, durable=False)  # written, not synced
        second.append("b", "run.start", payload={"n": 1}, new_run=True)  # its sync covers both
        syncs = first.sync_count
        first.sync()
        assert first.sync_count == syncs  # the mark says the bytes are durable already
        first.append("a", "effect", payload={"n": 2})  # new bytes: synced
        assert first.sync_count == syncs + 1


def test_writers_queued_behind_a_sync_share_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "store"
    files = GatedFiles()
    syncing = DirectoryStore(path, files=files, clock=TickClock())
    b = DirectoryStore(path, clock=TickClock(2_000_000_000_000))
    c = DirectoryStore(path, clock=TickClock(3_000_000_000_000))
    try:
        for name, store in (("a", syncing), ("b", b), ("c", c)):
            store.append(name, "run.start", payload={"name": name}, new_run=True)
        files.armed = True
        first = threading.Thread(target=lambda: syncing.append("a", "effect", payload={"n": 1}))
        first.start()
        assert files.entered.wait(60), "the durable append never reached its sync"
        # While that sync is under way, two other writers write (the writer lock is free)
        # and then ask for durability: one sync covers both, whichever of them makes it.
        writes = threading.Thread(
            target=lambda: [store.append(name, "effect", payload={"n": 2}, durable=False) for name, store in (("b", b), ("c", c))]
        )
        writes.start()
        writes.join(60)
        assert not writes.is_alive(), "the writers could not write while another one synced"
        before = b.sync_count + c.sync_count
        waiting = [threading.Thread(target=store.sync) for store in (b, c)]
        for thread in waiting:
            thread.start()
    finally:
        files.gate.set()
        first.join()
    for thread in waiting:
        thread.join()
    assert b.sync_count + c.sync_count == before + 1
    for store in (syncing, b, c):
        store.close()
    with DirectoryStore(path, read_only=True) as reader:
        assert [entry.run for entry in reader.iter_entries()] == ["a", "b", "c", "a", "b", "c"]
        assert verify_store(reader).ok


def test_the_mark_advanced_by_several_writers_never_goes_back(tmp_path: Path) -> None:
    path = tmp_path / "store"
    DirectoryStore(path).close()
    marks = [SyncedMark.open(OS_FILES, path, write=True) for _ in range(2)]  # two writers' handles
    try:
        rng = random.Random(7)
        highest = marks[0].read() or 0
        for _ in range(300):
            length = rng.randrange(0, 1 << 20)
            rng.choice(marks).advance(length)  # a sync covering ``length``, finishing late or early
            highest = max(highest, length)
            assert marks[0].read() == marks[1].read() == highest
    finally:
        for mark in marks:
            assert mark is not None
            mark.close()


class _SyncingDisk(SimDisk):
    """A simulated disk that records which handle syncs, and lets the other threads run
    in the middle of every sync (as a real ``fdatasync``, which releases the GIL, does):
    it counts the writes of other handles made while a sync was under way."""

    def __init__(self) -> None:
        super().__init__()
        self.syncing: set[int] = set()
        self.overlapped = 0
        self._gil = threading.Lock()

    def open(self, path: Path, *, write: bool) -> SimHandle:
        handle = super().open(path, write=write)
        if path.name != "journal.log":
            return handle
        disk = self
        base_sync, base_write = handle.fdatasync, handle.pwrite

        def fdatasync() -> None:
            me = threading.get_ident()
            disk.syncing.add(me)
            try:
                for _ in range(3):
                    threading.Event().wait(0.0005)  # lets another writer's thread run
                base_sync()
            finally:
                disk.syncing.discard(me)

        def pwrite(data: bytes | memoryview, offset: int) -> int:
            if disk.syncing - {threading.get_ident()}:
                disk.overlapped += 1
            return base_write(data, offset)

        handle.fdatasync = fdatasync  # type: ignore[method-assign]
        handle.pwrite = pwrite  # type: ignore[method-assign]
        return handle


def _writer(store: DirectoryStore, name: str, runs: int, acked: list[Entry]) -> None:
    """Runs of five entries: three written (not synced), an intent and an end made durable.
    ``acked`` gets every entry a durable append returned after (each one acknowledges every
    entry this handle appended before it)."""
    appended: list[Entry] = []
    try:
        for number in range(runs):
            run = f"{name}-{number}"
            appended.append(store.append(run, "run.start", payload={"run": run}, new_run=True, durable=False))
            appended.append(store.append(run, "effect", payload={"text": name * 300, "n": number}, durable=False))
            appended.append(store.append(run, "effect", payload={"n": number}, durable=False))
            appended.append(store.append(run, "effect.intent", payload={"pay": number}))
            acked[:] = appended
            appended.append(store.append(run, "run.end", payload={"done": number}, meta={"status": "completed"}))
            acked[:] = appended
    except PowerCut:
        # The machine is off: the handle lets go of its files (and of the writer lock it
        # may hold, which the other writer's thread may be waiting for).
        with contextlib.suppress(PowerCut):
            store.close()


def _two_writers(source: Path, disk: SimDisk, runs: int) -> tuple[list[Entry], list[Entry], DirectoryStore, DirectoryStore]:
    first = DirectoryStore(source, files=disk, clock=TickClock())
    second = DirectoryStore(source, files=disk, clock=TickClock(2_000_000_000_000))
    acked_first: list[Entry] = []
    acked_second: list[Entry] = []
    threads = [
        threading.Thread(target=_writer, args=(first, "a", runs, acked_first)),
        threading.Thread(target=_writer, args=(second, "b", runs, acked_second)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return acked_first, acked_second, first, second


def test_two_writers_sharing_syncs_keep_every_acknowledged_entry_through_power_cuts(tmp_path: Path) -> None:
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the two writers' threads interleave finely
    try:
        disk = _SyncingDisk()
        _, _, first, second = _two_writers(tmp_path / "uncut", disk, runs=4)
        first.close()
        second.close()
        operations = disk.operations
        # Without a cut: the writers did place bytes while another one's sync was under way.
        assert disk.overlapped > 0
        checked = 0
        for cut in range(1, operations + 1, 2):
            disk = _SyncingDisk()
            source = tmp_path / f"cut-{cut}"
            disk.cut_at = cut
            acked_first, acked_second, first, second = _two_writers(source, disk, runs=4)
            rng = random.Random(cut)
            for number in range(6):
                target = tmp_path / f"image-{cut}-{number}"
                disk.crash_copy(source, target, rng, MODES[number % len(MODES)], keep_index=number % 2 == 0)
                with DirectoryStore(target, clock=TickClock()) as store:
                    present = {entry.seq: entry.hash for entry in store.iter_entries()}
                    for entry in acked_first + acked_second:
                        assert present.get(entry.seq) == entry.hash, f"acknowledged entry {entry.seq} lost (cut {cut})"
                    assert sorted(present) == list(range(len(present)))
                    report = verify_store(store)
                    assert report.ok, report.issue
                shutil.rmtree(target)
                checked += 1
            for store in (first, second):
                with contextlib.suppress(PowerCut):
                    store.close()
            shutil.rmtree(source)
        assert checked > 100
    finally:
        sys.setswitchinterval(switch)
