"""A resume that diverges from the record runs nothing and leaves the run as it found it: a
run resumed from ``awaiting_approval`` or ``blocked`` returns to that state (journaled, with
the divergence), so recovery never continues it live with the diverging code."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock import DivergenceError, Runtime, Toolkit
from tracelock.cli.main import cli
from tracelock.runtime.records import load_run

POLICY = {"version": 1, "tools": [{"name": "lookup"}, {"name": "pay", "approval": True}, {"name": "ship"}]}
EXECUTED: list[str] = []
#: Stands for a change of the agent's code between the recording and the resume.
CODE = {"suffix": "", "crash_ship": False}
kit = Toolkit()


class Crash(BaseException):
    """The process dying inside a tool: nothing after the intent is journaled."""


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    EXECUTED.append(f"lookup {key}")
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    EXECUTED.append(f"pay {amount}")
    return "paid"


@kit.tool(side_effect="irreversible", timeout=None)
def ship(item: str) -> str:
    if CODE["crash_ship"]:
        CODE["crash_ship"] = False
        raise Crash
    EXECUTED.append(f"ship {item}")
    return "shipped"


@kit.agent("buyer")
def buyer(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    found = ctx.call("lookup", key=task["key"] + CODE["suffix"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}


@kit.agent("shipper")
def shipper(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    found = ctx.call("lookup", key=task["key"] + CODE["suffix"])
    return {"found": found, "shipped": ctx.call("ship", item=task["key"])}


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    EXECUTED.clear()
    CODE.update(suffix="", crash_ship=False)
    rt = Runtime(tmp_path / "store", POLICY, toolkits=(kit,))
    yield rt
    rt.close()
    CODE.update(suffix="", crash_ship=False)


def test_an_approved_run_resumed_with_diverging_code_stays_awaiting_approval(runtime: Runtime) -> None:
    waiting = runtime.run(buyer, {"key": "k", "amount": 3}, run_id="r1")
    assert waiting.status == "awaiting_approval" and waiting.waiting_step == 1
    runtime.approve("r1", 1, by="alice")
    CODE["suffix"] = "!"
    EXECUTED.clear()

    with pytest.raises(DivergenceError) as caught:
        runtime.resume("r1")
    assert caught.value.report["step"] == 0

    record = load_run(runtime.store, "r1")
    assert record.status == "awaiting_approval" and record.waiting_step == 1
    assert record.states[-1]["divergence"]["step"] == 0
    assert record.states[-1]["reason"].startswith("resume diverged")
    assert EXECUTED == []
    # Recovery judges it again at every pass and never runs it live while it diverges.
    for _ in range(2):
        report = runtime.recover()
        (row,) = report.runs
        assert (row["from"], row["to"], row["error_kind"]) == ("awaiting_approval", "awaiting_approval", "REPLAY_DIVERGED")
        assert load_run(runtime.store, "r1").status == "awaiting_approval"
    assert EXECUTED == []
    assert runtime.retrieve("r1").status == "awaiting_approval"

    CODE["suffix"] = ""
    report = runtime.recover()
    assert [row["to"] for row in report.runs] == ["completed"]
    assert EXECUTED == ["pay 3"]


def test_a_resolved_blocked_run_resumed_with_diverging_code_stays_blocked(runtime: Runtime) -> None:
    CODE["crash_ship"] = True
    with pytest.raises(Crash):
        runtime.run(shipper, {"key": "k"}, run_id="r2")
    assert [row["to"] for row in runtime.recover().runs] == ["blocked"]
    runtime.resolve("r2", 1, by="alice", reason="the carrier has nothing", retry=True)
    CODE["suffix"] = "!"
    EXECUTED.clear()

    (row,) = runtime.recover().runs
    assert (row["from"], row["to"], row["error_kind"]) == ("blocked", "blocked", "REPLAY_DIVERGED")
    record = load_run(runtime.store, "r2")
    assert record.status == "blocked" and record.waiting_step == 1 and 1 in record.retries
    assert EXECUTED == []

    CODE["suffix"] = ""
    assert [row["to"] for row in runtime.recover().runs] == ["completed"]
    assert EXECUTED == ["ship k"]


def test_a_fork_child_awaiting_approval_that_diverges_stays_awaiting_approval(runtime: Runtime) -> None:
    from tracelock.runtime.replay.fork import fork_run

    runtime.run(buyer, {"key": "k", "amount": 3}, run_id="parent")
    child = fork_run(runtime, "parent", 1, new_run_id="child")
    assert child.status == "awaiting_approval" and child.waiting_step == 1
    runtime.approve("child", 1, by="alice")
    CODE["suffix"] = "!"
    with pytest.raises(DivergenceError):
        runtime.resume("child")
    assert load_run(runtime.store, "child").status == "awaiting_approval"
    CODE["suffix"] = ""
    EXECUTED.clear()
    resumed = runtime.resume("child")
    assert resumed.status == "completed" and EXECUTED == ["pay 3"]
    assert resumed.parent == {"run": "parent", "step": 1, "reused_steps": [0]}


def test_a_fork_does_not_inherit_the_parents_approval_of_a_live_step(runtime: Runtime) -> None:
    from tracelock.runtime.replay.fork import fork_run

    runtime.run(buyer, {"key": "k", "amount": 3}, run_id="parent")
    runtime.approve("parent", 1, by="alice")
    assert runtime.resume("parent").status == "completed"
    EXECUTED.clear()
    child = fork_run(runtime, "parent", 1, new_run_id="child")
    # Step 1 runs live in the child: alice approved it for the parent only.
    assert child.status == "awaiting_approval" and child.waiting_step == 1
    assert EXECUTED == []


MODULE = '''
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()
CODE = {"suffix": ""}
PAID = []


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    PAID.append(amount)
    return "paid"


@kit.agent("buyer")
def agent(ctx, task):
    found = ctx.call("lookup", key=task["key"] + CODE["suffix"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}
'''
CLI_POLICY = 'version = 1\n[[tools]]\nname = "lookup"\n[[tools]]\nname = "pay"\napproval = true\n'


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    name = "tl_resume_divergence_cli"
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(CLI_POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"key": "k", "amount": 3}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield {"module": name, "store": tmp_path / "store", "policy": tmp_path / "policy.toml", "task": tmp_path / "task.json"}
    sys.modules.pop(name, None)


def test_cli_resume_and_recover_report_a_divergence_with_exit_1(workdir: dict[str, Any]) -> None:
    store = workdir["store"]
    ran = invoke("run", f"{workdir['module']}:agent", "--input", workdir["task"], "--policy", workdir["policy"], "--store", store, "--json")
    run = json.loads(ran.stdout)["run_id"]
    assert json.loads(ran.stdout)["status"] == "awaiting_approval"
    assert invoke("approve", run, "1", "--by", "alice", "--store", store).exit_code == 0
    module = sys.modules[workdir["module"]]
    module.CODE["suffix"] = "!"  # type: ignore[attr-defined]

    resumed = invoke("resume", run, "--store", store, "--json")
    assert resumed.exit_code == 1, resumed.output
    doc = json.loads(resumed.stdout)
    assert doc["ok"] is False and doc["status"] == "awaiting_approval" and doc["waiting_step"] == 1
    assert doc["error"]["code"] == "REPLAY_DIVERGED" and doc["error"]["details"]["step"] == 0
    text = invoke("resume", run, "--store", store)
    assert text.exit_code == 1 and "awaiting_approval" in text.output

    recovered = invoke("recover", "--store", store, "--json")
    assert recovered.exit_code == 1
    (row,) = json.loads(recovered.stdout)["runs"]
    assert row["to"] == "awaiting_approval" and row["error_kind"] == "REPLAY_DIVERGED"
    assert module.PAID == []  # type: ignore[attr-defined]

    module.CODE["suffix"] = ""  # type: ignore[attr-defined]
    done = invoke("recover", "--store", store, "--json")
    assert done.exit_code == 0 and [r["to"] for r in json.loads(done.stdout)["runs"]] == ["completed"]
    assert module.PAID == [3]  # type: ignore[attr-defined]
