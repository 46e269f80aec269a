"""Shared helpers of the runtime tests: injected clocks, sleepers and ids, small policies,
runtimes in temporary stores, and reading the journal file the way a crashed process's
successor would (a fresh descriptor, no store object)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tracelock.runtime.records import RunRecord, load_run
from tracelock.runtime.runtime import Runtime
from tracelock.storage.backend import Store
from tracelock.storage.verify import verify_store


class Ticks:
    """An injected clock (milliseconds) that moves forward by ``step`` on every reading."""

    def __init__(self, start: int = 1_767_225_600_000, step: int = 5) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


class Sleeps:
    """An injected sleeper: remembers every requested delay, never sleeps."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class Ids:
    """Injected run ids: ``<prefix>-1``, ``<prefix>-2``..."""

    def __init__(self, prefix: str = "run") -> None:
        self.prefix = prefix
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"{self.prefix}-{self.count}"


def allow(*tools: str | dict[str, Any], **top: Any) -> dict[str, Any]:
    """A policy document listing ``tools`` (names or full entries) plus top-level tables."""
    entries = [{"name": tool} if isinstance(tool, str) else tool for tool in tools]
    return {"version": 1, "tools": entries, **top}


def runtime_at(directory: Path, policy: Any = None, *, store: str = "store", **kwargs: Any) -> Runtime:
    """A runtime over a fresh store under ``directory``, with an injected clock, sleeper and ids
    unless given."""
    kwargs.setdefault("clock", Ticks())
    kwargs.setdefault("sleep", Sleeps())
    kwargs.setdefault("ids", Ids())
    return Runtime(directory / store, policy, **kwargs)


def record_of(runtime: Runtime, run_id: str) -> RunRecord:
    return load_run(runtime.store, run_id)


def effect_of(runtime: Runtime, run_id: str, step: int) -> dict[str, Any]:
    """The journaled effect document of one step (intent and result merged)."""
    return load_run(runtime.store, run_id).effects[step]


def assert_store_ok(store: Store) -> None:
    report = verify_store(store)  # type: ignore[arg-type]
    assert report.ok, report.to_dict()


def journal_on_disk(store_dir: Path, run_id: str) -> list[tuple[str, Any]]:
    """``(kind, payload document)`` of every entry of ``run_id`` that the journal file holds
    right now, read through a descriptor of our own (what survives if the process dies now)."""
    fd = os.open(store_dir / "journal.log", os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    lines = b"".join(chunks).split(b"\n")[:-1]  # the last piece has no newline: not a record
    payloads: dict[str, Any] = {}
    found: list[tuple[str, Any]] = []
    for line in lines:
        if line[:1] == b"=":
            payloads[line[1:65].decode()] = json.loads(line[66:])
        elif line[:1] == b"{":
            entry = json.loads(line)
            if entry["run"] == run_id:
                digest = entry["payload"]
                found.append((entry["kind"], payloads.get(digest) if digest else None))
    return found


def steps_on_disk(store_dir: Path, run_id: str, kind: str) -> dict[int, dict[str, Any]]:
    """The payloads of the run's entries of ``kind`` on disk, by step."""
    return {
        doc["step"]: doc
        for entry_kind, doc in journal_on_disk(store_dir, run_id)
        if entry_kind == kind and isinstance(doc, dict) and "step" in doc
    }
