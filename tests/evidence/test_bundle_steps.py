"""Bundle verification enforces a run's step sequence (docs/spec.md 3.9 and 8.3 check 9).

A store holding a run whose steps break the rule (``tests/storage/step_runs``: a racing second
caller's intent and result, a skipped number, a result without its intent) still gets its
checkpoint signed (the log is intact; the run is a recorded fact) and its bundle exported;
``tracelock verify BUNDLE`` then fails the bundle's integrity with check ``run.steps`` and
code ``JOURNAL_STEP_SEQUENCE_BROKEN`` (exit 1). The unchanged run's bundle is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.storage import step_runs
from tests.storage.step_runs import RUN, Item
from tracelock.cli.main import cli
from tracelock.storage.directory import DirectoryStore

CODE = "JOURNAL_STEP_SEQUENCE_BROKEN"
ORIGIN = "example.com/steps"


def invoke(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*map(str, args), "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DirectoryStore]:
    store = step_runs.record(tmp_path_factory.mktemp("recorded") / "store")
    yield store
    store.close()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    code, made = invoke("keys", "generate", "--out", tmp_path_factory.mktemp("keys"), "--name", ORIGIN)
    assert code == 0, made
    return {"private": Path(made["files"]["private_key"]), "public": Path(made["files"]["public_key"])}


def bundle_of(
    recorded: DirectoryStore, keys: dict[str, Path], tmp_path: Path, change: Callable[[list[Item]], list[Item]]
) -> Path:
    store = tmp_path / "store"
    with DirectoryStore(store, clock=step_runs.TickClock()) as handle:
        step_runs.copy_journal(recorded, handle, change)
    code, signed = invoke("checkpoint", "--key", keys["private"], "--store", store)
    assert code == 0, signed
    bundle = tmp_path / "bundle.zip"
    code, exported = invoke("export", RUN, "-o", bundle, "--store", store)
    assert code == 0, exported
    return bundle


def test_the_unchanged_runs_bundle_is_accepted(recorded: DirectoryStore, keys: dict[str, Path], tmp_path: Path) -> None:
    bundle = bundle_of(recorded, keys, tmp_path, step_runs.unchanged)
    code, report = invoke("verify", bundle, "--key", keys["public"])
    assert code == 0 and report["ok"], report
    assert report["runs"][0]["fingerprint_status"] == "match"


@pytest.mark.parametrize(
    "change",
    [step_runs.racing_second_caller, step_runs.skipped_step, step_runs.result_without_intent],
    ids=["duplicated-step", "skipped-step", "result-without-intent"],
)
def test_a_bundle_of_a_run_that_breaks_its_step_sequence_fails(
    recorded: DirectoryStore, keys: dict[str, Path], tmp_path: Path, change: Callable[[list[Item]], list[Item]]
) -> None:
    bundle = bundle_of(recorded, keys, tmp_path, change)
    code, report = invoke("verify", bundle, "--key", keys["public"])
    assert code == 1 and not report["integrity"]["ok"], report
    assert report["trust"]["ok"], report  # signed by the pinned key: the failure is the run's
    steps = [failure for failure in report["integrity"]["failures"] if failure["check"] == "run.steps"]
    assert len(steps) == 1, report["integrity"]["failures"]
    failure = steps[0]
    assert failure["code"] == CODE and failure["run"] == RUN and failure["file"] == "entries.jsonl"
    with DirectoryStore(tmp_path / "store", read_only=True) as store:
        named = next(entry for entry in store.entries(RUN) if entry.seq == failure["seq"])
    assert failure["i"] == named.i
