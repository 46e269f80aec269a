"""The benchmark's bound run (``bench/bound.py``) writes what the runtime writes: its figures
mean something only while that holds, so a change to the runtime's entries fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import workload
from bench.bound import BoundJournal, BoundRun, check_faithful
from tracelock import Runtime
from tracelock.storage.directory import DirectoryStore


def _start_document(runtime: Runtime) -> dict[str, str]:
    result = runtime.run(workload.agent, workload.task(100))
    store = runtime.store
    assert isinstance(store, DirectoryStore)
    document: dict[str, str] = store.get_payload(store.entries(result.run_id)[0].payload)
    return document


@pytest.mark.parametrize("batched", [False, True], ids=["per-entry", "batched"])
def test_the_bound_writes_the_runtime_s_entries_and_fingerprint(tmp_path: Path, batched: bool) -> None:
    with Runtime(tmp_path / "store", workload.POLICY, toolkits=(workload.kit,)) as runtime:
        start = _start_document(runtime)
        journal = BoundJournal(tmp_path / "bound", 1 << 20)
        bound = BoundRun(journal, policy=start["policy"], provenance=start["provenance"], batched=batched)
        for number in range(3):
            check_faithful(runtime, bound, number)
        journal.close()
    # Six entries per run, each a payload record and an entry line.
    written = (tmp_path / "bound" / "journal.log").read_bytes().rstrip(b"\0")
    assert written.count(b"\n") == 3 * 6 * 2


def test_a_bound_that_differs_from_the_runtime_is_refused(tmp_path: Path) -> None:
    with Runtime(tmp_path / "store", workload.POLICY, toolkits=(workload.kit,)) as runtime:
        start = _start_document(runtime)
        journal = BoundJournal(tmp_path / "bound", 1 << 20)
        bound = BoundRun(journal, policy="0" * 64, provenance=start["provenance"], batched=False)
        with pytest.raises(AssertionError, match="no longer writes what the runtime writes"):
            check_faithful(runtime, bound, 0)
        journal.close()
