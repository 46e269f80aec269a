"""Issue 25 on the command line: ``stop`` (and ``--lift``, ``--list``), provenance in
``replay`` and ``diff`` (``--strict-environment``), ``verify RUN`` recomputing the
fingerprint, ``drift --hold-llm``; output, --json and exit codes."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.main import cli
from tracelock.runtime.provenance.identity import distributions_digest, engine_identity
from tracelock.runtime.provenance.record import Provenance
from tracelock.runtime.records import RunJournal
from tracelock.runtime.runtime import Runtime
from tracelock.storage.open import open_store

MODULE = '''
import itertools

from tracelock.runtime.errors import StepError
from tracelock.runtime.tools.toolkit import Toolkit

ANSWERS = itertools.cycle(["one", "two", "three"])
kit = Toolkit(llm=lambda request: {"content": next(ANSWERS), "model": "m-1"})


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    return "paid"


def agent(ctx, task):
    found = ctx.call("lookup", key=task["key"])
    try:
        paid = ctx.call("pay", amount=task["amount"])
    except StepError as exc:
        paid = exc.step_code
    return {"found": found, "paid": paid}


def asker(ctx, task):
    return ctx.call("lookup", key=ctx.llm(model="m", prompt="q", max_tokens=8)["content"])
'''
POLICY = 'version = 1\n[[tools]]\nname = "lookup"\n[[tools]]\nname = "pay"\n[llm]\nallow = true\nmodels = ["m"]\n'
OLD_ENGINE = engine_identity(
    tracelock="0.0.1", python="3.10.0", implementation="cpython", platform="linux-x86_64",
    distributions=distributions_digest([("tracelock", "0.0.1")]),
)


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    name = "tl_cli_prov_" + request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"key": "k", "amount": 3}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield {"module": name, "store": tmp_path / "store", "policy": tmp_path / "policy.toml", "task": tmp_path / "task.json"}
    sys.modules.pop(name, None)


def _run(w: dict[str, Any], agent: str = "agent") -> dict[str, Any]:
    result = invoke("run", f"{w['module']}:{agent}", "--input", w["task"], "--policy", w["policy"], "--store", w["store"], "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _record_under_old_engine(w: dict[str, Any]) -> str:
    module = importlib.import_module(w["module"])
    with Runtime(w["store"], w["policy"], toolkits=(module.kit,), provenance=Provenance(OLD_ENGINE)) as runtime:
        return runtime.run(module.agent, {"key": "k", "amount": 3}).run_id


def test_stop_list_lift(workdir: dict[str, Any]) -> None:
    store = workdir["store"]
    assert _run(workdir)["output"]["paid"] == "paid"
    stopped = invoke("stop", "pay", "--by", "ops", "--reason", "incident 7", "--store", store, "--json")
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.stdout)["stop"]["tool"] == "pay"
    assert "DENIED [TOOL_STOPPED]" in invoke("stop", "--irreversible", "--by", "ops", "--reason", "freeze", "--store", store).stdout
    listed = json.loads(invoke("stop", "--list", "--store", store, "--json").stdout)
    assert [(s["tool"], s["class"]) for s in listed["stops"]] == [("pay", None), (None, "irreversible")]
    assert "every irreversible tool" in invoke("stop", "--list", "--store", store).stdout
    assert _run(workdir)["output"]["paid"] == "TOOL_STOPPED"
    assert invoke("stop", "--lift", "pay", "--by", "ops", "--reason", "fixed", "--store", store).exit_code == 0
    assert invoke("stop", "--lift", "--irreversible", "--by", "ops", "--reason", "thawed", "--store", store).exit_code == 0
    assert _run(workdir)["output"]["paid"] == "paid"
    admin = invoke("show", "tracelock:admin", "--store", store).stdout
    assert "stop tool pay by ops: incident 7" in admin and "lift the stop on every irreversible tool" in admin
    again = invoke("stop", "--lift", "pay", "--by", "ops", "--reason", "twice", "--store", store, "--json")
    assert again.exit_code == 2 and json.loads(again.stdout)["error"]["code"] == "STOP_NOT_FOUND"
    assert invoke("stop", "--by", "ops", "--reason", "r", "--store", store).exit_code == 2  # no target
    assert invoke("stop", "pay", "--irreversible", "--by", "ops", "--reason", "r", "--store", store).exit_code == 2
    assert invoke("stop", "pay", "--reason", "r", "--store", store).exit_code == 2  # who?
    assert invoke("stop", "--list", "pay", "--store", store).exit_code == 2


def test_replay_reports_the_environment_and_fails_only_when_strict(workdir: dict[str, Any]) -> None:
    run = _record_under_old_engine(workdir)
    ok = invoke("replay", run, "--store", workdir["store"])
    assert ok.exit_code == 0, ok.output
    assert "MATCHED" in ok.stdout and "recorded under 0.0.1" in ok.stdout and "python" in ok.stdout
    strict = invoke("replay", run, "--strict-environment", "--store", workdir["store"], "--json")
    assert strict.exit_code == 1
    document = json.loads(strict.stdout)
    assert document["ok"] is False and document["matched"] is True
    assert "tracelock" in [item["field"] for item in document["provenance"]["engine"]]
    fresh = _run(workdir)["run_id"]
    assert invoke("replay", fresh, "--strict-environment", "--store", workdir["store"]).exit_code == 0
    gate = invoke("replay", "--all", "--strict-environment", "--store", workdir["store"], "--json")
    assert gate.exit_code == 1 and [row["run"] for row in json.loads(gate.stdout)["environment"]] == [run]
    assert invoke("replay", "--all", "--store", workdir["store"]).exit_code == 0


def test_diff_reports_the_environment(workdir: dict[str, Any]) -> None:
    old = _record_under_old_engine(workdir)
    new = _run(workdir)["run_id"]
    diff = invoke("diff", old, new, "--store", workdir["store"], "--json")
    document = json.loads(diff.stdout)
    assert diff.exit_code == 0 and document["same_fingerprint"] is True
    assert "tracelock" in [item["field"] for item in document["provenance"]["engine"]]
    assert "B ran under tracelock" in invoke("diff", old, new, "--store", workdir["store"]).stdout
    assert invoke("diff", old, new, "--strict-environment", "--store", workdir["store"]).exit_code == 1


def test_verify_run_recomputes_the_fingerprint(workdir: dict[str, Any]) -> None:
    run = _run(workdir)["run_id"]
    ok = invoke("verify", run, "--store", workdir["store"], "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["fingerprint"]["status"] == "match"
    assert "recomputed from the entries: match" in invoke("verify", run, "--store", workdir["store"]).stdout
    # A run whose chain is sound but whose run.end states a fingerprint its entries do not give.
    with open_store(workdir["store"]) as store:
        journal = RunJournal(store, "forged")
        journal.start({"agent": "a", "input": 1, "policy": None, "seed": "0" * 64, "parent": None}, agent="a", parent=None)
        journal.end("completed", {"outcome": "SUCCESS", "code": None, "output": 2, "fingerprint": "f" * 64, "error": None})
    forged = invoke("verify", "forged", "--store", workdir["store"], "--json")
    assert forged.exit_code == 1
    document = json.loads(forged.stdout)
    assert document["ok"] is False and document["fingerprint"]["status"] == "mismatch"
    assert "MISMATCH" in invoke("verify", "forged", "--store", workdir["store"]).stdout


def test_drift_hold_llm(workdir: dict[str, Any]) -> None:
    agent = f"{workdir['module']}:asker"
    args = ("--input", workdir["task"], "--policy", workdir["policy"], "--n", "3")
    varied = invoke("drift", agent, *args, "--in-process", "--json")
    assert varied.exit_code == 1 and json.loads(varied.stdout)["drift"]["step"] == 0
    held = invoke("drift", agent, *args, "--hold-llm", "--json")
    assert held.exit_code == 0, held.output
    assert json.loads(held.stdout)["held_llm"] is True
    assert "LLM answers held" in invoke("drift", agent, *args, "--hold-llm").stdout
