"""The checkpoint history of a store: numbering, consistency between checkpoints, refusal to
sign a rewritten journal, and the runtime's checkpoint-on-completion hook."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from evidence_helpers import ORIGIN, jcs, log_key, record_support_runs

from tracelock.core.merkle import verify_consistency
from tracelock.evidence.checkpoint import CheckpointOriginError, open_checkpoint
from tracelock.evidence.history import (
    Checkpointer,
    CheckpointHistory,
    CheckpointHistoryError,
    CheckpointInconsistentError,
    CheckpointNotFoundError,
    SigningKey,
)
from tracelock.evidence.note import NoteVerifier
from tracelock.storage.directory import DirectoryStore


def _key() -> SigningKey:
    return SigningKey(log_key(), ORIGIN)


def test_checkpoints_are_numbered_signed_and_proved_consistent(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    history = CheckpointHistory(store_dir)
    with DirectoryStore(store_dir) as store:
        with pytest.raises(CheckpointNotFoundError):
            history.get()
        for n in range(3):
            store.append("run-1", "effect", payload={"n": n})
        first, created = history.sign(store, _key())
        assert created and first.number == 1 and first.size == 3
        again, created = history.sign(store, _key())
        assert not created and again == first
        for n in range(5):
            store.append("run-1", "effect", payload={"n": 10 + n})
        second, created = history.sign(store, _key())
        assert created and second.number == 2 and second.size == 8
        assert second.root == store.tree_root(8)
    verifier = NoteVerifier(ORIGIN, log_key().public_key)
    for stored in (first, second):
        opened = open_checkpoint(stored.note, [verifier], origin=ORIGIN)
        assert opened.checkpoint == stored.checkpoint
    proof = history.consistency(2)
    assert proof is not None and proof["from"]["size"] == 3 and proof["to"]["size"] == 8
    verify_consistency(3, 8, [bytes.fromhex(p) for p in proof["proof"]], first.root, second.root)
    assert history.consistency(1) is None
    files = sorted(p.name for p in (store_dir / "checkpoints").iterdir())
    assert files == ["00000001.note", "00000002.consistency.json", "00000002.note", "index.jsonl", "lock"]
    index = history.index()
    assert [line["number"] for line in index] == [1, 2]
    assert index[1]["vkeys"] == [verifier.vkey] and index[1]["size"] == 8
    # The index is a cache: rebuilt from the notes when lost.
    (store_dir / "checkpoints" / "index.jsonl").unlink()
    assert [line["number"] for line in history.index()] == [1, 2]


def test_a_history_is_one_log(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path / "store") as store:
        store.append("run-1", "effect", payload=1)
        history = CheckpointHistory(tmp_path / "store")
        history.sign(store, _key())
        with pytest.raises(CheckpointOriginError):
            history.sign(store, _key(), origin="example.org/other")
        # The origin of the first checkpoint is kept by default, whatever the key's name.
        stored, _ = history.sign(store, SigningKey(log_key(), "another-name"))
        assert stored.origin == ORIGIN


def test_a_gap_in_the_history_is_reported(tmp_path: Path) -> None:
    with DirectoryStore(tmp_path / "store") as store:
        history = CheckpointHistory(tmp_path / "store")
        for n in range(3):
            store.append("run-1", "effect", payload=n)
            history.sign(store, _key())
    (tmp_path / "store" / "checkpoints" / "00000002.note").unlink()
    with pytest.raises(CheckpointHistoryError):
        history.latest()


def _rewrite_first_entry(store_dir: Path) -> None:
    """Rewrite the journal consistently (new ts on the first entry, every later hash and
    link recomputed), and drop the caches, as someone rewriting history would."""
    journal = store_dir / "journal.log"
    heads: dict[str, str] = {}
    out = []
    first = True
    for line in journal.read_bytes().splitlines():
        if not line.startswith(b"{"):
            out.append(line)
            continue
        doc = json.loads(line)
        if first:
            doc["ts"] += 1
            first = False
        doc["prev"] = heads.get(doc["run"]) if doc["i"] else None
        new = jcs(doc)
        heads[doc["run"]] = hashlib.sha256(new).hexdigest()
        out.append(new)
    journal.write_bytes(b"".join(line + b"\n" for line in out))
    (store_dir / "index.sqlite").unlink()
    shutil.rmtree(store_dir / "merkle", ignore_errors=True)


def test_refuses_to_sign_a_rewritten_or_truncated_journal(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir) as store:
        for n in range(6):
            store.append("run-1", "effect", payload={"n": n})
        CheckpointHistory(store_dir).sign(store, _key())
    _rewrite_first_entry(store_dir)
    with DirectoryStore(store_dir) as store:
        store.append("run-1", "effect", payload="more")
        with pytest.raises(CheckpointInconsistentError) as caught:
            CheckpointHistory(store_dir).sign(store, _key())
    assert "rewritten" in caught.value.message
    assert len(CheckpointHistory(store_dir).numbers()) == 1

    truncated = tmp_path / "truncated"
    with DirectoryStore(truncated) as store:
        for n in range(4):
            store.append("run-1", "effect", payload={"n": n})
        CheckpointHistory(truncated).sign(store, _key())
    data = (truncated / "journal.log").read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    (truncated / "journal.log").write_bytes(data[:cut])
    (truncated / "index.sqlite").unlink()
    shutil.rmtree(truncated / "merkle", ignore_errors=True)
    (truncated / "journal.synced").unlink()  # else the store itself refuses: synced bytes are gone
    with DirectoryStore(truncated) as store, pytest.raises(CheckpointInconsistentError) as caught:
        CheckpointHistory(truncated).sign(store, _key())
    assert "removed" in caught.value.message


def test_the_runtime_checkpoints_every_run_on_completion(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    checkpointer = Checkpointer(_key())
    record_support_runs(store_dir, ("run-1", "run-2", "run-3"), checkpointer=checkpointer)
    history = CheckpointHistory(store_dir)
    assert history.numbers() == [1, 2, 3]
    with DirectoryStore(store_dir, read_only=True) as store:
        assert history.get().size == store.tree_size()
        for number in (1, 2, 3):
            stored = history.load(number)
            # Each checkpoint ends exactly at a run's run.end.
            assert store.entry_at(stored.size - 1).kind == "run.end"
            assert store.tree_root(stored.size) == stored.root
    for number in (2, 3):
        proof = history.consistency(number)
        assert proof is not None
        older, newer = history.load(number - 1), history.load(number)
        verify_consistency(
            older.size, newer.size, [bytes.fromhex(p) for p in proof["proof"]], older.root, newer.root
        )
    assert checkpointer.last == history.load(3)


def test_a_checkpointer_takes_a_key_file(tmp_path: Path) -> None:
    from tracelock.evidence.keys import write_private_key

    key_path = tmp_path / "log.key"
    write_private_key(key_path, log_key())
    (tmp_path / "log.vkey").write_text(NoteVerifier("from-vkey", log_key().public_key).vkey + "\n")
    with DirectoryStore(tmp_path / "store") as store:
        store.append("run-1", "effect", payload=1)
        stored = Checkpointer(key_path)(store)
    assert stored.origin == "from-vkey"
