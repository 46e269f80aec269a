"""Run rows, as both backends keep them: one row per run (status, agent, parent, first and
last entry, count), what a batch of appended entries changes in each (updated once per
batch), and how a stored row differs from the row the journal gives (store verification)."""

from __future__ import annotations

from collections.abc import Sequence

from tracelock.core.entry import Entry

__all__ = ["RUN_ROW_COLUMNS", "RunFold", "RunRow", "fold_runs", "row_difference"]

#: Every column a run row states about the journal, in the order of :data:`RunRow`.
RUN_ROW_COLUMNS = (
    "run, agent, parent, status, started_ts, updated_ts, first_seq, last_seq, entries, last_hash, closed"
)

#: A whole run row: (run, agent, parent, status, started_ts, updated_ts, first_seq, last_seq,
#: entries, last_hash, closed).
RunRow = tuple[str, str | None, str | None, str, int, int, int, int, int, str, int]

_ROW_NAMES = RUN_ROW_COLUMNS.split(", ")


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
    out (``tracelock.storage.directory.index.payload_code``)."""
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


def row_difference(stated: RunRow, actual: RunRow) -> str | None:
    """What a run row states that differs from the row the journal gives, or None."""
    wrong = [
        f"{name} {said!r} (journal: {true!r})"
        for name, said, true in zip(_ROW_NAMES, stated, actual, strict=True)
        if (bool(said) != bool(true) if name == "closed" else said != true)
    ]
    return f"its row for run {actual[0]} states " + ", ".join(wrong) if wrong else None
