"""One verification service for every door: ``tracelock verify``, the MCP server's
``verify_*`` tools and the web UI's "verify now" give the same verdict, and a verdict names
every check that failed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracelock import Runtime
from tracelock.cli.cmd_mcp import StoreTools
from tracelock.cli.main import cli
from tracelock.evidence.store_verdict import run_verdict, store_verdict
from tracelock.storage.open import open_store
from tracelock.web.data.verify import verify_now

POLICY = {"version": 1, "tools": [{"name": "lookup"}]}


def cli_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*map(str, args), "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    location = tmp_path / "store"
    with Runtime(location, POLICY) as runtime:

        @runtime.tool(side_effect="read_only")
        def lookup(order: str) -> dict[str, str]:
            return {"order": order, "state": "shipped"}

        def agent(ctx: Any, input: Any) -> Any:
            return ctx.call("lookup", order=input)

        runtime.run(agent, "A-1001", run_id="r1")
    return location


def test_a_run_has_one_verdict_whichever_door_asks(store: Path) -> None:
    code, by_cli = cli_json("verify", "r1", "--store", store)
    assert code == 0
    with open_store(store, create=False, read_only=True) as opened:
        verdict = run_verdict(opened, "r1")
    by_mcp = StoreTools(store).verify_run("r1")
    assert verdict.ok and verdict.failures == [] and verdict.checks_failed() == []
    assert by_mcp == verdict.document == {key: value for key, value in by_cli.items() if key != "repairs"}
    # The fingerprint recomputed from the stored entries, which the MCP tool used to skip.
    assert by_mcp["fingerprint"]["status"] == "match"
    assert by_mcp["fingerprint"]["recomputed"] == by_mcp["fingerprint"]["recorded"]


def test_a_failed_store_verdict_names_its_check_for_every_door(store: Path, tmp_path: Path) -> None:
    altered = tmp_path / "altered"
    shutil.copytree(store, altered, ignore=shutil.ignore_patterns("lock"))
    journal = altered / "journal.log"
    data = journal.read_bytes()
    assert data.count(b"A-1001") >= 1
    journal.write_bytes(data.replace(b"A-1001", b"A-1009", 1))  # same length: a quiet edit
    code, by_cli = cli_json("verify", "--store", altered)
    assert code == 1 and by_cli["ok"] is False
    with open_store(altered, create=False, read_only=True) as opened:
        verdict = store_verdict(opened)
        page = verify_now(opened, [])
    issue = by_cli["issue"]
    assert not verdict.ok and len(verdict.failures) == 1
    failure = verdict.failures[0]
    assert (failure.check, failure.code, failure.seq, failure.message) == (
        "store.entries", issue["code"], issue["seq"], issue["message"],
    )
    assert verdict.checks_failed() == ["store.entries"]
    assert StoreTools(altered).verify_store() == verdict.document
    assert verdict.document == {key: value for key, value in by_cli.items() if key != "repairs"}
    assert not page.ok and page.failure is not None and page.failure.startswith(f"[{issue['code']}] at seq {issue['seq']}")
    assert f"[{issue['code']}]" in verdict.text()


def test_proofs_name_the_entries_a_checkpoint_does_not_cover(store: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert CliRunner().invoke(cli, ["keys", "generate", "--out", str(keys), "--name", "example.com/log"]).exit_code == 0
    key = keys / "example.com_log.key"
    assert CliRunner().invoke(cli, ["checkpoint", "--key", str(key), "--store", str(store)]).exit_code == 0
    with Runtime(store, POLICY) as runtime:

        @runtime.tool(side_effect="read_only")
        def lookup(order: str) -> dict[str, str]:
            return {"order": order, "state": "shipped"}

        runtime.run(lambda ctx, input: ctx.call("lookup", order=input), "A-2", run_id="r2")
    code, by_cli = cli_json("prove", "r2", "--store", store)
    assert code == 1 and by_cli["uncovered"]
    from tracelock.evidence.store_verdict import run_proof_verdict

    with open_store(store, create=False, read_only=True) as opened:
        verdict = run_proof_verdict(opened, "r2")
    assert verdict.document == by_cli and not verdict.ok
    assert verdict.checks_failed() == ["entry.covered"]
    assert sorted(failure.seq for failure in verdict.failures if failure.seq is not None) == by_cli["uncovered"]
