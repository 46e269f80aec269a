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

from tracelock.runtime.tools.toolkit import Toolkit

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
    forked = invoke("fork", run, "--at", "1", "--allow-irreversible", "--store", workdir["store"], "--json")
    assert forked.exit_code == 0, forked.output
    child = json.loads(forked.stdout)
    assert child["parent"]["run"] == run and child["parent"]["reused_steps"] == [0]
    diff = invoke("diff", run, child["run_id"], "--store", workdir["store"], "--json")
    assert diff.exit_code == 0 and json.loads(diff.stdout)["same_fingerprint"] is True
    assert "MATCH" in invoke("diff", run, child["run_id"], "--store", workdir["store"]).stdout


def test_drift(workdir: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from tracelock.runtime.runs import engine as runtime_module

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


FORK_MODULE = '''
from pathlib import Path

from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()
LOG = Path(__file__).with_name("executed.log")


def _executed(line):
    with LOG.open("a") as out:
        out.write(line + "\\n")


@kit.tool(side_effect="idempotent", timeout=None)
def reserve(item: str) -> str:
    _executed("reserve " + item)
    return "held " + item


@kit.tool(side_effect="irreversible", timeout=None)
def charge(amount: int) -> str:
    _executed("charge " + str(amount))
    return "charged"


@kit.agent("shop")
def agent(ctx, task):
    held = ctx.call("reserve", item=task["item"])
    paid = ctx.call("charge", amount=task["amount"])
    return {"held": held, "paid": paid, "again": ctx.call("reserve", item=task["item"] + "-receipt")}
'''
FORK_POLICY = 'version = 1\n[[tools]]\nname = "reserve"\n[[tools]]\nname = "charge"\n'


def test_a_refused_fork_leaves_nothing_for_recover_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "tl_cli_fork_refused"
    source = tmp_path / f"{name}.py"
    source.write_text(FORK_MODULE)
    (tmp_path / "policy.toml").write_text(FORK_POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"item": "lamp", "amount": 40}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    store, log = tmp_path / "store", tmp_path / "executed.log"
    try:
        recorded = invoke("run", f"{name}:agent", "--input", "task.json", "--policy", "policy.toml", "--store", store, "--json")
        assert recorded.exit_code == 0, recorded.output
        parent = json.loads(recorded.stdout)["run_id"]
        assert log.read_text().splitlines() == ["reserve lamp", "charge 40", "reserve lamp-receipt"]
        # The agent's code changes: step 0 now asks for another item, before the fork point 2.
        source.write_text(FORK_MODULE.replace('item=task["item"])', 'item=task["item"] + "-v2")') + "\n# v2\n")
        sys.modules.pop(name, None)
        import importlib

        importlib.invalidate_caches()
        refused = invoke("fork", parent, "--at", "2", "--store", store, "--json")
        assert refused.exit_code == 2, refused.output
        error = json.loads(refused.stdout)["error"]
        assert error["code"] == "FORK_REFUSED" and error["details"]["step"] == 0
        assert [change["path"] for change in error["details"]["diff"]] == ["/args/item"]
        runs = json.loads(invoke("log", "--store", store, "--json").stdout)["runs"]
        assert [run["run"] for run in runs] == [parent]
        recovered = invoke("recover", "--store", store, "--json")
        assert recovered.exit_code == 0 and json.loads(recovered.stdout)["runs"] == []
        assert log.read_text().splitlines() == ["reserve lamp", "charge 40", "reserve lamp-receipt"]
        statuses = {run["run"]: run["status"] for run in json.loads(invoke("log", "--store", store, "--json").stdout)["runs"]}
        assert statuses == {parent: "completed"}
    finally:
        sys.modules.pop(name, None)


def test_diff_is_a_check_exit_1_when_the_runs_differ(workdir: dict[str, Any]) -> None:
    first, same = _run(workdir), _run(workdir)
    workdir["task"].write_text(json.dumps({"key": "other", "amount": 3.0}))  # 3.0 is the recorded 3
    other = _run(workdir)
    matched = invoke("diff", first, same, "--store", workdir["store"], "--json")
    assert matched.exit_code == 0 and json.loads(matched.stdout)["same"] is True
    differs = invoke("diff", first, other, "--store", workdir["store"], "--json")
    assert differs.exit_code == 1, differs.output
    document = json.loads(differs.stdout)
    assert document["ok"] is False and document["same"] is False and document["same_fingerprint"] is False
    assert document["first_difference"]["component"] == "input"
    assert document["first_difference"]["diff"] == [{"path": "/input/key", "op": "changed", "recorded": "k", "requested": "other"}]
    text = invoke("diff", first, other, "--store", workdir["store"])
    assert text.exit_code == 1 and "fingerprints DIFFER" in text.stdout and '/input/key: A "k", B "other"' in text.stdout
    assert invoke("diff", first, "no-such-run", "--store", workdir["store"]).exit_code == 2


PAYING = '''
from pathlib import Path

from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    with open(Path(__file__).parent / "payments.log", "a") as ledger:
        ledger.write(f"{amount}\\n")
    return "paid"


@kit.agent("payer")
def agent(ctx, task):
    found = ctx.call("lookup", key=task["key"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}
'''


def _paying_runs(w: dict[str, Any], count: int) -> Path:
    module = w["module"] + "_paying"
    (Path.cwd() / f"{module}.py").write_text(PAYING)
    try:
        for _ in range(count):
            result = invoke("run", f"{module}:agent", "--input", w["task"], "--policy", w["policy"], "--store", w["store"], "--json")
            assert result.exit_code == 0, result.output
    finally:
        sys.modules.pop(module, None)
    return Path.cwd() / "payments.log"


@pytest.mark.parametrize("index", [False, True])
def test_recover_refuses_a_nul_byte_in_the_middle_and_neither_cuts_nor_repeats(workdir: dict[str, Any], index: bool) -> None:
    ledger = _paying_runs(workdir, 3)
    assert ledger.read_text().count("\n") == 3
    journal = workdir["store"] / "journal.log"
    lines = journal.read_bytes().split(b"\n")
    # Inside the last run's record of its irreversible step's intent: cutting from there
    # (an "unfinished write") would make the run look unfinished, and recovery pay again.
    intent = max(n for n, line in enumerate(lines) if b'"kind":"effect.intent"' in line)
    damaged = bytearray(journal.read_bytes())
    damaged[sum(len(line) + 1 for line in lines[:intent]) + 30] = 0
    journal.write_bytes(bytes(damaged))
    if not index:
        (workdir["store"] / "index.sqlite").unlink()
    result = invoke("recover", "--store", workdir["store"], "--json")
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["code"] == "JOURNAL_CORRUPT"
    text = invoke("recover", "--store", workdir["store"])
    assert text.exit_code == 2 and "JOURNAL_CORRUPT" in text.output
    assert journal.read_bytes() == bytes(damaged)
    assert not (workdir["store"] / "quarantine").exists()
    assert ledger.read_text().count("\n") == 3
    assert invoke("verify", "--store", workdir["store"]).exit_code == 1


def test_recover_reports_the_unfinished_write_it_cut(workdir: dict[str, Any]) -> None:
    _paying_runs(workdir, 1)
    journal = workdir["store"] / "journal.log"
    good = journal.read_bytes()
    fragment = b'{"i":0,"kind":"run.start","meta":{"agent":"pay'  # a write torn by a crash
    journal.write_bytes(good + fragment)
    result = invoke("recover", "--store", workdir["store"], "--json")
    assert result.exit_code == 0, result.output
    [repair] = json.loads(result.stdout)["repairs"]
    assert repair["offset"] == len(good) and repair["length"] == len(fragment)
    assert Path(repair["saved_to"]).read_bytes() == fragment
    assert journal.read_bytes() == good
    journal.write_bytes(good + fragment)
    text = invoke("recover", "--store", workdir["store"])
    assert text.exit_code == 0
    assert f"cut {len(fragment)} bytes at byte {len(good)}" in text.stdout and "quarantine" in text.stdout
    assert invoke("recover", "--store", workdir["store"], "--json").stdout.count('"repairs": []') == 1
