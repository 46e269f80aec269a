"""The same workload through the public Runtime on the directory store and on PostgreSQL:
byte for byte the same entries, per-run hashes, fingerprints, Merkle leaves, roots and proofs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tracelock import Runtime
from tracelock.cli.main import cli
from tracelock.core.merkle import leaf_hash
from tracelock.examples import support
from tracelock.storage.backend import Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.postgres import PostgresStore

TICKETS = [
    {"id": "T-1042", "text": "Hello, the keyboard from order A-1001 arrived broken. Refund?"},
    {"id": "T-1043", "text": "Where is my order A-1002?"},
    {"id": "T-1044", "text": "Refund order A-1001 please, it is broken."},
]
RUN_IDS = ("run-a", "run-b", "run-c")


class FixedClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000

    def __call__(self) -> int:
        self.now += 7
        return self.now


def record(make_store: Any, sandbox: Path) -> dict[str, Any]:
    clock = FixedClock()
    store: Store = make_store(clock)
    ids = iter(RUN_IDS)
    runtime = Runtime(
        store, support.POLICY_FILE, toolkits=(support.support,), sandbox=sandbox, clock=clock, ids=lambda: next(ids)
    )
    try:
        results = [runtime.run(support.agent, ticket) for ticket in TICKETS]
        replays = [runtime.replay(run_id, support.agent) for run_id in RUN_IDS]
        entries = list(store.iter_entries())
        size = store.tree_size()
        observed = {
            "outcomes": [(r.run_id, r.status, r.outcome, r.fingerprint) for r in results],
            "replays": [(report.matched, report.replayed_fingerprint) for report in replays],
            "lines": [entry.line for entry in entries],
            "run_hashes": {run: [entry.hash for entry in store.entries(run)] for run in RUN_IDS},
            "runs": [info.to_dict() for info in store.runs()],
            "payloads": {
                entry.payload: store.get_payload_bytes(entry.payload)
                for entry in entries
                if entry.payload and store.payload_state(entry.payload) == "present"
            },
            "leaves": [leaf_hash(entry.line) for entry in entries],
            "size": size,
            "roots": [store.tree_root(n) for n in range(size + 1)],
            "inclusion": [store.inclusion_proof(seq) for seq in range(size)],
            "consistency": [store.consistency_proof(n) for n in range(1, size + 1)],
            "inclusion_at": [store.inclusion_proof(seq, size // 2) for seq in range(size // 2)],
        }
    finally:
        runtime.close()
        store.close()
    return observed


def test_the_same_workload_is_byte_identical_on_both_backends(pg_url: str, tmp_path: Path) -> None:
    directory = record(lambda clock: DirectoryStore(tmp_path / "store", clock=clock), tmp_path / "sandbox-d")
    postgres = record(lambda clock: PostgresStore(pg_url, clock=clock), tmp_path / "sandbox-p")
    assert directory["size"] > 20
    assert all(matched for matched, _ in directory["replays"])
    for key in directory:
        assert postgres[key] == directory[key], key


def test_run_log_show_and_replay_work_on_a_postgres_store_from_the_cli(pg_url: str, tmp_path: Path) -> None:
    ticket = tmp_path / "ticket.json"
    ticket.write_text(json.dumps(TICKETS[0]))
    runner = CliRunner()
    common = ["--store", pg_url, "--json"]
    ran = runner.invoke(
        cli,
        ["run", "tracelock.examples.support:agent", "--input", str(ticket), "--policy", str(support.POLICY_FILE),
         "--sandbox", str(tmp_path / "sandbox"), "--run-id", "cli-run", *common],
        catch_exceptions=False,
    )
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["run_id"] == "cli-run"
    logged = runner.invoke(cli, ["log", *common], catch_exceptions=False)
    assert logged.exit_code == 0, logged.output
    assert [run["run"] for run in json.loads(logged.stdout)["runs"]] == ["cli-run"]
    shown = runner.invoke(cli, ["show", "cli-run", *common], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    entries = json.loads(shown.stdout)["entries"]
    with PostgresStore(pg_url, read_only=True) as store:
        assert [entry["hash"] for entry in entries] == [entry.hash for entry in store.entries("cli-run")]
    replayed = runner.invoke(cli, ["replay", "cli-run", *common], catch_exceptions=False)
    assert replayed.exit_code == 0, replayed.output
    every = runner.invoke(cli, ["replay", "--all", *common], catch_exceptions=False)
    assert every.exit_code == 0, every.output
