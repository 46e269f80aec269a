"""Helpers shared by the storage tests (imported by module path: every test directory has a
``conftest.py``, so ``from conftest import ...`` would depend on which one was loaded last)."""

from __future__ import annotations

from tracelock.storage.directory import DirectoryStore


class TickClock:
    """A deterministic clock for entry timestamps."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def record_run(store: DirectoryStore, run: str, effects: int = 2, *, big: str = "x" * 200) -> None:
    store.append(run, "run.start", payload={"input": run}, meta={"agent": "demo", "status": "running"})
    for number in range(effects):
        store.append(run, "effect", payload={"tool": "t", "n": number, "text": big}, durable=False)
    store.append(run, "run.end", payload={"output": run}, meta={"status": "completed"})
