"""Daily budgets: limits that span runs, per agent and per tenant, per UTC day.

A run belongs to the UTC day of its start (the day is recorded in its ``run.start``, with
how many runs of its agent and tenant that day had started before it). What every run of
a day consumed is a ledger kept in the store: ``budget.spend`` entries of the
``tracelock:admin`` chain (written by :mod:`tracelock.runtime.daily.journal`), each with one
run's cumulative counters. This module holds the :class:`DailyLedger` those entries fold
into, and the decision a step's AUTHORIZE phase takes against it: the totals it saw are
written into the step's effect (``daily``), so replay answers the step from the record and
never consults the ledger.

Counters only grow, so folding takes each run's maximum per counter: a run's entries, and
the notes this process makes while the run is under way, may arrive in any order.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tracelock.runtime.outcomes import Outcome, StepFailure, register_code
from tracelock.runtime.policy.policy import DAILY_BUDGETS, Policy

__all__ = [
    "DAILY_BUDGET_EXCEEDED",
    "SPEND_KIND",
    "DailyLedger",
    "RunDaily",
    "utc_day",
]

SPEND_KIND = "budget.spend"

DAILY_BUDGET_EXCEEDED = register_code(
    "DAILY_BUDGET_EXCEEDED",
    Outcome.DENIED,
    "a daily budget (daily_budgets.agent or daily_budgets.tenant) is spent for the run's UTC day",
)

#: The counters a run adds to its day (``runs`` is 1 for every run).
COUNTERS = DAILY_BUDGETS


def utc_day(ms: int) -> str:
    """The UTC calendar day (``YYYY-MM-DD``) of a journaled time in ms since the epoch."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).date().isoformat()


@dataclass(frozen=True)
class RunDaily:
    """What a run's daily budgets are judged by, as its ``run.start`` records it: its day,
    agent and tenant, and how many runs of the agent (and of the tenant) had started that
    day before it (its rank decides the ``runs`` budget, whatever starts later)."""

    run_id: str
    day: str
    agent: str
    tenant: str | None
    runs_before: Mapping[str, int]

    def start_document(self) -> dict[str, Any]:
        """The ``daily`` member of the run's start."""
        return {"day": self.day, "runs_before": dict(self.runs_before)}

    @classmethod
    def from_start(cls, run_id: str, start: Mapping[str, Any]) -> RunDaily | None:
        """Read it back from a recorded start (None: the run was started without one)."""
        daily = start.get("daily")
        if not isinstance(daily, dict) or not isinstance(daily.get("day"), str):
            return None
        before = daily.get("runs_before")
        tenant = start.get("tenant")
        return cls(
            run_id,
            daily["day"],
            str(start.get("agent", "")),
            tenant if isinstance(tenant, str) else None,
            {str(k): int(v) for k, v in before.items()} if isinstance(before, dict) else {},
        )

    def keys(self) -> dict[str, str]:
        """The scopes the run is counted in, with its key in each."""
        return {"agent": self.agent} | ({"tenant": self.tenant} if self.tenant is not None else {})


def _zero() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


class DailyLedger:
    """What each run of recent days consumed: a fold of the admin chain's ``budget.spend``
    entries (:meth:`apply`) and of this process's runs under way (:meth:`note`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: run id -> (day, agent, tenant, counters)
        self._runs: dict[str, tuple[str, str, str | None, dict[str, int]]] = {}
        #: The ``seq`` of the last admin entry folded in (-1: none).
        self.seen = -1
        #: Set by the runtime: folds in spend entries written since (paced).
        self.refresher: Callable[[], None] | None = None

    def poll(self) -> None:
        refresher = self.refresher
        if refresher is not None:
            refresher()

    def apply(self, seq: int, kind: str, doc: Mapping[str, Any]) -> None:
        """Fold one admin entry in (other kinds, and entries already folded, are ignored)."""
        with self._lock:
            if seq <= self.seen:
                return
            self.seen = seq
        if kind != SPEND_KIND or not isinstance(doc, Mapping):
            return
        run, day, agent, tenant = doc.get("run"), doc.get("day"), doc.get("agent"), doc.get("tenant")
        usage = doc.get("usage")
        if not (isinstance(run, str) and isinstance(day, str) and isinstance(agent, str) and isinstance(usage, dict)):
            return
        self.note(run, day, agent, tenant if isinstance(tenant, str) else None, usage)

    def note(self, run: str, day: str, agent: str, tenant: str | None, usage: Mapping[str, Any]) -> None:
        """Record a run's cumulative counters (each counter keeps its maximum)."""
        with self._lock:
            self._note(run, day, agent, tenant, usage)

    def _note(self, run: str, day: str, agent: str, tenant: str | None, usage: Mapping[str, Any]) -> None:
        known = self._runs.get(run)
        counters = known[3] if known is not None else _zero()
        for name in COUNTERS:
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > counters[name]:
                counters[name] = value
        self._runs[run] = (day, agent, tenant, counters)

    def _totals(self, day: str, scope: str, key: str, excluding: str) -> dict[str, int]:
        totals = _zero()
        for run, (run_day, agent, tenant, counters) in self._runs.items():
            if run == excluding or run_day != day or (agent if scope == "agent" else tenant) != key:
                continue
            for name in COUNTERS:
                totals[name] += counters[name]
        return totals

    def totals(self, day: str, scope: str, key: str, excluding: str = "") -> dict[str, int]:
        """What the runs of ``day`` in ``scope`` (``agent`` or ``tenant``) under ``key``
        consumed, ``excluding`` one run."""
        with self._lock:
            return self._totals(day, scope, key, excluding)

    def open_run(self, run_id: str, day: str, agent: str, tenant: str | None) -> RunDaily:
        """Count a new run in its day and give its rank in each scope (atomic in this
        process: two runs started at once get different ranks)."""
        yesterday = (datetime.date.fromisoformat(day) - datetime.timedelta(days=1)).isoformat()
        self.forget_before(yesterday)  # older days decide nothing for a run starting now
        with self._lock:
            before = {"agent": self._totals(day, "agent", agent, run_id)["runs"]}
            if tenant is not None:
                before["tenant"] = self._totals(day, "tenant", tenant, run_id)["runs"]
            self._note(run_id, day, agent, tenant, {"runs": 1})
        return RunDaily(run_id, day, agent, tenant, before)

    def charge(
        self, daily: RunDaily, policy: Policy, usage: Mapping[str, int], requested: Mapping[str, int]
    ) -> dict[str, Any]:
        """Decide a step of a run against its day's budgets. ``usage`` is the run's own
        cumulative counters, ``requested`` what the step asks for (``effects``, and for an
        LLM call ``llm_calls`` and ``tokens``). Checks and notes at once, so that two steps
        of this process never both take the last unit. Returns what it saw (for the step's
        record); raises the step's DENIED failure when a budget is spent."""
        seen: dict[str, Any] = {"day": daily.day}
        with self._lock:
            for scope, key in daily.keys().items():
                limits = policy.daily_budgets(scope)
                if limits is None:
                    continue
                others = self._totals(daily.day, scope, key, daily.run_id)
                used = {name: others[name] + usage.get(name, 0) for name in COUNTERS}
                used["runs"] = daily.runs_before.get(scope, others["runs"]) + 1
                seen[scope] = {"key": key, "used": used}
                for name in COUNTERS:
                    limit = limits.get(name)
                    if limit is None:
                        continue
                    wanted = requested.get(name, 0)
                    if name in ("llm_calls", "tokens") and not requested.get("llm_calls"):
                        continue
                    if name == "runs":
                        exceeded, wanted = used["runs"] > limit, 0
                    elif name == "cost_micro_usd":
                        exceeded = used[name] >= limit
                    else:
                        exceeded = used[name] + wanted > limit
                    if exceeded:
                        raise StepFailure(
                            DAILY_BUDGET_EXCEEDED,
                            f"the daily {name} budget of {scope} {key!r} is spent for {daily.day}: "
                            f"used {used[name]}" + (f" + requested {wanted}" if wanted else "")
                            + f" against a limit of {limit}",
                            scope=scope,
                            key=key,
                            day=daily.day,
                            budget=name,
                            limit=limit,
                            used=used[name],
                            requested=wanted,
                        )
            after = {name: usage.get(name, 0) + requested.get(name, 0) for name in COUNTERS}
            after["runs"] = 1
            self._note(daily.run_id, daily.day, daily.agent, daily.tenant, after)
        return seen

    def forget_before(self, day: str) -> None:
        """Drop runs of days before ``day`` (they decide nothing any more)."""
        with self._lock:
            for run in [run for run, known in self._runs.items() if known[0] < day]:
                del self._runs[run]
