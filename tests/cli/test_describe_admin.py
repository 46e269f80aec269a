"""``show`` describes the admin chain's entries in words (registered documents, spending)."""

from __future__ import annotations

from tracelock.cli.describe import describe
from tracelock.core.entry import encode_entry


def test_registered_documents_and_budget_spends_are_described() -> None:
    digest = "ab" * 32
    register = encode_entry(seq=0, run="tracelock:admin", i=0, kind="provenance.register", payload=digest, prev=None, ts=1)
    assert describe(register, {"engine": {}}) == f"provenance {digest} kept for the runs that name it"
    spend = encode_entry(seq=1, run="tracelock:admin", i=1, kind="budget.spend", payload=digest, prev=register.hash, ts=2)
    doc = {"v": 1, "run": "r1", "day": "2026-11-24", "agent": "support", "tenant": "acme",
           "usage": {"runs": 1, "llm_calls": 2, "tokens": 0, "cost_micro_usd": 0, "effects": 3}}
    assert describe(spend, doc) == (
        "budget spend of run r1 on 2026-11-24, agent support (tenant acme): effects 3, llm_calls 2, runs 1"
    )
