"""Copy a store to another (of any backend) entry by entry, then prove the copy equal.

The destination must be empty and opened with a :class:`ReplayClock`: appends assign
``seq``, ``i`` and ``prev`` themselves, and replaying the source's items in ``seq`` order
into an empty store makes them assign the source's values; the clock hands each append the
source entry's ``ts``. So every copied entry is the source's canonical line, byte for byte,
which :func:`verify_copy` then checks along with payloads, run heads and Merkle roots.

The run queue travels too (the callers open the queue backends: that is the runtime's
business). Its rows are read before the first entry is copied (:func:`queue_rows`), which
refuses a queue with leased runs (a worker holds them and may still change them), and are
restored verbatim, positions included, into the destination's empty queue after the last
entry (``QueueBackend.restore``); :func:`verify_copy` compares them row by row. Reading the
rows before the journal's size keeps every run a row says is ``done`` or ``waiting``
whole in the copied prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from tracelock.core.entry import Entry
from tracelock.storage.backend import NO_PAYLOAD, NewEntry, RedactedPayload, Store
from tracelock.storage.errors import PayloadMissingError, StoreError, StoreNotEmptyError
from tracelock.storage.queue_backend import QueueBackend, QueueNotEmptyError, QueueRow, leased_error

__all__ = [
    "CopyReport",
    "ReplayClock",
    "copy_store",
    "queue_rows",
    "refuse_destination",
    "verify_copy",
]

_BATCH = 512


class ReplayClock:
    """The destination's clock during a copy: returns the timestamp the copy set last."""

    def __init__(self) -> None:
        self.ts = 0

    def __call__(self) -> int:
        return self.ts


@dataclass
class CopyReport:
    entries: int
    runs: int
    payloads: int
    redacted: int
    source_root: str
    copy_root: str
    mismatches: list[str] = field(default_factory=list)
    #: The source queue's rows compared with the copy's (0 when the source has no queue),
    #: and how many are in each state.
    queue_rows: int = 0
    queue_states: dict[str, int] = field(default_factory=dict)
    #: How many checkpoints of the source's signed history the copy holds (the history is
    #: copied by the caller: it belongs to the evidence layer).
    checkpoints: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.source_root == self.copy_root

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "runs": self.runs,
            "payloads": self.payloads,
            "redacted": self.redacted,
            "source_root": self.source_root,
            "copy_root": self.copy_root,
            "queue_rows": self.queue_rows,
            "queue_states": self.queue_states,
            "checkpoints": self.checkpoints,
            "mismatches": self.mismatches,
        }


def refuse_destination(destination: Store, queue: QueueBackend | None) -> None:
    """Refuse a destination that holds entries (``STORE_NOT_EMPTY``) or whose run queue
    ``queue`` (None: it has none) holds rows (``QUEUE_NOT_EMPTY``)."""
    if destination.size():
        raise StoreNotEmptyError(
            f"the destination {destination.location} is not empty ({destination.size()} entries); "
            "copy into a new store",
            details={"destination": destination.location, "entries": destination.size()},
        )
    held = sum(sum(states.values()) for states in queue.counts().values()) if queue is not None else 0
    if held:
        raise QueueNotEmptyError(
            f"the destination {destination.location} has {held} runs in its run queue; copy into a new store",
            details={"destination": destination.location, "runs": held},
        )


def queue_rows(queue: QueueBackend | None, where: str) -> list[QueueRow] | None:
    """The rows of the source's run ``queue`` a copy carries (None: the source has no
    queue). A leased run is refused (``QUEUE_RUNS_LEASED``): read this before anything is
    written, and before the source's size is taken."""
    if queue is None:
        return None
    rows = queue.rows()
    if any(row.item.state == "leased" for row in rows):
        raise leased_error(rows, where)
    return rows


def _item(source: Store, entry: Entry) -> NewEntry:
    if entry.payload is None:
        return NewEntry(entry.run, entry.kind, NO_PAYLOAD, entry.meta)
    state = source.payload_state(entry.payload)
    if state == "redacted":
        return NewEntry(entry.run, entry.kind, RedactedPayload(entry.payload), entry.meta)
    if state == "missing":
        raise PayloadMissingError(
            f"payload {entry.payload} of entry {entry.seq} is missing from the source",
            details={"seq": entry.seq, "payload": entry.payload},
        )
    return NewEntry(entry.run, entry.kind, source.get_payload(entry.payload), entry.meta)


def _batches(entries: Iterator[Entry]) -> Iterator[list[Entry]]:
    """Runs of consecutive entries with one timestamp (an append reads the clock once)."""
    batch: list[Entry] = []
    for entry in entries:
        if batch and (entry.ts != batch[0].ts or len(batch) >= _BATCH):
            yield batch
            batch = []
        batch.append(entry)
    if batch:
        yield batch


def copy_store(
    source: Store,
    destination: Store,
    clock: ReplayClock,
    *,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Append every entry of ``source`` to the empty ``destination`` (opened with
    ``clock``), in ``seq`` order with its payload. Returns the number of entries copied."""
    refuse_destination(destination, None)
    total = source.size()
    done = 0
    for batch in _batches(islice(source.iter_entries(), total)):
        clock.ts = batch[0].ts
        copied = destination.append_many([_item(source, entry) for entry in batch], durable=False)
        for original, made in zip(batch, copied, strict=True):
            if made.line != original.line:
                raise StoreError(
                    f"entry {original.seq} copied differently (the destination assigned "
                    f"seq {made.seq}, i {made.i}); the copy is not usable",
                    details={"seq": original.seq},
                )
        done += len(batch)
        if progress is not None:
            progress(done)
    destination.sync()
    return done


def _queue_mismatches(source: list[QueueRow], copy: list[QueueRow]) -> list[str]:
    """Row by row, every column and the position (so the order runs are taken in)."""
    mismatches: list[str] = []
    copied = {row.item.run: row.columns() for row in copy}
    for row in source:
        mine = row.columns()
        other = copied.pop(row.item.run, None)
        if other is None:
            mismatches.append(f"queue row of run {row.item.run} is missing from the copy")
            continue
        for column, value in mine.items():
            if other[column] != value:
                shown = "" if column == "input" else f": {value!r} in the source, {other[column]!r} in the copy"
                mismatches.append(f"queue row of run {row.item.run} differs in {column}{shown}")
    mismatches.extend(f"queue row of run {run} is in the copy, not in the source" for run in copied)
    return mismatches


def verify_copy(
    source: Store,
    copy: Store,
    size: int,
    *,
    queues: tuple[QueueBackend | None, QueueBackend | None] | None = None,
) -> CopyReport:
    """Compare the first ``size`` entries of both stores: canonical lines, payload states
    and bytes, each run's head hash and entry count, and the Merkle roots at ``size``.
    With ``queues`` (the source's and the copy's run queue, None where there is none),
    also every queue row: a source queue that changed during the copy shows here too."""
    mismatches: list[str] = []
    heads: dict[str, str] = {}
    digests: set[str] = set()
    redacted = 0
    copied = copy.iter_entries()
    for entry in islice(source.iter_entries(), size):
        other = next(copied, None)
        if other is None or other.line != entry.line:
            mismatches.append(f"entry {entry.seq} differs")
            continue
        heads[entry.run] = entry.hash
        if entry.payload is None or entry.payload in digests:
            continue
        digests.add(entry.payload)
        state = source.payload_state(entry.payload)
        if copy.payload_state(entry.payload) != state:
            mismatches.append(f"payload {entry.payload} is {state} in the source, not in the copy")
        elif state == "redacted":
            redacted += 1
        elif state == "present" and source.get_payload_bytes(entry.payload) != copy.get_payload_bytes(entry.payload):
            mismatches.append(f"payload {entry.payload} differs")
    if copy.size() != size:
        mismatches.append(f"the copy holds {copy.size()} entries, the source {size}")
    for run, head in heads.items():
        copied_run = copy.entries(run)
        if not copied_run or copied_run[-1].hash != head:
            mismatches.append(f"run {run} ends differently in the copy")
        elif source.run_info(run) != copy.run_info(run):
            mismatches.append(f"run {run} is indexed differently in the copy")
    source_root = source.tree_root(size).hex()
    copy_root = copy.tree_root(size).hex() if copy.size() >= size else ""
    report = CopyReport(size, len(heads), len(digests), redacted, source_root, copy_root, mismatches)
    if queues is not None:
        _verify_queue(report, *queues)
    return report


def _verify_queue(report: CopyReport, source: QueueBackend | None, copy: QueueBackend | None) -> None:
    theirs = source.rows() if source is not None else []
    ours = copy.rows() if copy is not None else []
    if source is not None and copy is None:
        report.mismatches.append("the source has a run queue, the copy has none")
    report.mismatches.extend(_queue_mismatches(theirs, ours))
    report.queue_rows = len(theirs)
    for row in theirs:
        report.queue_states[row.item.state] = report.queue_states.get(row.item.state, 0) + 1
