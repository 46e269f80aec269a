"""The run commands (``run``, ``retrieve``, ``approve``, ``reject``, ``resume``), ``show`` on a
recorded run, and ``demo``: output, exit codes (0 ok, 1 the run failed, 2 usage error)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.main import cli
from tracelock.examples import support

TICKET = {"id": "T-7", "text": "My keyboard from order A-1001 arrived broken."}

AGENT_MODULE = '''
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()


@kit.tool()
def check(box: str) -> bool:
    return box.startswith("b")


@kit.tool(side_effect="irreversible")
def ship(box: str, ledger: str) -> str:
    with open(ledger, "a", encoding="utf-8") as handle:
        handle.write(box + "\\n")
    return "shipped " + box


@kit.agent("shipper")
def agent(ctx, order):
    ctx.call("check", box=order["box"])
    return ctx.call("ship", box=order["box"], ledger=order["ledger"])


def broken(ctx, order):
    return ctx.call("no_such_tool")
'''

AGENT_POLICY = """
version = 1

[[tools]]
name = "check"

[[tools]]
name = "ship"
approval = true
"""


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


def as_json(result: Result) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture
def ticket_file(tmp_path: Path) -> Path:
    path = tmp_path / "ticket.json"
    path.write_text(json.dumps(TICKET))
    return path


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[str]:
    """A small agent module in tmp_path, importable by name; the working directory is tmp_path."""
    name = "tl_cli_agents_" + request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    (tmp_path / "policy.toml").write_text(AGENT_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))  # restores sys.path afterwards
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_run_prints_the_run_and_retrieve_returns_it(tmp_path: Path, ticket_file: Path) -> None:
    store = tmp_path / "store"
    ran = invoke(
        "run", "tracelock.examples.support:agent", "--input", ticket_file, "--policy", support.POLICY_FILE,
        "--sandbox", tmp_path / "sb", "--store", store, "--json",
    )
    assert ran.exit_code == 0, ran.output
    document = as_json(ran)
    assert document["ok"] is True
    assert (document["status"], document["outcome"], document["code"]) == ("completed", "SUCCESS", None)
    assert len(document["fingerprint"]) == 64
    assert document["run_id"].startswith("run-")
    handled = document["output"]["handled"]
    assert document["output"]["ticket"] == "T-7"
    assert [item["outcome"] for item in handled] == ["SUCCESS", "SUCCESS", "DENIED", "SUCCESS"]
    assert handled[2]["code"] == "POLICY_ARGUMENT_REJECTED"
    assert (tmp_path / "sb" / "ticket-A-1001.md").is_file()

    retrieved = invoke("retrieve", document["run_id"], "--store", store, "--json")
    assert retrieved.exit_code == 0, retrieved.output
    again = as_json(retrieved)
    assert (again["output"], again["fingerprint"], again["outcome"]) == (
        document["output"],
        document["fingerprint"],
        "SUCCESS",
    )

    text = invoke("retrieve", document["run_id"], "--store", store)
    assert text.exit_code == 0
    assert document["fingerprint"] in text.output
    assert "SUCCESS" in text.output


def test_show_names_phases_outcomes_and_codes(tmp_path: Path, ticket_file: Path) -> None:
    store = tmp_path / "store"
    ran = invoke(
        "run", "tracelock.examples.support:agent", "--input", ticket_file, "--policy", support.POLICY_FILE,
        "--sandbox", tmp_path / "sb", "--store", store, "--run-id", "ticket-7", "--json",
    )
    assert ran.exit_code == 0, ran.output
    shown = invoke("show", "ticket-7", "--store", store, "--json")
    assert shown.exit_code == 0, shown.output
    summaries = [entry["summary"] for entry in as_json(shown)["entries"]]
    assert summaries[0].startswith("start agent=support-triage")
    assert any("issue_refund DENIED [POLICY_ARGUMENT_REJECTED] in AUTHORIZE" in line for line in summaries)
    assert any("lookup_order SUCCESS" in line for line in summaries)
    assert summaries[-1].startswith("end completed SUCCESS")
    text = invoke("show", "ticket-7", "--store", store)
    assert text.exit_code == 0
    assert "[POLICY_ARGUMENT_REJECTED] in AUTHORIZE" in text.output


def test_a_failed_run_exits_1(tmp_path: Path, ticket_file: Path) -> None:
    # No policy: the support agent's first LLM call is denied and it does not catch that.
    ran = invoke(
        "run", "tracelock.examples.support:agent", "--input", ticket_file, "--store", tmp_path / "store", "--json",
    )
    assert ran.exit_code == 1, ran.output
    document = as_json(ran)
    assert document["ok"] is False
    assert (document["status"], document["outcome"], document["code"]) == (
        "failed",
        "DENIED",
        "POLICY_LLM_NOT_ALLOWED",
    )
    text = invoke(
        "run", "tracelock.examples.support:agent", "--input", ticket_file, "--store", tmp_path / "store",
    )
    assert text.exit_code == 1
    assert "POLICY_LLM_NOT_ALLOWED" in text.output


def test_a_failed_run_of_a_local_module_exits_1(tmp_path: Path, agent_module: str) -> None:
    ran = invoke("run", f"{agent_module}:broken", "--store", "store", "--json")
    assert ran.exit_code == 1, ran.output
    assert as_json(ran)["code"] == "TOOL_UNKNOWN"


def test_approve_then_resume_completes_the_run(tmp_path: Path, agent_module: str) -> None:
    ledger = tmp_path / "ledger.txt"
    (tmp_path / "order.json").write_text(json.dumps({"box": "b1", "ledger": str(ledger)}))
    ran = invoke(
        "run", f"{agent_module}:agent", "--input", "order.json", "--policy", "policy.toml", "--store", "store", "--json"
    )
    assert ran.exit_code == 0, ran.output
    waiting = as_json(ran)
    assert (waiting["status"], waiting["waiting_step"], waiting["outcome"]) == ("awaiting_approval", 1, None)
    assert not ledger.exists()

    wrong = invoke("approve", waiting["run_id"], "0", "--by", "alice", "--store", "store", "--json")
    assert wrong.exit_code == 2
    assert as_json(wrong)["error"]["code"] == "RUN_STATE_INVALID"

    approved = invoke("approve", waiting["run_id"], "1", "--by", "alice", "--reason", "ok", "--store", "store", "--json")
    assert approved.exit_code == 0, approved.output
    assert as_json(approved) == {"ok": True, "run_id": waiting["run_id"], "step": 1, "decision": "approved", "by": "alice"}

    resumed = invoke("resume", waiting["run_id"], "--store", "store", "--json")
    assert resumed.exit_code == 0, resumed.output
    done = as_json(resumed)
    assert (done["status"], done["outcome"], done["output"]) == ("completed", "SUCCESS", "shipped b1")
    assert ledger.read_text() == "b1\n"

    retrieved = as_json(invoke("retrieve", waiting["run_id"], "--store", "store", "--json"))
    assert retrieved["fingerprint"] == done["fingerprint"]
    assert ledger.read_text() == "b1\n"


def test_reject_then_resume_fails_the_run(tmp_path: Path, agent_module: str) -> None:
    ledger = tmp_path / "ledger.txt"
    (tmp_path / "order.json").write_text(json.dumps({"box": "b2", "ledger": str(ledger)}))
    ran = invoke(
        "run", f"{agent_module}:agent", "--input", "order.json", "--policy", "policy.toml",
        "--store", "store", "--run-id", "order-2", "--json",
    )
    assert as_json(ran)["status"] == "awaiting_approval"
    rejected = invoke("reject", "order-2", "1", "--by", "bob", "--reason", "no", "--store", "store", "--json")
    assert rejected.exit_code == 0, rejected.output
    assert as_json(rejected)["decision"] == "rejected"
    resumed = invoke("resume", "order-2", "--store", "store", "--json")
    assert resumed.exit_code == 1, resumed.output
    done = as_json(resumed)
    assert (done["status"], done["outcome"], done["code"]) == ("failed", "DENIED", "APPROVAL_REJECTED")
    assert not ledger.exists()
    twice = invoke("approve", "order-2", "1", "--by", "alice", "--store", "store")
    assert twice.exit_code == 2
    assert "RUN_STATE_INVALID" in twice.output


def test_demo_records_retrieves_replays_and_verifies(tmp_path: Path) -> None:
    demo = invoke("demo", "--store", tmp_path / "demo-store", "--json")
    assert demo.exit_code == 0, demo.output
    document = as_json(demo)
    assert document["ok"] is True
    assert document["retrieved_identical"] is True
    assert document["replay"]["matched"] is True
    assert document["verify_store"]["ok"] is True
    assert document["run"]["outcome"] == "SUCCESS"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(["run", "tracelock.examples.support:agent", "--input", "{missing}"], "USAGE", id="missing-input-file"),
        pytest.param(["run", "tracelock.examples.support:agent", "--input", "{bad_json}"], "USAGE", id="bad-json-input"),
        pytest.param(["run", "tracelock.examples.support:agent", "--input", "{nan_json}"], "USAGE", id="nan-input"),
        pytest.param(["run", "no_such_module_xyz:agent"], "AGENT_INVALID", id="unknown-module"),
        pytest.param(["run", "tracelock.examples.support:nothing"], "AGENT_INVALID", id="unknown-agent"),
        pytest.param(["run", "tracelock.examples.support:agent", "--policy", "{bad_policy}"], "POLICY", id="bad-policy"),
        pytest.param(["retrieve", "no-such-run"], "RUN_NOT_FOUND", id="retrieve-unknown-run"),
        pytest.param(["show", "no-such-run"], "RUN_NOT_FOUND", id="show-unknown-run"),
        pytest.param(["approve", "no-such-run", "0", "--by", "x"], "RUN_NOT_FOUND", id="approve-unknown-run"),
        pytest.param(["resume", "no-such-run"], "RUN_NOT_FOUND", id="resume-unknown-run"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], code: str) -> None:
    files = {
        "missing": tmp_path / "missing.json",
        "bad_json": tmp_path / "bad.json",
        "nan_json": tmp_path / "nan.json",
        "bad_policy": tmp_path / "bad.toml",
    }
    files["bad_json"].write_text("{not json")
    files["nan_json"].write_text('{"x": NaN}')
    files["bad_policy"].write_text("version = 99\n")
    store = tmp_path / "store"
    assert invoke("run", "tracelock.examples.support:agent", "--store", store).exit_code == 1  # the store exists
    result = invoke(*[arg.format(**files) for arg in args], "--store", store, "--json")
    assert result.exit_code == 2, result.output
    document = as_json(result)
    assert document["ok"] is False
    assert code in document["error"]["code"]
