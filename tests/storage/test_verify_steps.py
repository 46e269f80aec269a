"""A run's steps are one sequence, and store verification enforces it (docs/spec.md 3.9).

Each broken run is the journal of a real run appended again through the store API with its
entries changed as a faulty writer changes them (``step_runs``): a second caller's intent and
result of the refund step, a skipped step number, a result without its intent. Every one
fails ``verify_store``, ``verify_run``, ``tracelock verify --store`` and ``tracelock verify
RUN`` with ``JOURNAL_STEP_SEQUENCE_BROKEN`` (exit 1), on a directory store and on PostgreSQL;
the unchanged copy passes all of them.
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
from tracelock.storage.open import open_store
from tracelock.storage.verify import verify_run, verify_store

CODE = "JOURNAL_STEP_SEQUENCE_BROKEN"

BROKEN: dict[str, tuple[Callable[[list[Item]], list[Item]], str]] = {
    "duplicated-step": (step_runs.racing_second_caller, "step 4 is recorded twice: a second effect.intent"),
    "skipped-step": (step_runs.skipped_step, "but not step 4"),
    "result-without-intent": (step_runs.result_without_intent, "effect.result of step 4"),
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DirectoryStore]:
    store = step_runs.record(tmp_path_factory.mktemp("recorded") / "store")
    yield store
    store.close()


def build(recorded: DirectoryStore, location: str, change: Callable[[list[Item]], list[Item]]) -> str:
    with open_store(location, clock=step_runs.TickClock()) as store:
        step_runs.copy_journal(recorded, store, change)
    return location


def cli_verify(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["verify", *args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_the_unchanged_copy_verifies(recorded: DirectoryStore, location: str) -> None:
    build(recorded, location, step_runs.unchanged)
    with open_store(location, read_only=True) as store:
        assert verify_store(store).ok and verify_run(store, RUN).ok
    code, report = cli_verify("--store", location)
    assert code == 0 and report["ok"], report
    code, report = cli_verify(RUN, "--store", location)
    assert code == 0 and report["ok"] and report["fingerprint"]["status"] == "match", report


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_run_that_breaks_its_step_sequence_fails_every_store_verifier(
    recorded: DirectoryStore, location: str, case: str
) -> None:
    change, said = BROKEN[case]
    build(recorded, location, change)
    with open_store(location, read_only=True) as store:
        for report in (verify_store(store), verify_run(store, RUN)):
            assert report.issue is not None and report.issue.code == CODE and report.issue.run == RUN, report
            assert said in report.issue.message
    for args in (("--store", location), (RUN, "--store", location)):
        code, report = cli_verify(*args)
        assert code == 1, report
        assert not report["ok"] and report["issue"]["code"] == CODE and report["issue"]["run"] == RUN, report


def test_the_text_report_names_the_code_and_the_run(recorded: DirectoryStore, tmp_path: Path) -> None:
    location = build(recorded, str(tmp_path / "store"), step_runs.racing_second_caller)
    result = CliRunner().invoke(cli, ["verify", "--store", location], catch_exceptions=False)
    assert result.exit_code == 1
    assert f"[{CODE}]" in result.output and f"run {RUN}" in result.output and "Traceback" not in result.output


def test_the_racing_callers_entries_are_the_only_difference(recorded: DirectoryStore, tmp_path: Path) -> None:
    """The broken journal is the recorded one plus the second caller's two entries: the rule,
    not a damaged chain, is what fails it."""
    location = build(recorded, str(tmp_path / "store"), step_runs.racing_second_caller)
    with DirectoryStore(location, read_only=True) as store:
        original = [(entry.kind, entry.payload) for entry in recorded.entries(RUN)]
        refund = [item for item in original if item[0].startswith("effect.") and recorded.get_payload(item[1])["step"] == step_runs.REFUND_STEP]
        assert [kind for kind, _ in refund] == ["effect.intent", "effect.result"]
        at = original.index(refund[1]) + 1
        assert [(entry.kind, entry.payload) for entry in store.entries(RUN)] == [*original[:at], *refund, *original[at:]]
        chain_only = verify_store(store, steps=False)
        assert chain_only.ok, chain_only.to_dict()
