"""``tracelock verify --store`` judges the checkpoint history itself, not only each
checkpoint against the journal (docs/spec.md 8.1):

* with ``--key`` and no checkpoint, it reports that none exists
  (``EVIDENCE_CHECKPOINT_NOT_FOUND``, exit 1), never a traceback;
* a history whose sizes go backwards (a copy of checkpoint 1 inserted as number 3) fails
  (``EVIDENCE_CHECKPOINT_HISTORY``, exit 1), though every root matches the journal;
* the consistency proof stored with each checkpoint after the first is checked: one altered,
  missing, or naming another pair of checkpoints fails the same way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from evidence_helpers import ORIGIN, build_store, log_key

from tracelock.cli.main import cli
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.evidence.note import NoteVerifier
from tracelock.storage.directory import DirectoryStore

HISTORY = "EVIDENCE_CHECKPOINT_HISTORY"


def pinned_vkey() -> str:
    return NoteVerifier(ORIGIN, log_key().public_key).vkey


def verify(store: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    """Exit code and JSON document of ``verify --store``, and the text output's first line."""
    args = ["verify", "--store", str(store), *extra]
    document = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    text = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert text.exit_code == document.exit_code
    return document.exit_code, json.loads(document.stdout), text.stdout.split("\n")[0]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two support runs, checkpoint 1 over them, one more entry and checkpoint 2."""
    path = tmp_path_factory.mktemp("history") / "store"
    build_store(path, redact_llm_args=False)
    with DirectoryStore(path) as handle:
        handle.append("later", "run.start", payload={"n": 1}, meta={"status": "running"})
        CheckpointHistory(path).sign(handle, SigningKey(log_key(), ORIGIN))
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    return copy


def test_the_history_of_two_checkpoints_verifies(store: Path) -> None:
    code, document, first = verify(store, "--key", pinned_vkey())
    assert code == 0, document
    assert document["checkpoint"]["checked"] == [1, 2] and first.startswith("OK: store")


@pytest.mark.parametrize("with_key", [True, False], ids=["pinned", "integrity-only"])
def test_no_checkpoint_is_reported_as_none(store: Path, with_key: bool) -> None:
    shutil.rmtree(store / "checkpoints")
    code, document, first = verify(store, *(["--key", pinned_vkey()] if with_key else []))
    assert document["checkpoint"]["trust"] == "no_checkpoint" and document["checkpoint"]["newest"] is None
    if not with_key:  # nothing asked of a checkpoint: the chains pass
        assert code == 0 and document["ok"] is True
        return
    assert code == 1
    assert document["ok"] is False and document["issue"]["code"] == "EVIDENCE_CHECKPOINT_NOT_FOUND"
    assert "no checkpoint" in document["issue"]["message"]
    assert first.startswith("FAILED: store: [EVIDENCE_CHECKPOINT_NOT_FOUND]")


@pytest.mark.parametrize("with_key", [True, False], ids=["pinned", "integrity-only"])
def test_a_history_whose_sizes_go_backwards_fails(store: Path, with_key: bool) -> None:
    """Checkpoint 1 copied in as number 3: signed by the pinned key, its root the journal's
    root at its size, yet it rolls the log back."""
    folder = store / "checkpoints"
    shutil.copy(folder / "00000001.note", folder / "00000003.note")
    code, document, first = verify(store, *(["--key", pinned_vkey()] if with_key else []))
    assert code == 1, document
    assert document["issue"]["code"] == HISTORY
    assert "checkpoint 3" in document["issue"]["message"] and "fewer" in document["issue"]["message"]
    assert first.startswith(f"FAILED: store: [{HISTORY}]")


def _proof_file(store: Path) -> Path:
    return store / "checkpoints" / "00000002.consistency.json"


def _alter_a_node(store: Path) -> None:
    record = json.loads(_proof_file(store).read_text())
    assert record["proof"], "checkpoint 2's proof has nodes"
    node = record["proof"][0]
    record["proof"][0] = ("0" if node[0] != "0" else "1") + node[1:]
    _proof_file(store).write_text(json.dumps(record))


def _delete(store: Path) -> None:
    _proof_file(store).unlink()


def _name_another_pair(store: Path) -> None:
    record = json.loads(_proof_file(store).read_text())
    record["from"]["number"] = 2
    _proof_file(store).write_text(json.dumps(record))


def _garble(store: Path) -> None:
    _proof_file(store).write_text("not json")


@pytest.mark.parametrize(
    "alter",
    [_alter_a_node, _delete, _name_another_pair, _garble],
    ids=["node altered", "deleted", "another pair", "unreadable"],
)
def test_a_stored_consistency_proof_is_checked(store: Path, alter: Any) -> None:
    alter(store)
    for extra in ([], ["--key", pinned_vkey()]):
        code, document, first = verify(store, *extra)
        assert code == 1, document
        assert document["issue"]["code"] == HISTORY
        assert "consistency proof of checkpoint 2" in document["issue"]["message"] or (
            "consistency proof stored with checkpoint 2" in document["issue"]["message"]
        )
        assert first.startswith(f"FAILED: store: [{HISTORY}]")
