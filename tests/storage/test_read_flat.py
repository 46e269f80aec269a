"""Reading one run (its entries, then each of its payloads, as ``load_run`` and replay do)
costs the same work whatever the store's size and whatever this handle has cached: the
same SQL statements, the same SQLite VM steps, the same journal reads."""

from __future__ import annotations

from pathlib import Path

from tests.storage.storage_helpers import TickClock
from tracelock.runtime.records import load_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.fileio import OS_FILES, JournalFile


class _CountingFile:
    def __init__(self, inner: JournalFile, counts: dict[str, int]) -> None:
        self._inner = inner
        self._counts = counts

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def pread(self, length: int, offset: int) -> bytes:
        self._counts["preads"] += 1
        return self._inner.pread(length, offset)


class _CountingFiles:
    def __init__(self) -> None:
        self.counts = {"preads": 0, "statements": 0, "vm_steps": 0}

    def open(self, path: Path, *, write: bool) -> JournalFile:
        return _CountingFile(OS_FILES.open(path, write=write), self.counts)  # type: ignore[return-value]


def _write_runs(store: DirectoryStore, count: int) -> None:
    """Runs shaped like an agent's: every payload unique to its run."""
    for number in range(count):
        run = f"run-{number:05d}"
        store.append(run, "run.start", payload={"agent": "a", "input": run}, meta={"agent": "a", "status": "running"}, new_run=True, durable=False)
        for step in range(3):
            store.append(run, "effect", payload={"step": step, "kind": "tool", "name": "t", "result": [run, step]}, durable=False)
        store.append(run, "run.end", payload={"outcome": "ok", "output": run}, meta={"status": "completed"})


def _cost_of_reading(store: DirectoryStore, files: _CountingFiles, run: str) -> dict[str, int]:
    store.flush()
    counts = files.counts
    db = store._index._db
    db.set_trace_callback(lambda _: counts.__setitem__("statements", counts["statements"] + 1))

    def step() -> int:
        counts["vm_steps"] += 1
        return 0

    db.set_progress_handler(step, 1)
    for key in counts:
        counts[key] = 0
    try:
        record = load_run(store, run)
    finally:
        db.set_trace_callback(None)
        db.set_progress_handler(None, 1)
    assert record.end == {"outcome": "ok", "output": run}
    assert [record.effects[step]["result"] for step in range(3)] == [[run, step] for step in range(3)]
    return dict(counts)


def _fresh_read(path: Path, run: str) -> dict[str, int]:
    files = _CountingFiles()
    with DirectoryStore(path, clock=TickClock(), files=files) as store:
        return _cost_of_reading(store, files, run)


def test_reading_a_run_costs_the_same_in_a_small_and_a_large_store(tmp_path: Path) -> None:
    for name, count in (("small", 3), ("large", 400)):
        with DirectoryStore(tmp_path / name, clock=TickClock()) as store:
            _write_runs(store, count)
    small = _fresh_read(tmp_path / "small", "run-00001")
    large = _fresh_read(tmp_path / "large", "run-00001")
    assert large["statements"] == small["statements"]
    assert large["preads"] == small["preads"]
    # A B-tree one level deeper may cost a step or two per look-up; a scan of the store's
    # payloads would cost thousands.
    assert large["vm_steps"] <= small["vm_steps"] + 20


def test_reading_a_run_costs_no_more_with_a_warm_handle_than_a_cold_one(tmp_path: Path) -> None:
    files = _CountingFiles()
    with DirectoryStore(tmp_path, clock=TickClock(), files=files) as store:
        _write_runs(store, 20)
        warm = _cost_of_reading(store, files, "run-00007")
    cold = _fresh_read(tmp_path, "run-00007")
    # One statement locates a run's entries and their payloads whatever the store's size
    # (its row, entry locations and payload locations); a warm handle needs no more.
    assert cold["statements"] == 1
    assert warm["statements"] <= cold["statements"]
    assert warm["preads"] <= cold["preads"]
