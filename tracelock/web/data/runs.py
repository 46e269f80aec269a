"""The runs list: one page of runs, newest first, filtered, from the store's run index.

A page never loads every run. The store's run listing (``Store.runs``) answers the status,
agent and text filters itself, newest first and with an offset, so a page reads exactly its
rows, however deep. Only an outcome filter needs each run's ``run.end``: it reads growing
windows of the listing (a small one, then larger) until the page is full, examining at most
:data:`SCAN_LIMIT` runs (the page then says how far it looked). Only the rows shown (and,
for an outcome filter, the runs examined) have their ``run.end`` read, for outcome, code and
fingerprint.

An outcome filter narrows the query by state first: a run ends ``completed`` exactly when
its outcome is ``SUCCESS`` and ``failed`` otherwise (``tracelock.runtime.runs.engine``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracelock.runtime.outcomes import Outcome
from tracelock.runtime.runs.lifecycle import STATES
from tracelock.storage.backend import RunInfo, Store
from tracelock.storage.errors import PayloadMissingError, PayloadRedactedError, RunNotFoundError

__all__ = ["OUTCOMES", "PER_PAGE", "SCAN_LIMIT", "STATUSES", "RunEnd", "RunFilters", "RunRow", "RunsPage", "run_end", "runs_page"]

#: Runs per page.
PER_PAGE = 50
#: The most runs one filtered page examines (a filter matching nothing in a huge store
#: stops there and says so, instead of reading the whole store).
SCAN_LIMIT = 20_000
STATUSES = tuple(STATES)
OUTCOMES = tuple(outcome.value for outcome in Outcome)
_FIRST_WINDOW = 256


@dataclass(frozen=True)
class RunFilters:
    """What the runs page is filtered by (empty strings mean "any")."""

    status: str = ""
    agent: str = ""
    outcome: str = ""
    text: str = ""

    @classmethod
    def from_query(cls, query: dict[str, str]) -> RunFilters:
        """Filters from a query string; unknown states and outcomes are ignored (a filter
        that cannot match is no filter)."""
        status = query.get("status", "").strip()
        outcome = query.get("outcome", "").strip().upper()
        return cls(
            status=status if status in STATUSES else "",
            agent=query.get("agent", "").strip()[:200],
            outcome=outcome if outcome in OUTCOMES else "",
            text=query.get("q", "").strip()[:200],
        )

    def query_status(self) -> str | None:
        """The state to ask the index for."""
        if self.status:
            return self.status
        if self.outcome:
            return "completed" if self.outcome == Outcome.SUCCESS.value else "failed"
        return None

    def to_query(self) -> dict[str, str]:
        """The filters as query-string parameters (empty ones left out)."""
        pairs = {"status": self.status, "agent": self.agent, "outcome": self.outcome, "q": self.text}
        return {key: value for key, value in pairs.items() if value}


@dataclass(frozen=True)
class RunEnd:
    """What a run's ``run.end`` states (all None while the run has not ended)."""

    outcome: str | None = None
    code: str | None = None
    fingerprint: str | None = None
    #: ``"redacted"`` or ``"missing"`` when the end's payload cannot be read.
    unreadable: str | None = None


@dataclass(frozen=True)
class RunRow:
    """One row of the runs page."""

    info: RunInfo
    end: RunEnd

    @property
    def run(self) -> str:
        return self.info.run

    @property
    def duration_ms(self) -> int:
        """From the first entry to the latest (the end, for an ended run)."""
        return max(0, self.info.updated_ts - self.info.started_ts)


@dataclass
class RunsPage:
    """One page of runs and how it was found."""

    rows: list[RunRow]
    page: int
    per_page: int
    has_next: bool
    #: How many runs were examined to fill the page.
    examined: int
    #: True when a filtered page stopped at :data:`SCAN_LIMIT` before the store's end.
    truncated: bool = False
    filters: RunFilters = field(default_factory=RunFilters)


def run_end(store: Store, info: RunInfo) -> RunEnd:
    """Outcome, code and fingerprint of a run from its last entry, when that is its end."""
    try:
        entries = store.entries(info.run)
    except RunNotFoundError:
        return RunEnd()
    last = entries[-1] if entries else None
    if last is None or last.kind != "run.end" or last.payload is None:
        return RunEnd()
    try:
        doc: Any = store.get_payload(last.payload)
    except PayloadRedactedError:
        return RunEnd(outcome=(last.meta or {}).get("status"), unreadable="redacted")
    except PayloadMissingError:
        return RunEnd(unreadable="missing")
    if not isinstance(doc, dict):
        return RunEnd()

    def text(key: str) -> str | None:
        value = doc.get(key)
        return value if isinstance(value, str) else None

    return RunEnd(outcome=text("outcome"), code=text("code"), fingerprint=text("fingerprint"))


def runs_page(store: Store, filters: RunFilters, page: int = 1, per_page: int = PER_PAGE) -> RunsPage:
    """Page ``page`` (from 1) of the runs matching ``filters``, newest first."""
    page = max(1, page)
    skip = (page - 1) * per_page
    wanted = skip + per_page + 1  # one more than the page: is there a next page?
    status = filters.query_status()
    # Status, agent and text are answered by the store's run listing itself (exact, with an
    # offset); only the outcome needs each run's end, so only that filter scans.
    listed = {"status": status, "agent": filters.agent or None, "text": filters.text or None}
    if not filters.outcome:
        infos = store.runs(limit=per_page + 1, offset=skip, **listed)
        shown = infos[:per_page]
        return RunsPage(
            rows=[RunRow(info, run_end(store, info)) for info in shown],
            page=page,
            per_page=per_page,
            has_next=len(infos) > per_page,
            examined=skip + len(infos),
            filters=filters,
        )
    matches: list[RunRow] = []
    examined = 0
    window = max(_FIRST_WINDOW, wanted * 2)
    exhausted = False
    while len(matches) < wanted and not exhausted and examined < SCAN_LIMIT:
        window = min(window, SCAN_LIMIT - examined)
        infos = store.runs(limit=window, offset=examined, **listed)
        exhausted = len(infos) < window
        for info in infos:
            examined += 1
            end = run_end(store, info)
            if end.outcome != filters.outcome:
                continue
            matches.append(RunRow(info, end))
            if len(matches) >= wanted:
                break
        # After the first window, read larger ones, so that a rare match costs few reads.
        window = SCAN_LIMIT
    return RunsPage(
        rows=matches[skip : skip + per_page],
        page=page,
        per_page=per_page,
        has_next=len(matches) > skip + per_page,
        examined=examined,
        truncated=len(matches) < wanted and not exhausted,
        filters=filters,
    )
