"""The replay, comparison and recovery commands, and store verification, end to end:
output, --json, exit codes (0 ok, 1 a check failed, 2 usage or input error)."""

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
import random

from tracelock.runtime.toolkit import Toolkit

kit = Toolkit()
CRASH = {"pay": False}


class Crash(BaseException):
    pass


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    if CRASH["pay"]:
        CRASH["pay"] = False
        raise Crash
    return "paid"


@kit.agent("payer")
def agent(ctx, task):
    found = ctx.call("lookup", key=task["key"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}


def changed(ctx, task):
    found = ctx.call("lookup", key=task["key"] + "!")
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}


def unseeded(ctx, task):
    return ctx.call("lookup", key=str(random.random()))
'''
POLICY = 'version = 1\n[[tools]]\nname = "lookup"\n[[tools]]\nname = "pay"\n'


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    name = "tl_cli_replay_" + request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"key": "k", "amount": 3}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield {"module": name, "store": tmp_path / "store", "policy": tmp_path / "policy.toml", "task": tmp_path / "task.json"}
    sys.modules.pop(name, None)


def _run(w: dict[str, Any], agent: str = "agent") -> str:
    result = invoke("run", f"{w['module']}:{agent}", "--input", w["task"], "--policy", w["policy"], "--store", w["store"], "--json")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run_id"])


def test_replay_matches_then_diverges(workdir: dict[str, Any]) -> None:
    run = _run(workdir)
    ok = invoke("replay", run, "--store", workdir["store"], "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["matched"] is True
    bad = invoke("replay", run, "--agent", f"{workdir['module']}:changed", "--store", workdir["store"], "--json")
    assert bad.exit_code == 1
    divergence = json.loads(bad.stdout)["divergence"]
    assert divergence["step"] == 0 and "/args/key" in [d["path"] for d in divergence["diff"]]
    text = invoke("replay", run, "--agent", f"{workdir['module']}:changed", "--store", workdir["store"])
    assert text.exit_code == 1 and "/args/key" in text.stdout


def test_replay_gate(workdir: dict[str, Any]) -> None:
    for _ in range(3):
        _run(workdir)
    passed = invoke("replay", "--all", "--store", workdir["store"], "--json")
    assert passed.exit_code == 0 and json.loads(passed.stdout)["matched"] == 3
    failed = invoke("replay", "--all", "--agent", f"{workdir['module']}:changed", "--store", workdir["store"])
    assert failed.exit_code == 1 and "3 diverged" in failed.stdout and "FAIL" in failed.stdout
    assert invoke("replay", "--store", workdir["store"]).exit_code == 2
    assert invoke("replay", "--all", "--since", "yesterday", "--store", workdir["store"]).exit_code == 2


def test_fork_and_diff(workdir: dict[str, Any]) -> None:
    run = _run(workdir)
    forked = invoke("fork", run, "--at", "1", "--store", workdir["store"], "--json")
    assert forked.exit_code == 0, forked.output
    child = json.loads(forked.stdout)
    assert child["parent"]["run"] == run and child["parent"]["reused_steps"] == [0]
    diff = invoke("diff", run, child["run_id"], "--store", workdir["store"], "--json")
    assert diff.exit_code == 0 and json.loads(diff.stdout)["same_fingerprint"] is True
    assert "MATCH" in invoke("diff", run, child["run_id"], "--store", workdir["store"]).stdout


def test_drift(workdir: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from tracelock.runtime import runtime as runtime_module

    steady = invoke("drift", f"{workdir['module']}:agent", "--input", workdir["task"], "--policy", workdir["policy"], "--n", "3", "--json")
    assert steady.exit_code == 0 and json.loads(steady.stdout)["drifted"] is False
    monkeypatch.setattr(runtime_module, "STRICT_BY_DEFAULT", False)  # let the nondeterminism through
    drifting = invoke("drift", f"{workdir['module']}:unseeded", "--input", workdir["task"], "--policy", workdir["policy"], "--n", "3")
    assert drifting.exit_code == 1 and "DRIFT" in drifting.stdout and "argument" in drifting.stdout


def test_recover_resolve_abort(workdir: dict[str, Any]) -> None:
    module = __import__(workdir["module"])
    module.CRASH["pay"] = True
    with pytest.raises(module.Crash):
        invoke("run", f"{workdir['module']}:agent", "--input", workdir["task"], "--policy", workdir["policy"], "--store", workdir["store"])
    recovered = invoke("recover", "--store", workdir["store"], "--json")
    assert recovered.exit_code == 0, recovered.output
    row = json.loads(recovered.stdout)["runs"][0]
    assert row["to"] == "blocked" and row["waiting_step"] == 1
    run = row["run"]
    assert invoke("resolve", run, "1", "--by", "ops", "--store", workdir["store"]).exit_code == 2  # no action
    (Path.cwd() / "actual.json").write_text('"paid (confirmed by the bank)"')
    resolved = invoke("resolve", run, "1", "--result", "actual.json", "--by", "ops", "--reason", "bank", "--store", workdir["store"])
    assert resolved.exit_code == 0
    again = invoke("recover", "--store", workdir["store"], "--json")
    assert json.loads(again.stdout)["runs"][0]["to"] == "completed"
    shown = invoke("retrieve", run, "--store", workdir["store"], "--json")
    assert json.loads(shown.stdout)["output"]["paid"] == "paid (confirmed by the bank)"
    assert invoke("abort", run, "--reason", "late", "--store", workdir["store"]).exit_code == 2  # already ended


def test_log_show_verify(workdir: dict[str, Any]) -> None:
    run = _run(workdir)
    log = invoke("log", "--store", workdir["store"], "--json")
    assert log.exit_code == 0 and json.loads(log.stdout)["runs"][0]["run"] == run
    assert invoke("verify", "--store", workdir["store"]).exit_code == 0
    assert invoke("verify", run, "--store", workdir["store"], "--json").exit_code == 0
    assert invoke("verify", "--store", workdir["store"] / "absent").exit_code == 2
    assert invoke("show", "no-such-run", "--store", workdir["store"]).exit_code == 2
    journal = workdir["store"] / "journal.log"
    lines = journal.read_bytes().splitlines(keepends=True)
    first_entry = next(n for n, line in enumerate(lines) if line.startswith(b"{"))
    del lines[first_entry]
    journal.write_bytes(b"".join(lines))
    broken = invoke("verify", "--store", workdir["store"], "--json")
    assert broken.exit_code == 1 and json.loads(broken.stdout)["ok"] is False
