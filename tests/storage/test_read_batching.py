"""Reading a run's entries: entries lying close together in the journal come from one read
of the file, checked one by one as a single entry's read is (so tampering is still found)."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import pytest

from tests.storage.storage_helpers import TickClock, record_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.fileio import OS_FILES, JournalFile
from tracelock.storage.directory.index import pack_locations, unpack_locations
from tracelock.storage.errors import IndexTamperedError

_LOCATION = struct.Struct("<QI")


class CountingFile:
    """A real journal file that counts its reads."""

    def __init__(self, inner: JournalFile, reads: list[tuple[int, int]]) -> None:
        self._inner = inner
        self._reads = reads

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def pread(self, length: int, offset: int) -> bytes:
        self._reads.append((offset, length))
        return self._inner.pread(length, offset)


class CountingFiles:
    def __init__(self) -> None:
        self.reads: list[tuple[int, int]] = []

    def open(self, path: Path, *, write: bool) -> JournalFile:
        return CountingFile(OS_FILES.open(path, write=write), self.reads)  # type: ignore[return-value]


@pytest.mark.parametrize(("big", "reads"), [("x" * 200, 1), ("x" * 70_000, 5)])
def test_a_runs_entries_are_read_at_once_when_close_together(tmp_path: Path, big: str, reads: int) -> None:
    files = CountingFiles()
    with DirectoryStore(tmp_path, clock=TickClock(), files=files) as store:
        record_run(store, "a", effects=3, big=big)
        record_run(store, "b", effects=1)
        store.flush()
        del files.reads[:]
        entries = store.entries("a")
        assert [(entry.run, entry.i) for entry in entries] == [("a", i) for i in range(5)]
        assert [entry.kind for entry in entries] == ["run.start", "effect", "effect", "effect", "run.end"]
        assert len(files.reads) == reads


def test_a_location_shifted_inside_a_batch_is_tampering(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path, clock=TickClock()) as store:
        record_run(store, "a", effects=3)
    db = sqlite3.connect(tmp_path / "index.sqlite")
    try:
        ((blob,),) = db.execute(
            "SELECT s.locations FROM run_spans s JOIN runs r ON r.id = s.run_id WHERE r.run = 'a'"
        )
        items = unpack_locations(blob)
        offset, length = items[2]
        items[2] = (offset + 1, length - 1)
        db.execute(
            "UPDATE run_spans SET locations = ? WHERE run_id = (SELECT id FROM runs WHERE run = 'a')",
            (pack_locations(items),),
        )
        db.commit()
    finally:
        db.close()
    with DirectoryStore(tmp_path, read_only=True) as store, pytest.raises(IndexTamperedError) as caught:
        store.entries("a")
    assert "not one journal record" in caught.value.message
