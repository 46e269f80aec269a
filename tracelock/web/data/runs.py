"""The runs list: one page of runs, newest first, filtered, from the store's run index.

A page never loads every run. The index answers "the newest N runs (in this state)" in one
query (``Store.runs``), so a page asks for just enough rows: with only a status filter,
exactly the rows up to the end of the page; with an agent, outcome or text filter, growing
windows of the newest runs (a small one, then :data:`SCAN_LIMIT`) until the page is full,
examining at most :data:`SCAN_LIMIT` runs (the page then says how far it looked). Only the rows shown (and, for an outcome
filter, the runs examined) have their ``run.end`` read, for outcome, code and fingerprint.

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

    @property
    def index_only(self) -> bool:
        """Whether the index alone decides which runs match."""
        return not (self.agent or self.outcome or self.text)

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


def _cheap_match(info: RunInfo, filters: RunFilters) -> bool:
    """The filters the index row answers: agent and text (run id, agent, parent)."""
    agent = (info.agent or "").lower()
    if filters.agent and filters.agent.lower() not in agent:
        return False
    if filters.text:
        needle = filters.text.lower()
        haystack = (info.run.lower(), agent, (info.parent or "").lower())
        if not any(needle in value for value in haystack):
            return False
    return True


def runs_page(store: Store, filters: RunFilters, page: int = 1, per_page: int = PER_PAGE) -> RunsPage:
    """Page ``page`` (from 1) of the runs matching ``filters``, newest first."""
    page = max(1, page)
    skip = (page - 1) * per_page
    wanted = skip + per_page + 1  # one more than the page: is there a next page?
    status = filters.query_status()
    if filters.index_only:
        infos = store.runs(limit=wanted, status=status)
        shown = infos[skip : skip + per_page]
        return RunsPage(
            rows=[RunRow(info, run_end(store, info)) for info in shown],
            page=page,
            per_page=per_page,
            has_next=len(infos) > skip + per_page,
            examined=len(infos),
            filters=filters,
        )
    matches: list[RunRow] = []
    examined = 0
    window = max(_FIRST_WINDOW, wanted * 2)
    exhausted = False
    while len(matches) < wanted and not exhausted and examined < SCAN_LIMIT:
        window = min(window, SCAN_LIMIT)
        infos = store.runs(limit=window, status=status)
        exhausted = len(infos) < window
        for info in infos[examined:]:
            examined += 1
            if not _cheap_match(info, filters):
                continue
            end = run_end(store, info)
            if filters.outcome and end.outcome != filters.outcome:
                continue
            matches.append(RunRow(info, end))
            if len(matches) >= wanted:
                break
        # The index has no offset: each window reads the newest runs again. After the
        # first, go straight to the limit, so that a rare match costs one large read.
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
