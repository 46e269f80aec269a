"""``tracelock checkpoint`` recomputes the root from the journal before it signs or answers
"current", and Merkle node files that disagree with the journal are reported as tampered
(``STORE_MERKLE_TAMPERED``) by the checkpoint command and by ``verify --store``, never
rebuilt silently."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from evidence_helpers import ORIGIN, build_store, log_key, rewrite_chain

from tracelock.cli.main import cli
from tracelock.evidence.history import (
    Checkpointer,
    CheckpointHistory,
    CheckpointInconsistentError,
    SigningKey,
)
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import MerkleTreeTamperedError


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recheck")
    path = root / "store"
    build_store(path, redact_llm_args=False)
    with DirectoryStore(path) as store:  # 40 entries: two stored level-4 nodes
        for n in range(40 - store.size()):
            store.append("filler", "effect" if n else "run.start", payload={"n": n})
        CheckpointHistory(path).sign(store, SigningKey(log_key(), ORIGIN))
    (root / "log.key").write_bytes(log_key().to_pem())
    (root / "log.key").chmod(0o600)
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    shutil.copy(pristine.parent / "log.key", tmp_path / "log.key")
    return copy


def tamper_first_node(store: Path) -> None:
    """Replace stored level-4 node 0 and recompute the header's digest, as an attacker who
    read the (informative) layout would: the files are well formed, the node is wrong."""
    merkle = store / "merkle"
    level4 = bytearray((merkle / "level-04.bin").read_bytes())
    assert len(level4) >= 64
    level4[0] ^= 1
    (merkle / "level-04.bin").write_bytes(bytes(level4))
    head = (merkle / "head").read_bytes()
    magic, version, lowest, size, _ = struct.unpack(">8sIIQ32s", head)
    digest = hashlib.sha256(b"tracelock merkle head v1" + size.to_bytes(8, "big"))
    for level in range(4, size.bit_length()):
        count = size >> level
        nodes = (merkle / f"level-{level:02d}.bin").read_bytes()
        digest.update(bytes([level]) + count.to_bytes(8, "big") + nodes[(count - 1) * 32 : count * 32])
    (merkle / "head").write_bytes(struct.pack(">8sIIQ32s", magic, version, lowest, size, digest.digest()))


def test_checkpoint_does_not_call_a_rewritten_journal_current(store: Path) -> None:
    result = invoke("checkpoint", "--key", store.parent / "log.key", "--store", store, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["created"] is False
    rewrite_chain(store)
    result = invoke("checkpoint", "--key", store.parent / "log.key", "--store", store, "--json")
    assert result.exit_code == 2, result.output
    assert "current" not in result.stdout
    assert json.loads(result.stdout)["error"]["code"] == "EVIDENCE_CHECKPOINT_INCONSISTENT"
    with DirectoryStore(store) as handle, pytest.raises(CheckpointInconsistentError):
        CheckpointHistory(store).sign(handle, SigningKey(log_key(), ORIGIN))


def test_checkpoint_refuses_a_rewritten_prefix_after_growth(store: Path) -> None:
    rewrite_chain(store)
    with DirectoryStore(store) as handle:
        handle.append("later", "run.start", payload={"n": 1})
        with pytest.raises(CheckpointInconsistentError):
            CheckpointHistory(store).sign(handle, SigningKey(log_key(), ORIGIN))
        # The runtime's checkpointer does not re-read the journal unless asked to.
        with pytest.raises(CheckpointInconsistentError):
            Checkpointer(SigningKey(log_key(), ORIGIN), recheck=True)(handle)


def test_tampered_node_files_are_reported_not_rebuilt(store: Path) -> None:
    tamper_first_node(store)
    before = (store / "merkle" / "level-04.bin").read_bytes()
    result = invoke("verify", "--store", store, "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["issue"]["code"] == "STORE_MERKLE_TAMPERED"
    assert "node files were altered" in doc["issue"]["message"]
    assert doc["checkpoint"]["merkle_cache"] == "tampered"
    text = invoke("verify", "--store", store).stdout
    assert "[STORE_MERKLE_TAMPERED]" in text
    with DirectoryStore(store) as handle:
        handle.append("later", "run.start", payload={"n": 1})
        with pytest.raises(MerkleTreeTamperedError):
            CheckpointHistory(store).sign(handle, SigningKey(log_key(), ORIGIN))
    assert (store / "merkle" / "level-04.bin").read_bytes()[: len(before)] == before
    # Deleting the cache is the remedy: it is rebuilt from the journal.
    shutil.rmtree(store / "merkle")
    assert invoke("verify", "--store", store).exit_code == 0
    with DirectoryStore(store) as handle:
        _, created = CheckpointHistory(store).sign(handle, SigningKey(log_key(), ORIGIN))
    assert created
