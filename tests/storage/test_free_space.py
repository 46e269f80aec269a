"""Free space at the end of the journal: NUL bytes written ahead of the data, so that a sync
overwrites blocks the file already has. Readers stop where the data ends; a writer cuts the
free space off when it closes; a hole of NULs in the tail (an interrupted write) is cut and
kept aside; NULs in bytes the store recorded as synced are damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.storage.storage_helpers import record_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.journal import data_end
from tracelock.storage.errors import JournalCorruptError
from tracelock.storage.verify import verify_store


def _journal(store_dir: Path) -> Path:
    return store_dir / "journal.log"


def _data_end(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return data_end(fd)
    finally:
        os.close(fd)


def test_data_end_ignores_only_a_nul_suffix(tmp_path: Path) -> None:
    path = tmp_path / "f"
    for content, expected in [
        (b"", 0),
        (b"\0" * 10, 0),
        (b"abc\n", 4),
        (b"abc\n" + b"\0" * 5000, 4),
        (b"a\0b\n" + b"\0" * 3, 4),
        (b"x" * (3 << 20) + b"\0" * ((1 << 20) + 7), 3 << 20),  # spans read chunks
    ]:
        path.write_bytes(content)
        assert _data_end(path) == expected


def test_a_writer_keeps_free_space_and_cuts_it_on_close(store_dir: Path) -> None:
    store = DirectoryStore(store_dir)
    record_run(store, "r0")
    size = _journal(store_dir).stat().st_size
    end = _data_end(_journal(store_dir))
    assert size > end > 0 and size % 4096 == 0
    assert _journal(store_dir).read_bytes()[end:] == b"\0" * (size - end)
    with DirectoryStore(store_dir, read_only=True) as reader:  # a reader beside the writer
        assert reader.size() == 4 and reader.tail_fragment is None
        assert verify_store(reader).ok
    store.close()
    assert _journal(store_dir).stat().st_size == end


def test_free_space_grows_with_the_journal(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        sizes = set()
        for number in range(300):
            record_run(store, f"r{number}", big="y" * 900)
            sizes.add(_journal(store_dir).stat().st_size)
            assert _journal(store_dir).stat().st_size >= _data_end(_journal(store_dir))
        assert len(sizes) > 3  # it grew in steps, not once
        assert store.size() == 1200
    with DirectoryStore(store_dir) as store:
        assert store.repairs == [] and store.size() == 1200 and verify_store(store).ok


def test_a_crashed_writers_free_space_is_not_a_torn_tail(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        record_run(store, "r0")
    journal = _journal(store_dir)
    with open(journal, "ab") as handle:  # what a killed writer leaves behind
        handle.write(b"\0" * 65536)
    with DirectoryStore(store_dir) as store:
        assert store.repairs == []
        record_run(store, "r1")
        assert verify_store(store).ok
    assert b"\0" not in journal.read_bytes()


def test_a_hole_in_the_tail_is_cut_and_kept_aside(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        record_run(store, "r0")
    journal = _journal(store_dir)
    good = journal.read_bytes()
    # An interrupted write: its first block never reached the disk, a later one did.
    unacknowledged = b"\0" * 300 + b'{"i":0,"kind":"run.start"}\n' + b"\0" * 4000
    journal.write_bytes(good + unacknowledged)
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert reader.size() == 4
    with DirectoryStore(store_dir) as store:
        assert len(store.repairs) == 1
        repair = store.repairs[0]
        assert repair.offset == len(good) and "NUL" in repair.what
        assert Path(repair.saved_to or "").read_bytes() == unacknowledged.rstrip(b"\0")
        assert verify_store(store).ok
        record_run(store, "r1")
    assert journal.read_bytes().startswith(good)


def test_nul_bytes_before_the_synced_mark_are_damage(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        for number in range(10):
            record_run(store, f"r{number}")
    journal = _journal(store_dir)
    data = bytearray(journal.read_bytes())
    data[-100] = 0  # in the last record: once "an unfinished write", but it was synced
    journal.write_bytes(bytes(data))
    (store_dir / "index.sqlite").unlink()  # make the writer read the whole journal again
    with pytest.raises(JournalCorruptError):
        DirectoryStore(store_dir)
    assert journal.read_bytes() == bytes(data)
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert not verify_store(reader).ok
