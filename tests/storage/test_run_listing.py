"""``Store.runs``: the run listing answers status, agent and text filters and an offset
itself, the same on both backends, and never lists the admin chain."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.storage_helpers import TickClock
from tracelock.core.entry import ADMIN_RUN
from tracelock.storage.backend import Store
from tracelock.storage.open import open_store


@pytest.fixture(params=["directory", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    location = str(tmp_path / "store") if request.param == "directory" else request.getfixturevalue("pg_url")
    handle = open_store(location, create=True, clock=TickClock())
    handle.append(ADMIN_RUN, "policy.register", payload={"v": 1})
    for number in range(12):
        agent = "Billing-Agent" if number % 3 == 0 else "support"
        run = f"run-{number:02d}"
        meta = {"agent": agent, "status": "running"} | ({"parent": "run-00"} if number == 7 else {})
        handle.append(run, "run.start", payload={"n": number}, meta=meta, new_run=True)
        if number % 2 == 0:
            handle.append(run, "run.end", payload={"n": number}, meta={"status": "completed"})
    yield handle
    handle.close()


def names(infos: list) -> list[str]:  # type: ignore[type-arg]
    return [info.run for info in infos]


def test_newest_first_with_an_offset_and_never_the_admin_chain(store: Store) -> None:
    everything = names(store.runs())
    assert everything == [f"run-{n:02d}" for n in range(11, -1, -1)]
    assert names(store.runs(limit=5)) == everything[:5]
    assert names(store.runs(limit=5, offset=5)) == everything[5:10]
    assert names(store.runs(limit=5, offset=10)) == everything[10:]


def test_status_agent_and_text_filters(store: Store) -> None:
    assert names(store.runs(status="completed")) == [f"run-{n:02d}" for n in (10, 8, 6, 4, 2, 0)]
    billing = names(store.runs(agent="billing"))  # a case-insensitive substring
    assert billing == ["run-09", "run-06", "run-03", "run-00"]
    assert names(store.runs(agent="BILLING", status="completed")) == ["run-06", "run-00"]
    assert names(store.runs(text="run-1")) == ["run-11", "run-10"]
    assert names(store.runs(text="run-00")) == ["run-07", "run-00"]  # run-07's parent is run-00
    assert names(store.runs(text="SUPPORT", limit=2, offset=1)) == ["run-10", "run-08"]
    assert store.runs(agent="nobody") == []
