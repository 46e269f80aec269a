"""Verification tells the truth about damage the synced mark proves (docs/spec.md 3.4, 3.5).

A journal whose data ends before its synced mark (``journal.synced``) lost acknowledged
records: cut inside its last record or at a record boundary, or its last block zeroed.
``verify --store`` fails with ``JOURNAL_CORRUPT`` (exit 1), the code ``recover`` refuses the
store with (exit 2), never "OK" with a note about an unacknowledged write; ``log`` and
``show`` warn that the store is damaged and mark the status of a run that had not ended
before the damage as uncertain, instead of showing an acknowledged, completed run as
``running``. Each damage gives the same code with ``index.sqlite`` and without it. A torn
last record past the mark (a write no one acknowledged) still verifies, with its note.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tracelock import Runtime
from tracelock.cli.main import cli
from tracelock.storage.directory.fileio import OS_FILES
from tracelock.storage.directory.synced_mark import SyncedMark

RUNS = 8
LAST = f"r{RUNS - 1}"
BLOCK = 4096


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def synced_mark(store: Path) -> int:
    mark = SyncedMark.open(OS_FILES, store, write=False)
    assert mark is not None
    try:
        value = mark.read()
    finally:
        mark.close()
    assert value is not None
    return value


POLICY = {"version": 1, "tools": [{"name": "note"}]}


def _agent(ctx: Any, input: Any) -> Any:
    return ctx.call("note", text=input)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs r0..r7, every one completed and acknowledged: the mark covers the whole journal."""
    path = tmp_path_factory.mktemp("damage") / "store"
    with Runtime(path, POLICY) as runtime:

        @runtime.tool(side_effect="read_only")
        def note(text: str) -> str:
            return text.upper()

        for number in range(RUNS):
            assert runtime.run(_agent, f"n{number} " + "x" * 300, run_id=f"r{number}").status == "completed"
    journal = (path / "journal.log").read_bytes()
    assert synced_mark(path) == len(journal) > 2 * BLOCK
    return path


@pytest.fixture
def store(recorded: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(recorded, copy, ignore=shutil.ignore_patterns("lock"))
    return copy


def cut_inside_the_last_record(journal: Path) -> None:
    data = journal.read_bytes()
    journal.write_bytes(data[:-20])


def cut_at_a_record_boundary(journal: Path) -> None:
    """The last record (r7's run.end, acknowledged) removed whole: the rest is valid."""
    data = journal.read_bytes()
    journal.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])


def zero_the_last_block(journal: Path) -> None:
    data = journal.read_bytes()
    start = (len(data) - 1) // BLOCK * BLOCK
    journal.write_bytes(data[:start] + b"\0" * (len(data) - start))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "cut inside the last record": cut_inside_the_last_record,
    "cut at a record boundary": cut_at_a_record_boundary,
    "last block zeroed": zero_the_last_block,
}


def _json(result: Result) -> Any:
    return json.loads(result.stdout)


@pytest.mark.parametrize("index", [True, False], ids=["with-index", "without-index"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_journal_ending_before_its_synced_mark_is_corrupt(store: Path, damage: str, index: bool) -> None:
    journal = store / "journal.log"
    DAMAGE[damage](journal)
    if not index:
        (store / "index.sqlite").unlink()
    damaged = journal.read_bytes()

    result = invoke("verify", "--store", store, "--json")
    assert result.exit_code == 1, result.output
    report = _json(result)
    assert report["ok"] is False and report["issue"]["code"] == "JOURNAL_CORRUPT"
    assert "synced" in report["issue"]["message"]
    assert not any("unacknowledged" in note for note in report["notes"])
    text = invoke("verify", "--store", store)
    assert text.exit_code == 1 and "FAILED: store: [JOURNAL_CORRUPT]" in text.stdout
    assert "OK" not in text.stdout.split("\n")[0]

    # log: a warning, and the runs that had not ended before the damage are marked.
    result = invoke("log", "--store", store, "--json")
    assert result.exit_code == 0, result.output
    listing = _json(result)
    assert listing["damage"]["code"] == "JOURNAL_CORRUPT"
    assert "warning: [JOURNAL_CORRUPT] the store is damaged" in result.stderr
    runs = {run["run"]: run for run in listing["runs"]}
    for run in runs.values():
        assert run.get("status_uncertain", False) == (run["status"] != "completed"), run
    text = invoke("log", "--store", store)
    assert "warning: [JOURNAL_CORRUPT]" in text.stderr
    assert " running " not in text.stdout

    # show: the same warning, for any run.
    result = invoke("show", "r0", "--store", store, "--json")
    assert result.exit_code == 0, result.output
    assert _json(result)["damage"]["code"] == "JOURNAL_CORRUPT"
    assert "warning: [JOURNAL_CORRUPT]" in invoke("show", "r0", "--store", store).stderr

    # recover refuses the store with the same code, and nothing was cut or repaired.
    result = invoke("recover", "--store", store, "--json")
    assert result.exit_code == 2, result.output
    assert _json(result)["error"]["code"] == "JOURNAL_CORRUPT"
    assert journal.read_bytes() == damaged
    assert not (store / "quarantine").exists()


def test_the_completed_run_the_cut_removed_the_end_of_is_not_shown_as_running(store: Path) -> None:
    cut_at_a_record_boundary(store / "journal.log")
    listing = _json(invoke("log", "--store", store, "--json"))
    last = next(run for run in listing["runs"] if run["run"] == LAST)
    assert last["status"] == "running" and last["status_uncertain"] is True
    assert all("status_uncertain" not in run for run in listing["runs"] if run["run"] != LAST)
    text = invoke("log", "--store", store)
    assert f"{LAST} running? " in " ".join(text.stdout.split())
    result = invoke("show", LAST, "--store", store, "--json")
    assert result.exit_code == 0 and _json(result)["run"]["status_uncertain"] is True
    text = invoke("show", LAST, "--store", store)
    assert text.stdout.startswith(f"run {LAST}  status=running?")
    assert "warning: [JOURNAL_CORRUPT] the store is damaged" in text.stderr


@pytest.mark.parametrize("index", [True, False], ids=["with-index", "without-index"])
def test_an_incomplete_record_that_starts_before_the_mark_is_corrupt(store: Path, index: bool) -> None:
    """The data reaches past the mark, but its last record began before it: a crash never
    takes the line feed of a synced record away."""
    journal = store / "journal.log"
    data = journal.read_bytes()
    journal.write_bytes(data[:-1] + b"x" * 40)
    if not index:
        (store / "index.sqlite").unlink()
    result = invoke("verify", "--store", store, "--json")
    assert result.exit_code == 1 and _json(result)["issue"]["code"] == "JOURNAL_CORRUPT", result.output
    result = invoke("recover", "--store", store, "--json")
    assert result.exit_code == 2 and _json(result)["error"]["code"] == "JOURNAL_CORRUPT", result.output


def test_a_zeroed_block_inside_the_data_is_the_same_damage_with_or_without_the_index(store: Path, tmp_path: Path) -> None:
    """A block lost below the mark, inside what the index covers: the journal is damaged,
    the index does not lie. Every command that meets the damage says JOURNAL_CORRUPT, with
    the index and without it (with it, the reads that reach the block said
    STORE_INDEX_TAMPERED)."""
    journal = store / "journal.log"
    data = bytearray(journal.read_bytes())
    start = (len(data) // BLOCK - 1) * BLOCK
    data[start : start + BLOCK] = b"\0" * BLOCK
    journal.write_bytes(bytes(data))
    without = tmp_path / "without-index"
    shutil.copytree(store, without)
    (without / "index.sqlite").unlink()

    # With the index, the open reads only the newest records; a read of the block meets it.
    codes = set()
    for number in range(RUNS):
        result = invoke("show", f"r{number}", "--store", store, "--json")
        if result.exit_code:
            assert result.exit_code == 2, result.output
            codes.add(_json(result)["error"]["code"])
    assert codes == {"JOURNAL_CORRUPT"}
    # Without it, the open reads the whole journal and stops at the block: log warns.
    result = invoke("log", "--store", without, "--json")
    assert result.exit_code == 0 and _json(result)["damage"]["code"] == "JOURNAL_CORRUPT"

    verified = [invoke("verify", "--store", path, "--json") for path in (store, without)]
    assert [result.exit_code for result in verified] == [1, 1]
    assert _json(verified[0])["issue"]["code"] == _json(verified[1])["issue"]["code"]
    for path in (store, without):
        result = invoke("recover", "--store", path, "--json")
        assert result.exit_code == 2, result.output
        assert _json(result)["error"]["code"] == "JOURNAL_CORRUPT"


def test_the_index_is_blamed_only_when_the_journal_is_sound(store: Path) -> None:
    """An index whose end is moved into a record, over a sound journal, is still reported
    as tampered (the journal is judged first, and passes)."""
    import sqlite3

    db = sqlite3.connect(store / "index.sqlite")
    with db:
        end = int(db.execute("SELECT value FROM meta WHERE key = 'journal_end'").fetchone()[0])
        db.execute("UPDATE meta SET value = ? WHERE key = 'journal_end'", (str(end - 5),))
    db.close()
    result = invoke("recover", "--store", store, "--json")
    assert result.exit_code == 2 and _json(result)["error"]["code"] == "STORE_INDEX_TAMPERED", result.output


def test_a_torn_write_past_the_mark_still_verifies(store: Path) -> None:
    """What a crash leaves (a last record without its line feed, after every synced byte) is
    no damage: verify passes with its note, log and show do not warn."""
    journal = store / "journal.log"
    with journal.open("ab") as handle:
        handle.write(b'{"i":0,"kind":"run.st')
    result = invoke("verify", "--store", store, "--json")
    assert result.exit_code == 0, result.output
    report = _json(result)
    assert report["ok"] is True and any("unacknowledged write" in note for note in report["notes"])
    result = invoke("log", "--store", store, "--json")
    assert _json(result)["damage"] is None and "warning" not in result.stderr
    assert all("status_uncertain" not in run for run in _json(result)["runs"])
