"""Faults of the run queue, with real worker processes (``tracelock worker``) on a real
PostgreSQL server and on the directory store: ``kill -9`` of a worker mid-run, a worker
paused past its lease then continued, workers racing for the same runs, the server
restarted with runs queued and in flight.

The tools keep a ledger outside the store (one line per real effect, with the pid of the
process that did it): it is what proves that no irreversible effect happened twice.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_server import Cluster, admin, own_pg_cluster  # noqa: F401  (a server the test restarts)
from tests.queue_workers import Workers, ends, wait_for
from tests.queue_workers import ledger_lines as effects
from tests.runtime import _queue_agents as agents
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def hold(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "hold"
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def workers(location: str, ledger: Path, hold: Path) -> Iterator[Workers]:
    pool = Workers(location, ledger, hold)
    yield pool
    pool.kill_all()


def runtime_for(location: str) -> Runtime:
    return Runtime(location, agents.POLICY, toolkits=(agents.kit,))


def test_kill_9_mid_run_another_worker_finishes_it(workers: Workers, ledger: Path, hold: Path) -> None:
    with runtime_for(workers.location) as runtime:
        handle = runtime.submit(agents.holding_refund, {"key": "k9"})
        hold.write_text("hold")
        first = workers.start()
        wait_for(Path(f"{ledger}.held.k9"), first)
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = workers.start("--max-runs", "1")
        report = workers.report(second)
        assert report["exit"] == 0, report
        assert [row["recovered"] for row in report["runs"]] == [True]
        result = handle.result(timeout=60)
        assert result.status == "completed"
        assert result.output == {"found": "K9"}
        assert ends(runtime, handle.run_id) == ["completed"]
    refunds = [line for line in effects(ledger) if line["effect"] == "refund"]
    # The refund's result was journaled before the kill: the second worker reused it.
    assert len(refunds) == 1 and refunds[0]["pid"] == first.pid


def test_kill_9_in_an_irreversible_effect_blocks_the_run_never_repeats_it(
    workers: Workers, ledger: Path, hold: Path
) -> None:
    with runtime_for(workers.location) as runtime:
        handle = runtime.submit(agents.payer, {"key": "pay", "amount": 5})
        hold.write_text("hold")
        first = workers.start()
        wait_for(Path(f"{ledger}.held.pay"), first)
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = workers.start("--max-runs", "1")
        report = workers.report(second)
        assert [row["outcome"] for row in report["runs"]] == ["blocked"]
        assert handle.status() == "blocked"
        record = load_run(runtime.store, handle.run_id)
        step = record.waiting_step
        assert step is not None and step in record.pending
        # The operator checked with the payment provider: the charge went through.
        runtime.resolve(handle.run_id, step, by="ops", reason="provider says paid", result="charged")
        third = workers.start("--max-runs", "1")
        assert [row["outcome"] for row in workers.report(third)["runs"]] == ["completed"]
        result = handle.result(timeout=60)
        assert result.ok and result.output["charged"] == "charged"
    charges = [line for line in effects(ledger) if line["effect"] == "charge"]
    assert len(charges) == 1 and charges[0]["pid"] == first.pid


def test_a_worker_paused_past_its_lease_has_its_appends_refused(workers: Workers, ledger: Path, hold: Path) -> None:
    with runtime_for(workers.location) as runtime:
        handle = runtime.submit(agents.holding_refund, {"key": "stop"})
        hold.write_text("hold")
        first = workers.start("--max-runs", "1")
        wait_for(Path(f"{ledger}.held.stop"), first)
        first.send_signal(signal.SIGSTOP)
        try:
            second = workers.start("--max-runs", "1")
            report = workers.report(second)
            assert [(row["outcome"], row["recovered"]) for row in report["runs"]] == [("completed", True)]
            before = len(runtime.store.entries(handle.run_id))
        finally:
            hold.unlink()
            first.send_signal(signal.SIGCONT)
        paused = workers.report(first)
        assert [row["outcome"] for row in paused["runs"]] == ["lease_lost"], paused
        assert "RUN_LEASE_LOST" in paused["runs"][0]["reason"] or "lease" in paused["runs"][0]["reason"]
        # Nothing of the paused worker reached the run after the take-over.
        assert len(runtime.store.entries(handle.run_id)) == before
        assert ends(runtime, handle.run_id) == ["completed"]
        assert handle.result(timeout=10).output == {"found": "STOP"}
    assert len([line for line in effects(ledger) if line["effect"] == "refund"]) == 1


def test_workers_racing_for_the_same_runs_run_each_once(workers: Workers, ledger: Path) -> None:
    with runtime_for(workers.location) as runtime:
        handles = [runtime.submit(agents.payer, {"key": f"r{number}", "amount": number}) for number in range(24)]
        racers = [workers.start("--until-idle", "--concurrency", "2") for _ in range(3)]
        reports = [workers.report(process) for process in racers]
        served = [row for report in reports for row in report["runs"]]
        assert sorted(row["run"] for row in served) == sorted(handle.run_id for handle in handles)
        assert {row["outcome"] for row in served} == {"completed"}
        for handle in handles:
            assert ends(runtime, handle.run_id) == ["completed"]
    charges = Counter(line["key"] for line in effects(ledger) if line["effect"] == "charge")
    assert charges == Counter({f"r{number}": 1 for number in range(24)})


def test_two_workers_started_for_one_queued_run_exactly_one_runs_it(workers: Workers, ledger: Path) -> None:
    with runtime_for(workers.location) as runtime:
        handle = runtime.submit(agents.payer, {"key": "one"})
        racers = [workers.start("--until-idle") for _ in range(2)]
        reports = [workers.report(process) for process in racers]
        assert sorted(len(report["runs"]) for report in reports) == [0, 1]
        assert handle.result(timeout=10).ok
    assert [line["key"] for line in effects(ledger) if line["effect"] == "charge"] == ["one"]


def test_the_server_restarted_with_runs_queued_and_in_flight(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    cluster: Cluster = request.getfixturevalue("own_pg_cluster")
    admin(cluster, "CREATE DATABASE restart")
    location = cluster.url("restart")
    ledger, hold = tmp_path / "ledger.jsonl", tmp_path / "hold"
    pool = Workers(location, ledger, hold)
    try:
        with runtime_for(location) as runtime:
            held = runtime.submit(agents.holding_refund, {"key": "inflight"})
            hold.write_text("hold")
            first = pool.start()
            wait_for(Path(f"{ledger}.held.inflight"), first)
            queued = [runtime.submit(agents.payer, {"key": f"q{number}"}) for number in range(6)]
        cluster.crash()
        cluster.restart()
        hold.unlink()
        # The first worker's store handle fails (loudly) or carries on; either way every
        # run finishes, each effect once.
        second = pool.start("--concurrency", "2", "--until-idle")
        with runtime_for(location) as runtime:
            for queued_earlier in [held, *queued]:
                handle = runtime.handle(queued_earlier.run_id)
                result = handle.result(timeout=120)
                assert result.status == "completed", result
                assert ends(runtime, handle.run_id) == ["completed"]
        assert pool.report(second)["exit"] == 0
    finally:
        pool.kill_all()
    lines = effects(ledger)
    assert Counter(line["key"] for line in lines if line["effect"] == "charge") == Counter(
        {f"q{number}": 1 for number in range(6)}
    )
    assert len([line for line in lines if line["effect"] == "refund" and line["key"] == "inflight"]) == 1


def test_sigterm_hands_back_a_run_that_outlives_the_grace_period(workers: Workers, ledger: Path, hold: Path) -> None:
    with runtime_for(workers.location) as runtime:
        handle = runtime.submit(agents.holding_refund, {"key": "term"})
        done = runtime.submit(agents.plain, {"key": "quick"})
        hold.write_text("hold")
        first = workers.start("--grace", "0.5", "--concurrency", "2", lease_ms=60_000)
        wait_for(Path(f"{ledger}.held.term"), first)
        assert done.result(timeout=60).ok  # served by the same worker meanwhile
        first.send_signal(signal.SIGTERM)
        report = workers.report(first)
        assert report["exit"] == 0
        outcomes = {row["run"]: row["outcome"] for row in report["runs"]}
        assert outcomes == {handle.run_id: "handed_back", done.run_id: "completed"}
        # Handed back: queued again at once (no lease to wait for), and its token is void.
        assert handle.status() in ("queued", "running")
        second = workers.start("--max-runs", "1")
        assert [row["outcome"] for row in workers.report(second)["runs"]] == ["completed"]
        assert handle.result(timeout=30).output == {"found": "TERM"}
        assert ends(runtime, handle.run_id) == ["completed"]
    assert len([line for line in effects(ledger) if line["effect"] == "refund" and line["key"] == "term"]) == 1


@pytest.mark.slow
def test_a_thousand_runs_across_four_workers_with_random_kills(pg_url: str, tmp_path: Path) -> None:
    """Every run completes, or is blocked on its irreversible charge exactly as the rules
    say (a worker died between the charge's intent and its result); the ledger shows no
    charge twice, and every repeated refund carries its first idempotency key."""
    import random

    ledger, hold = tmp_path / "ledger.jsonl", tmp_path / "hold"
    pool = Workers(pg_url, ledger, hold)
    chooser = random.Random(23)
    total = 1000
    try:
        with runtime_for(pg_url) as runtime:
            handles = [runtime.submit(agents.payer, {"key": f"n{number}", "amount": number}) for number in range(total)]
            backend = runtime.handle(handles[0].run_id)._backend
            live = [pool.start("--concurrency", "2") for _ in range(4)]
            kills = 0
            deadline = time.monotonic() + 900
            while True:
                counts = backend.counts().get("default", {})
                settled = counts.get("done", 0) + counts.get("waiting", 0)
                if settled == total:
                    break
                assert counts.get("error", 0) == 0, backend.items(state="error")
                assert time.monotonic() < deadline, counts
                time.sleep(chooser.uniform(0.3, 1.5))
                if kills < 12:
                    victim = chooser.randrange(len(live))
                    live[victim].send_signal(signal.SIGKILL)
                    live[victim].wait()
                    live[victim] = pool.start("--concurrency", "2")
                    kills += 1
            statuses: Counter[str] = Counter()
            blocked: list[str] = []
            for handle in handles:
                record = load_run(runtime.store, handle.run_id)
                statuses[record.status] += 1
                assert ends(runtime, handle.run_id) == ([] if record.status == "blocked" else ["completed"])
                if record.status == "blocked":
                    step = record.waiting_step
                    assert step is not None and record.pending[step]["name"] == "charge"
                    blocked.append(record.input["key"])
            assert statuses["completed"] + statuses["blocked"] == total, statuses
            assert kills >= 3  # the runs outlast a few kills whatever the machine's speed
    finally:
        pool.kill_all()
    lines = effects(ledger)
    charges = Counter(line["key"] for line in lines if line["effect"] == "charge")
    assert max(charges.values()) == 1
    completed_keys = {f"n{number}" for number in range(total)} - set(blocked)
    assert all(charges[key] == 1 for key in completed_keys)
    refund_keys: dict[str, set[str]] = {}
    for line in lines:
        if line["effect"] == "refund":
            refund_keys.setdefault(line["key"], set()).add(line["idem"])
    assert all(len(keys) == 1 for keys in refund_keys.values())
    print(f"\n1,000 runs, {kills} kills: {dict(statuses)}; refunds repeated for {sum(1 for line in lines if line['effect'] == 'refund') - len(refund_keys)} runs")
