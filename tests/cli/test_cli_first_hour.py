"""Issue 21, the first hour of a new user, at the command line: --seed, Ctrl-C, the deny-all
policy, duplicate run ids, click's usage errors under --json, PostgreSQL URLs without the
driver, tracebacks in `show`, values printed as JSON, fork consent and drift reports."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.main import cli

MODULE = '''
import os
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()

@kit.tool(timeout=None)
def search(city: str) -> dict:
    return {"city": city, "hotel": "H1", "open": True, "note": None}

@kit.tool(side_effect="idempotent", timeout=None)
def hold(hotel: str, idempotency_key: str = "") -> dict:
    return {"hold": hotel, "confirmation": "conf-" + idempotency_key}

@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    return "paid"

def booking(ctx, task):
    if os.path.exists("interrupt.flag"):
        raise KeyboardInterrupt
    found = ctx.call("search", city=task["city"])
    held = ctx.call("hold", hotel=found["hotel"])
    return {"reference": str(ctx.uuid()), "found": found, "held": held, "paid": ctx.call("pay", amount=task["amount"])}

def raising(ctx, task):
    raise ValueError("agent fell over")

def drifting(ctx, task):
    return ctx.call("search", city=str(os.getpid()) + task["city"])
'''

POLICY = 'version = 1\n[[tools]]\nname = "search"\n[[tools]]\nname = "hold"\n[[tools]]\nname = "pay"\n'


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    name = "tl_first_hour_" + request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"city": "Oslo", "amount": 120}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRACELOCK_STORE", raising=False)
    yield {"module": name, "store": str(tmp_path / "store")}
    sys.modules.pop(name, None)


def run(work: dict[str, str], *extra: str, agent: str = "booking") -> Result:
    return invoke(
        "run", f"{work['module']}:{agent}", "--input", "task.json", "--policy", "policy.toml",
        "--store", work["store"], *extra,
    )


def test_run_ids_and_seeds(work: dict[str, str]) -> None:
    one, two = (json.loads(run(work, "--json").stdout) for _ in range(2))
    assert one["output"]["reference"] != two["output"]["reference"]
    seeded = [json.loads(run(work, "--seed", "trip-42", "--json").stdout) for _ in range(2)]
    assert seeded[0]["output"]["reference"] == seeded[1]["output"]["reference"]
    assert seeded[0]["seed"] == seeded[1]["seed"] != one["seed"]


def test_ctrl_c_leaves_the_run_for_recover_and_exits_130(work: dict[str, str]) -> None:
    Path("interrupt.flag").write_text("")
    interrupted = run(work, "--run-id", "trip-1")
    assert interrupted.exit_code == 130
    assert "run trip-1 is left unfinished (running)" in interrupted.stderr
    assert "`tracelock recover` continues it" in interrupted.stderr and "Aborted" not in interrupted.output
    Path("interrupt.flag").unlink()
    recovered = invoke("recover", "--store", work["store"], "--json")
    assert recovered.exit_code == 0, recovered.output
    assert json.loads(invoke("retrieve", "trip-1", "--store", work["store"], "--json").stdout)["status"] == "completed"


def test_without_a_policy_the_deny_all_policy_is_named(work: dict[str, str]) -> None:
    assert "deny-all" in invoke("run", "--help").stdout
    denied = invoke("run", f"{work['module']}:booking", "--input", "task.json", "--store", work["store"])
    assert denied.exit_code == 1
    assert "note: no --policy was given, so the deny-all policy applied" in denied.stdout


def test_a_duplicate_run_id_says_how_to_continue_with_the_cli(work: dict[str, str]) -> None:
    assert run(work, "--run-id", "trip-2").exit_code == 0
    again = run(work, "--run-id", "trip-2", "--json")
    assert again.exit_code == 2
    error = json.loads(again.stdout)["error"]
    assert error["code"] == "RUN_ALREADY_EXISTS"
    assert "tracelock fork trip-2" in error["message"] and "resume()" not in error["message"]


@pytest.mark.parametrize(
    "args",
    [("show", "--json"), ("run", "x:y", "--bogus", "--json"), ("fork", "r", "--at", "-1", "--json")],
    ids=["missing-argument", "unknown-option", "bad-value"],
)
def test_clicks_usage_errors_honour_json(args: tuple[str, ...]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False and document["error"]["code"] == "USAGE_ERROR"


def test_a_postgresql_url_names_the_missing_driver(tmp_path: Path) -> None:
    # psycopg is installed here: the import is blocked to see what a user without it sees.
    script = (
        "import sys; sys.modules['psycopg'] = None; from tracelock.cli.main import main; "
        "sys.argv = ['tracelock', 'log', '--store', 'postgresql://u@localhost:1/db', '--json']; main()"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "STORE_DRIVER_MISSING" and "tracelock[postgres]" in error["message"]
    assert not (tmp_path / "postgresql:").exists()


def test_show_and_run_show_the_traceback(work: dict[str, str]) -> None:
    failed = run(work, "--run-id", "boom", "--json", agent="raising")
    assert failed.exit_code == 1
    assert "ValueError: agent fell over" in json.loads(failed.stdout)["traceback"]
    text = invoke("show", "boom", "--store", work["store"])
    assert "traceback of the agent: ValueError" in text.stdout and 'raise ValueError("agent fell over")' in text.stdout
    entries = json.loads(invoke("show", "boom", "--store", work["store"], "--json").stdout)["entries"]
    assert any("in raising" in entry.get("traceback", "") for entry in entries)


def test_text_output_prints_values_as_json(work: dict[str, str]) -> None:
    text = run(work, "--run-id", "trip-3").stdout
    assert '"open": true' in text and '"note": null' in text and '"hotel": "H1"' in text
    assert "True" not in text and "None" not in text
    shown = invoke("show", "trip-3", "--payloads", "--store", work["store"]).stdout
    assert '"open": true' in shown and "'open'" not in shown


def test_fork_lists_live_effects_and_needs_consent_for_irreversible_ones(work: dict[str, str]) -> None:
    assert run(work, "--run-id", "paid").exit_code == 0
    refused = invoke("fork", "paid", "--at", "1", "--store", work["store"])
    assert refused.exit_code == 2
    assert "step 3 tool pay (irreversible)" in refused.stderr and "FORK_IRREVERSIBLE_NOT_ALLOWED" in refused.stderr
    assert [line.split()[0] for line in invoke("log", "--store", work["store"]).stdout.splitlines()[1:]] == ["paid"]
    allowed = invoke("fork", "paid", "--at", "1", "--allow-irreversible", "--store", work["store"], "--json")
    assert allowed.exit_code == 0, allowed.output
    live = json.loads(allowed.stdout)["live"]
    assert [(e["step"], e["name"], e["class"]) for e in live] == [
        (1, "hold", "idempotent"), (2, "uuid", "read_only"), (3, "pay", "irreversible")
    ]
    past = invoke("fork", "paid", "--at", "9", "--store", work["store"], "--json")
    assert past.exit_code == 2 and json.loads(past.stdout)["error"]["code"] == "FORK_POINT_OUT_OF_RANGE"


def test_drift_does_not_flag_echoed_keys_and_names_the_tool(work: dict[str, str]) -> None:
    steady = invoke("drift", f"{work['module']}:booking", "--input", "task.json", "--policy", "policy.toml",
                    "--n", "2", "--in-process", "--json")
    assert steady.exit_code == 0, steady.output
    # In processes, each attempt has its own pid: the search argument drifts.
    drifting = invoke("drift", f"{work['module']}:drifting", "--input", "task.json", "--policy", "policy.toml",
                      "--n", "2", "--seed", "s")
    assert drifting.exit_code == 1
    assert "at step 0 (args), tool search (read_only)" in drifting.stdout and "/args/city" in drifting.stdout


def test_the_readme_install_section_names_real_extras() -> None:
    import re
    import tomllib

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"/path/to/tracelock\[([a-z]+)\]", install))
    extras = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert named and named <= set(extras)
    assert ".venv/bin/tracelock" in readme.split("## Install", 1)[0]
