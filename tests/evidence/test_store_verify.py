"""``tracelock verify --store`` reads the store's signed checkpoints: a journal that
contradicts them (last entry changed or deleted, chain rewritten with correct hashes,
truncated at a record boundary) fails with exit 1, with the pinned key and without it, and
the output says which checkpoint was checked and with which key."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from evidence_helpers import (
    ORIGIN,
    build_store,
    evil_key,
    jcs,
    journal_records,
    log_key,
    rewrite_chain,
    write_journal_records,
)

from tracelock.cli.main import cli
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.evidence.note import NoteVerifier
from tracelock.storage.directory import DirectoryStore


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def pinned_vkey() -> str:
    return NoteVerifier(ORIGIN, log_key().public_key).vkey


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("storeverify") / "store"
    # No redaction: the last entry is then run-b's run.end, which no later entry commits to.
    build_store(path, redact_llm_args=False)
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    return copy


# -- the journal as an attacker edits it (bytes on disk, NUL free space dropped) -------------


def _entry_positions(records: list[bytes]) -> list[int]:
    return [k for k, r in enumerate(records) if r.startswith(b"{")]


def change_last_entry(store: Path) -> None:
    records = journal_records(store)
    last = _entry_positions(records)[-1]
    doc = json.loads(records[last])
    doc["ts"] += 1
    records[last] = jcs(doc)
    write_journal_records(store, records)


def delete_last_entry(store: Path) -> None:
    records = journal_records(store)
    del records[_entry_positions(records)[-1]]
    write_journal_records(store, records)


def truncate_at_boundary(store: Path) -> None:
    records = journal_records(store)
    write_journal_records(store, records[: _entry_positions(records)[-4] + 1])


TAMPERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "last entry changed": (change_last_entry, "EVIDENCE_CHECKPOINT_INCONSISTENT"),
    "last entry deleted": (delete_last_entry, "EVIDENCE_CHECKPOINT_TRUNCATED"),
    "chain rewritten with correct hashes": (rewrite_chain, "EVIDENCE_CHECKPOINT_INCONSISTENT"),
    "truncated at a record boundary": (truncate_at_boundary, "EVIDENCE_CHECKPOINT_TRUNCATED"),
}


def _verify(store: Path, *extra: str, as_json: bool) -> tuple[int, Any]:
    result = invoke("verify", "--store", store, *extra, *(["--json"] if as_json else []))
    return result.exit_code, json.loads(result.stdout) if as_json else result.stdout


@pytest.mark.parametrize("label", list(TAMPERS))
@pytest.mark.parametrize("with_key", [True, False], ids=["pinned", "integrity-only"])
def test_a_store_that_contradicts_its_checkpoint_fails(store: Path, label: str, with_key: bool) -> None:
    tamper, code = TAMPERS[label]
    tamper(store)
    key = ["--key", pinned_vkey()] if with_key else []
    exit_code, doc = _verify(store, *key, as_json=True)
    assert exit_code == 1, doc
    assert doc["ok"] is False and doc["issue"]["code"] == code
    assert "checkpoint 1" in doc["issue"]["message"]
    assert doc["checkpoint"]["trust"] == ("pinned_key" if with_key else "integrity_only")
    assert doc["checkpoint"]["newest"]["number"] == 1
    exit_code, text = _verify(store, *key, as_json=False)
    assert exit_code == 1
    assert f"FAILED: store: [{code}]" in text and "checkpoint 1" in text


def test_each_tamper_alone_still_passes_the_chain_rules(store: Path, tmp_path: Path) -> None:
    """The tamper classes above are exactly the ones only a checkpoint can tell: without the
    checkpoint history, the journal verifies."""
    for label, (tamper, _) in TAMPERS.items():
        copy = tmp_path / label.replace(" ", "-")
        shutil.copytree(store, copy)
        tamper(copy)
        shutil.rmtree(copy / "checkpoints")
        shutil.rmtree(copy / "merkle")  # built from the journal before the tamper
        (copy / "index.sqlite").unlink()  # so was this cache, which would contradict it
        exit_code, doc = _verify(copy, as_json=True)
        assert exit_code == 0, (label, doc)
        assert doc["checkpoint"]["trust"] == "no_checkpoint"


def test_an_untouched_store_says_which_checkpoint_and_key(store: Path) -> None:
    exit_code, doc = _verify(store, "--key", pinned_vkey(), as_json=True)
    assert exit_code == 0, doc
    cp = doc["checkpoint"]
    assert cp["trust"] == "pinned_key" and cp["checked"] == [1]
    assert [s["fingerprint"] for s in cp["signed_by"]] == [log_key().public_key.fingerprint()]
    assert cp["merkle_cache"] == "checked"
    _, text = _verify(store, "--key", pinned_vkey(), as_json=False)
    assert f"signed by pinned key {ORIGIN} {log_key().public_key.fingerprint()}" in text
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 0 and doc["checkpoint"]["trust"] == "integrity_only"
    _, text = _verify(store, as_json=False)
    assert "integrity only" in text
    assert invoke("verify", "run-a", "--key", pinned_vkey(), "--store", store).exit_code == 2
    shutil.rmtree(store / "checkpoints")
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 0 and doc["checkpoint"]["trust"] == "no_checkpoint"
    assert doc["checkpoint"]["newest"] is None
    _, text = _verify(store, as_json=False)
    assert "checkpoint: none present" in text


def test_a_journal_longer_than_its_checkpoint_passes_when_its_prefix_matches(store: Path) -> None:
    with DirectoryStore(store) as handle:
        handle.append("later", "run.start", payload={"n": 1}, meta={"status": "running"})
    exit_code, doc = _verify(store, "--key", pinned_vkey(), as_json=True)
    assert exit_code == 0, doc
    change_last_entry(store)  # the new entry: after the checkpoint, nothing signed covers it
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 0, doc
    rewrite_chain(store)  # inside the signed prefix
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 1 and doc["issue"]["code"] == "EVIDENCE_CHECKPOINT_INCONSISTENT"


def test_every_checkpoint_of_the_history_is_checked(store: Path) -> None:
    with DirectoryStore(store) as handle:
        handle.append("later", "run.start", payload={"n": 2}, meta={"status": "running"})
        CheckpointHistory(store).sign(handle, SigningKey(log_key(), ORIGIN))
    exit_code, doc = _verify(store, "--key", pinned_vkey(), as_json=True)
    assert exit_code == 0 and doc["checkpoint"]["checked"] == [1, 2]
    # Rewrite checkpoint 1 (not the newest) into a note over another root: its body no
    # longer matches the journal.
    note = (store / "checkpoints" / "00000001.note").read_text()
    lines = note.split("\n")
    lines[2] = "A" * 43 + "="
    (store / "checkpoints" / "00000001.note").write_text("\n".join(lines))
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 1 and doc["issue"]["code"] == "EVIDENCE_CHECKPOINT_INCONSISTENT"
    assert "checkpoint 1 " in doc["issue"]["message"]


def test_trust_needs_the_pinned_key(store: Path) -> None:
    other = NoteVerifier(ORIGIN, evil_key().public_key).vkey
    exit_code, doc = _verify(store, "--key", other, as_json=True)
    assert exit_code == 1 and doc["issue"]["code"] == "EVIDENCE_NOTE_UNTRUSTED"
    exit_code, doc = _verify(store, "--key", pinned_vkey(), "--origin", "elsewhere", as_json=True)
    assert exit_code == 1 and doc["issue"]["code"] == "EVIDENCE_CHECKPOINT_ORIGIN_MISMATCH"
    # A checkpoint re-signed by another key over the same body: integrity holds, trust not.
    history = CheckpointHistory(store)
    body = history.load(1).checkpoint
    from tracelock.evidence.checkpoint import sign_checkpoint
    from tracelock.evidence.note import NoteSigner

    (store / "checkpoints" / "00000001.note").write_text(
        sign_checkpoint(body, NoteSigner(ORIGIN, evil_key()))
    )
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 0 and doc["checkpoint"]["trust"] == "integrity_only"
    exit_code, doc = _verify(store, "--key", pinned_vkey(), as_json=True)
    assert exit_code == 1 and doc["issue"]["code"] == "EVIDENCE_NOTE_UNTRUSTED"


def test_an_altered_note_under_the_pinned_key_is_an_integrity_failure(store: Path) -> None:
    """Same size and root, one more (extension) line in the signed text: the roots match
    the journal, the pinned key's signature no longer does."""
    path = store / "checkpoints" / "00000001.note"
    body, _, signature = path.read_text().rpartition("\n\n")
    path.write_text(body + "\nextension\n\n" + signature)
    exit_code, doc = _verify(store, as_json=True)
    assert exit_code == 0, doc  # integrity only: the signature is not read
    exit_code, doc = _verify(store, "--key", pinned_vkey(), as_json=True)
    assert exit_code == 1 and doc["issue"]["code"] == "EVIDENCE_NOTE_SIGNATURE_INVALID"
    assert "checkpoint 1" in doc["issue"]["message"]


def test_a_run_restarted_after_its_end_breaks_the_chain(store: Path) -> None:
    """docs/spec.md 3.2 rule 4: an entry of an ended run fails verification even as a fresh
    chain (i 0, prev null), and the store's run count leaves out the admin chain."""
    (store / "index.sqlite").unlink()
    with DirectoryStore(store, read_only=True) as reader:
        runs = {info.run for info in reader.runs()}
    counted = invoke("verify", "--store", store, "--json")
    assert counted.exit_code == 0 and json.loads(counted.stdout)["runs"] == len(runs - {"tracelock:admin"})
    records = journal_records(store)
    entries = [json.loads(r) for r in records if r.startswith(b"{")]
    restart = {
        "v": 1, "seq": len(entries), "run": "run-a", "i": 0, "kind": "run.start",
        "meta": {"agent": "x", "status": "running"}, "payload": None, "prev": None, "ts": entries[-1]["ts"],
    }
    write_journal_records(store, [*records, jcs(restart)])
    (store / "index.sqlite").unlink(missing_ok=True)
    result = invoke("verify", "--store", store, "--json")
    assert result.exit_code == 1
    issue = json.loads(result.stdout)["issue"]
    assert issue["code"] == "JOURNAL_CHAIN_BROKEN" and "after its run.end" in issue["message"]
