"""Issue 21, the first hour of a new user, in the runtime: per-run seeds, fork consent and
fork points, agent and tool tracebacks, drift reports that name the tool, replay of a run
whose input was redacted, and a store location that is a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.runtime.runtime_helpers import allow, record_of, runtime_at
from tracelock.core.fingerprint import value_hash
from tracelock.errors import StoreError, TracelockError
from tracelock.evidence.redaction import redact
from tracelock.runtime.errors import RunStateError
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.compare import run_difference
from tracelock.runtime.replay.drift import detect_drift
from tracelock.runtime.replay.fork import ForkConsentError, ForkPointError, fork_run
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.directory import DirectoryStore

kit = Toolkit()
PAID: list[int] = []


@kit.tool(timeout=None)
def search(city: str) -> dict[str, Any]:
    return {"city": city, "hotel": "H1"}


@kit.tool(side_effect="idempotent", timeout=None)
def hold(hotel: str, idempotency_key: str = "") -> dict[str, Any]:
    return {"hold": hotel, "confirmation": "conf-" + idempotency_key}


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    PAID.append(amount)
    return "paid"


@kit.tool(timeout=None)
def broken(x: int) -> int:
    raise ZeroDivisionError("tool fell over")


def booking(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    found = ctx.call("search", city=task["city"])
    held = ctx.call("hold", hotel=found["hotel"])
    paid = ctx.call("pay", amount=task["amount"])
    return {"reference": str(ctx.uuid()), "held": held, "paid": paid}


def with_uuid(ctx: Any, task: Any) -> str:
    return str(ctx.uuid())


def raising(ctx: Any, task: Any) -> None:
    raise ValueError("agent fell over")


def calls_broken(ctx: Any, task: Any) -> int:
    return int(ctx.call("broken", x=1))


POLICY = allow("search", "hold", "pay", "broken")
TASK = {"city": "Oslo", "amount": 120}


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    handle = runtime_at(tmp_path, POLICY, toolkits=(kit,))
    yield handle
    handle.close()


# -- item 1: ids ----------------------------------------------------------------------------
def test_uuids_differ_between_runs_of_the_same_input(runtime: Runtime) -> None:
    one = runtime.run(with_uuid, {"same": True})
    two = runtime.run(with_uuid, {"same": True})
    assert one.output != two.output
    assert record_of(runtime, one.run_id).start["seed"] == value_hash({"run": one.run_id})


@settings(max_examples=20, deadline=None)
@given(seed=st.text(min_size=1, max_size=20))
def test_an_explicit_seed_gives_the_same_values_and_fingerprint(tmp_path_factory: pytest.TempPathFactory, seed: str) -> None:
    directory = tmp_path_factory.mktemp("seeded")
    with runtime_at(directory, POLICY, toolkits=(kit,)) as handle:
        one = handle.run(with_uuid, None, seed=seed)
        two = handle.run(with_uuid, None, seed=seed)
        assert one.run_id != two.run_id
        assert (one.output, one.fingerprint) == (two.output, two.fingerprint)
        recorded = record_of(handle, one.run_id).start["seed"]
        assert recorded == one.seed and len(recorded) == 64
        # The recorded form given again is the same seed.
        assert handle.run(with_uuid, None, seed=recorded).output == one.output


def test_drift_passes_one_seed_and_one_run_id_to_every_attempt() -> None:
    def make(store: Any) -> Runtime:
        return Runtime(store, POLICY, toolkits=(kit,), strict=False)

    report = detect_drift(make, booking, TASK, 3)
    assert not report.drifted, report.drift
    assert len(set(report.fingerprints)) == 1


# -- item 2: forks -------------------------------------------------------------------------
def test_a_fork_that_would_pay_again_is_refused_before_the_child_exists(runtime: Runtime) -> None:
    parent = runtime.run(booking, TASK)
    assert parent.ok
    before = [info.run for info in runtime.store.runs()]
    paid = len(PAID)
    with pytest.raises(ForkConsentError) as refused:
        fork_run(runtime, parent.run_id, 1)
    assert refused.value.code == "FORK_IRREVERSIBLE_NOT_ALLOWED"
    live = refused.value.details["live"]
    assert [(e["step"], e["name"], e["class"]) for e in live] == [
        (1, "hold", "idempotent"), (2, "pay", "irreversible"), (3, "uuid", "read_only")
    ]
    assert [info.run for info in runtime.store.runs()] == before and len(PAID) == paid
    child = fork_run(runtime, parent.run_id, 1, allow_irreversible=True)
    assert child.ok and len(PAID) == paid + 1
    # After the payment, nothing irreversible runs live: no consent needed.
    assert fork_run(runtime, parent.run_id, 3).ok


def test_the_policy_approval_flow_is_consent(runtime: Runtime) -> None:
    parent = runtime.run(booking, TASK)
    approving = Runtime(runtime.store, allow("search", "hold", {"name": "pay", "approval": True}), toolkits=(kit,))
    child = fork_run(approving, parent.run_id, 0, policy=approving.policy)
    assert child.status == "awaiting_approval"


@pytest.mark.parametrize("at", [5, 99])
def test_a_fork_point_past_the_end_is_a_usage_error(runtime: Runtime, at: int) -> None:
    parent = runtime.run(booking, TASK)
    with pytest.raises(ForkPointError) as refused:
        fork_run(runtime, parent.run_id, at, allow_irreversible=True)
    assert refused.value.code == "FORK_POINT_OUT_OF_RANGE" and refused.value.details["last"] == 4
    assert fork_run(runtime, parent.run_id, 4).ok  # reusing every step is a fork point


# -- item 3: tracebacks --------------------------------------------------------------------
def test_the_agents_traceback_is_journaled_audit_only(runtime: Runtime) -> None:
    failed = runtime.run(raising, None)
    assert failed.code == "AGENT_RAISED" and failed.traceback is not None
    assert "in raising" in failed.traceback and "ValueError: agent fell over" in failed.traceback
    record = record_of(runtime, failed.run_id)
    assert record.agent_traceback == failed.traceback
    assert runtime.retrieve(failed.run_id).traceback == failed.traceback
    assert runtime.replay(failed.run_id).matched  # not part of anything replay compares


def test_a_tools_traceback_is_journaled_with_its_step(runtime: Runtime) -> None:
    failed = runtime.run(calls_broken, None)
    assert failed.code == "TOOL_RAISED"
    (doc,) = record_of(runtime, failed.run_id).tracebacks
    assert (doc["step"], doc["where"], doc["exception"]) == (0, "tool", "ZeroDivisionError")
    assert "in broken" in doc["traceback"]


# -- item 4: drift reports -----------------------------------------------------------------
def test_a_difference_names_the_tool_and_an_echoed_idempotency_key(runtime: Runtime) -> None:
    one = runtime.run(booking, TASK, seed="s")
    two = runtime.run(booking, TASK, seed="s")
    difference = run_difference(load_run(runtime.store, one.run_id), load_run(runtime.store, two.run_id))
    assert difference is not None
    assert difference["tool"] == {"kind": "tool", "name": "hold", "class": "idempotent"}
    assert difference["cause"] == "idempotency_key" and "idempotency key" in difference["message"]
    assert [change["path"] for change in difference["diff"]] == ["/result/confirmation"]


# -- item 6: ids and store locations ------------------------------------------------------
def test_a_duplicate_run_id_says_how_to_continue_it(runtime: Runtime) -> None:
    runtime.run(with_uuid, None, run_id="dup-1")
    with pytest.raises(RunStateError) as clash:
        runtime.run(with_uuid, None, run_id="dup-1")
    assert clash.value.code == "RUN_ALREADY_EXISTS"
    assert "tracelock fork dup-1" in clash.value.message and "resume()" not in clash.value.message


def test_a_store_location_that_is_a_file_is_a_tracelock_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(StoreError) as refused:
        Runtime(tmp_path / "a-file")
    assert isinstance(refused.value, TracelockError) and "a file is in the way" in refused.value.message


# -- item 7: replay of a redacted input ---------------------------------------------------
def test_replay_of_a_run_whose_input_was_redacted_says_so(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as handle:
        run_id = handle.run(booking, TASK).run_id
    with DirectoryStore(tmp_path / "store") as store:
        redact(store, run_id, "start", fields=["input"], by="dpo", reason="a name")
    with runtime_at(tmp_path, POLICY, toolkits=(kit,)) as handle:
        report = handle.replay(run_id, booking)
    assert not report.matched and report.divergence is not None
    assert report.divergence["kind"] == "redacted_input" and "input is redacted" in report.divergence["message"]
