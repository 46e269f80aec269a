"""Drift across processes (issue 17, item 5): attempts in fresh interpreters, each with a
PYTHONHASHSEED derived from its attempt number, see drift that one process cannot (the
iteration order of a set of strings); `--in-process` keeps the old mode."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.drift_processes import DriftAttemptError, process_attempt
from tracelock.cli.main import cli
from tracelock.runtime.replay.drift import compare_attempts, hash_seed

MODULE = '''
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()


@kit.tool(timeout=None)
def label(names: list) -> int:
    return len(names)


def tags(ctx, task):
    names = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
    return {"count": ctx.call("label", names=[name for name in names])}
'''
POLICY = 'version = 1\n[[tools]]\nname = "label"\n'


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = "tl_drift_processes_agents"
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "task.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def _drift(*args: Any) -> Result:
    return invoke("drift", *args, "--input", "task.json", "--policy", "policy.toml")


def test_set_order_drifts_only_across_processes(agents: str) -> None:
    same = _drift(f"{agents}:tags", "--n", "3", "--in-process", "--json")
    assert same.exit_code == 0, same.output
    document = json.loads(same.stdout)
    assert document["drifted"] is False and document["mode"] == "in-process"

    across = _drift(f"{agents}:tags", "--n", "2", "--json")
    assert across.exit_code == 1, across.output
    document = json.loads(across.stdout)
    assert document["mode"] == "processes" and document["hash_seeds"] == [1, 2]
    drift = document["drift"]
    assert drift["component"] == "effects" and drift["step"] == 0
    assert drift["kind"] == "argument" and drift["field"] == "args"
    assert drift["diff"] and all(change["path"].startswith("/args/names/") for change in drift["diff"])

    # Every attempt's hash seed is fixed by its number: the same attempts, the same runs.
    again = json.loads(_drift(f"{agents}:tags", "--n", "2", "--json").stdout)
    assert again["fingerprints"] == document["fingerprints"]
    assert len(set(document["fingerprints"])) > 1


def test_the_text_report_names_component_step_and_field(agents: str) -> None:
    text = _drift(f"{agents}:tags", "--n", "2")
    assert text.exit_code == 1
    assert "DRIFT in run 1" in text.stdout and "effects at step 0 (args)" in text.stdout
    assert "PYTHONHASHSEED [1, 2]" in text.stdout and "/args/names/" in text.stdout


def test_an_attempt_that_records_no_run_is_an_error(agents: str) -> None:
    attempt = process_attempt(f"{agents}:absent", Path("task.json"), Path("policy.toml"))
    with pytest.raises(DriftAttemptError) as failed:
        compare_attempts(attempt, 2)
    assert failed.value.code == "DRIFT_ATTEMPT_FAILED"
    assert failed.value.details["hash_seed"] == 1 and failed.value.details["exit"] == 2
    assert _drift(f"{agents}:absent", "--n", "2").exit_code == 2


def test_hash_seeds_are_distinct_fixed_and_never_zero() -> None:
    seeds = [hash_seed(number) for number in range(1000)]
    assert len(set(seeds)) == 1000 and 0 not in seeds
    assert seeds == [hash_seed(number) for number in range(1000)]
    assert all(0 < seed <= 4_294_967_295 for seed in seeds)
    with pytest.raises(ValueError):
        hash_seed(-1)
