"""What a batch of appended entries changes in each run's row: both backends keep one row
per run (status, agent, parent, first and last entry, count) and update it once per batch."""

from __future__ import annotations

from collections.abc import Sequence

from tracelock.core.entry import Entry

__all__ = ["RunFold", "fold_runs"]


class RunFold:
    """One run's share of a batch: its first and last entry, how many, the last status and
    the agent its entries state, and (for the directory index) their packed locations and
    their payloads' (a code per entry, and the locations those codes leave out)."""

    __slots__ = ("agent", "count", "far", "first", "last", "locations", "payloads", "status")

    def __init__(self, first: Entry) -> None:
        self.first = first
        self.last = first
        self.count = 0
        self.status: str | None = None
        self.agent: str | None = None
        self.locations: list[bytes] = []
        self.payloads: list[bytes] = []
        self.far: list[bytes] = []

    @property
    def parent(self) -> str | None:
        """The parent run named by the run's first entry, when the batch holds it."""
        first = self.first
        parent = first.meta.get("parent") if first.i == 0 and first.meta else None
        return parent if isinstance(parent, str) else None


def fold_runs(
    entries: Sequence[Entry],
    locations: Sequence[bytes] | None = None,
    payloads: Sequence[tuple[bytes, bytes]] | None = None,
) -> dict[str, RunFold]:
    """Fold ``entries`` (in append order) per run; ``locations[k]`` belongs to ``entries[k]``,
    and so does ``payloads[k]``, the code of its payload's location and what the code leaves
    out (``tracelock.storage.index.payload_code``)."""
    batch: dict[str, RunFold] = {}
    for k, entry in enumerate(entries):
        fold = batch.get(entry.run)
        if fold is None:
            fold = batch[entry.run] = RunFold(entry)
        fold.last = entry
        fold.count += 1
        if locations is not None:
            fold.locations.append(locations[k])
        if payloads is not None:
            code, far = payloads[k]
            fold.payloads.append(code)
            if far:
                fold.far.append(far)
        meta = entry.meta
        if meta:
            status = meta.get("status")
            if isinstance(status, str):
                fold.status = status
            if entry.i == 0 and fold.agent is None:
                agent = meta.get("agent")
                if isinstance(agent, str):
                    fold.agent = agent
    return batch
