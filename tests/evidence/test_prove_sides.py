"""``tracelock prove`` says which side is wrong when the store's tree does not give a
checkpoint's root: the Merkle node files (a cache that was altered) or the journal
(rewritten or truncated since the checkpoint was signed)."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from evidence_helpers import (
    ORIGIN,
    build_store,
    journal_records,
    log_key,
    rewrite_chain,
    write_journal_records,
)

from tracelock.cli.main import cli
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.storage.directory import DirectoryStore


def prove(store: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    runner = CliRunner()
    result = runner.invoke(
        cli, ["prove", *args, "--store", str(store), "--json"], catch_exceptions=False
    )
    text = runner.invoke(cli, ["prove", *args, "--store", str(store)], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout), text.stdout


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prove") / "store"
    build_store(path, redact_llm_args=False)
    with DirectoryStore(path) as store:  # 40 entries: stored level-4 nodes
        for n in range(40 - store.size()):
            store.append("filler", "effect" if n else "run.start", payload={"n": n})
        CheckpointHistory(path).sign(store, SigningKey(log_key(), ORIGIN))
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    return copy


def tamper_node_files(store: Path) -> None:
    """Flip the stored level-5 node (entries 0-31, part of the root at size 40) and recompute
    the header's digest: well formed, wrong."""
    merkle = store / "merkle"
    level5 = bytearray((merkle / "level-05.bin").read_bytes())
    level5[0] ^= 1
    (merkle / "level-05.bin").write_bytes(bytes(level5))
    magic, version, lowest, size, _ = struct.unpack(">8sIIQ32s", (merkle / "head").read_bytes())
    digest = hashlib.sha256(b"tracelock merkle head v1" + size.to_bytes(8, "big"))
    for level in range(4, size.bit_length()):
        count = size >> level
        nodes = (merkle / f"level-{level:02d}.bin").read_bytes()
        digest.update(
            bytes([level]) + count.to_bytes(8, "big") + nodes[(count - 1) * 32 : count * 32]
        )
    (merkle / "head").write_bytes(
        struct.pack(">8sIIQ32s", magic, version, lowest, size, digest.digest())
    )


def test_altered_node_files_are_named_as_the_wrong_side(store: Path) -> None:
    assert prove(store, "run-a")[0] == 0
    tamper_node_files(store)
    code, doc, text = prove(store, "run-a")
    assert code == 1
    assert doc["wrong"] == "merkle_cache"
    assert "node files" in doc["error"] and "altered" in doc["error"] and "merkle/" in doc["error"]
    assert "rewritten" not in doc["error"]
    assert "node files (a cache) were altered" in text


def test_a_rewritten_journal_is_named_as_the_wrong_side(store: Path) -> None:
    rewrite_chain(store)
    shutil.rmtree(store / "merkle")  # rebuilt from the rewritten journal: agrees with it
    (store / "index.sqlite").unlink()
    code, doc, text = prove(store, "run-a")
    assert code == 1
    assert doc["wrong"] == "journal"
    assert "rewritten" in doc["error"] and "node files" not in doc["error"]
    assert "journal does not match checkpoint 2" in text


def test_a_truncated_journal_is_named_as_the_wrong_side(store: Path) -> None:
    records = journal_records(store)
    entries = [k for k, r in enumerate(records) if r.startswith(b"{")]
    write_journal_records(store, records[: entries[-3]])
    shutil.rmtree(store / "merkle")
    (store / "index.sqlite").unlink()
    (store / "journal.synced").unlink()
    code, doc, _ = prove(store, "run-a")
    assert code == 1
    assert doc["wrong"] == "journal" and "truncated" in doc["error"]
