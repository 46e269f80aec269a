"""The operator commands on a PostgreSQL store, through the CLI against a real server:
``approve`` a run waiting for approval, ``recover`` a run whose irreversible effect was cut
short (it blocks, never repeats), ``resolve`` it and ``recover`` it to completion."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.main import cli

MODULE = '''
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()
CRASH = {"pay": False}
PAID = []


class Crash(BaseException):
    pass


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    PAID.append(amount)
    if CRASH["pay"]:
        CRASH["pay"] = False
        raise Crash
    return "paid"


@kit.agent("payer")
def agent(ctx, task):
    found = ctx.call("lookup", key=task["key"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}
'''
POLICY = 'version = 1\n[[tools]]\nname = "lookup"\n[[tools]]\nname = "pay"\n'
APPROVAL_POLICY = POLICY + "approval = true\n"


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


def document(result: Result) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Any]:
    name = "tl_pg_operator_" + request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "approval.toml").write_text(APPROVAL_POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"key": "k", "amount": 3}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield __import__(name)
    sys.modules.pop(name, None)


def test_approve_then_resume_on_postgres(agent: Any, pg_url: str) -> None:
    ran = invoke("run", f"{agent.__name__}:agent", "--input", "task.json", "--policy", "approval.toml", "--store", pg_url, "--json")
    assert ran.exit_code == 0, ran.output
    waiting = document(ran)
    assert (waiting["status"], waiting["waiting_step"]) == ("awaiting_approval", 1)
    assert agent.PAID == []
    approved = invoke("approve", waiting["run_id"], "1", "--by", "alice", "--store", pg_url, "--json")
    assert approved.exit_code == 0, approved.output
    assert document(approved)["decision"] == "approved"
    resumed = invoke("resume", waiting["run_id"], "--store", pg_url, "--json")
    assert resumed.exit_code == 0, resumed.output
    assert document(resumed)["output"] == {"found": "K", "paid": "paid"}
    assert agent.PAID == [3]


def test_recover_blocks_an_unfinished_irreversible_effect_on_postgres(agent: Any, pg_url: str) -> None:
    agent.CRASH["pay"] = True
    with pytest.raises(agent.Crash):
        invoke("run", f"{agent.__name__}:agent", "--input", "task.json", "--policy", "policy.toml", "--store", pg_url)
    recovered = invoke("recover", "--store", pg_url, "--json")
    assert recovered.exit_code == 0, recovered.output
    row = document(recovered)["runs"][0]
    assert (row["from"], row["to"], row["waiting_step"]) == ("running", "blocked", 1)
    assert agent.PAID == [3]  # never executed twice


def test_resolve_then_recover_completes_the_run_on_postgres(agent: Any, pg_url: str) -> None:
    agent.CRASH["pay"] = True
    with pytest.raises(agent.Crash):
        invoke("run", f"{agent.__name__}:agent", "--input", "task.json", "--policy", "policy.toml", "--store", pg_url)
    run = document(invoke("recover", "--store", pg_url, "--json"))["runs"][0]["run"]
    Path("actual.json").write_text('"paid (confirmed)"')
    resolved = invoke("resolve", run, "1", "--result", "actual.json", "--by", "ops", "--store", pg_url, "--json")
    assert resolved.exit_code == 0, resolved.output
    assert document(resolved)["action"] == "result recorded"
    again = invoke("recover", "--store", pg_url, "--json")
    assert again.exit_code == 0, again.output
    assert document(again)["runs"][0]["to"] == "completed"
    shown = invoke("retrieve", run, "--store", pg_url, "--json")
    assert document(shown)["output"]["paid"] == "paid (confirmed)"
    assert agent.PAID == [3]
