"""Shared helpers of the evidence tests: record real runs of the example support agent with a
fixed clock, sign checkpoints with fixed keys, export bundles, and play the attacker."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rfc8785

from tracelock.core import merkle as M
from tracelock.core.entry import parse_entry
from tracelock.evidence.bundle import BundleFiles, collect_bundle
from tracelock.evidence.checkpoint import Checkpoint, sign_checkpoint
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.note import NoteSigner
from tracelock.evidence.redaction import redact
from tracelock.evidence.verify import BundleReport, PinnedKey, verify_bundle
from tracelock.examples import support
from tracelock.runtime.runtime import Runtime
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.synced_mark import MARK_FILE, encode_mark

ORIGIN = "example.com/tracelock-test"
#: RFC 8032 section 7.1 TEST 1 secret: the "real" log key of the tests.
LOG_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
#: RFC 8032 section 7.1 TEST 2 secret: the attacker's key.
EVIL_SEED = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
TICKET = {"id": "T-1042", "text": "Hello, the keyboard from order A-1001 arrived broken. Refund?"}


def log_key() -> PrivateKey:
    return PrivateKey.from_seed(LOG_SEED)


def evil_key() -> PrivateKey:
    return PrivateKey.from_seed(EVIL_SEED)


def pinned(key: PrivateKey | None = None, name: str | None = ORIGIN) -> list[PinnedKey]:
    key = key or log_key()
    return [PinnedKey(key.public_key, name, "test")]


class FixedClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000

    def __call__(self) -> int:
        self.now += 7
        return self.now


def record_support_runs(
    store_dir: Path,
    run_ids: tuple[str, ...] = ("run-a", "run-b"),
    *,
    checkpointer: Callable[..., object] | None = None,
) -> None:
    """Record the example support agent once per run id, deterministically."""
    clock = FixedClock()
    store = DirectoryStore(store_dir, clock=clock, store_id=lambda: "evidence-test")
    try:
        ids = iter(run_ids)
        runtime = Runtime(
            store,
            support.POLICY_FILE,
            toolkits=(support.support,),
            sandbox=store_dir.parent / f"{store_dir.name}-sandbox",
            clock=clock,
            ids=lambda: next(ids),
            checkpointer=checkpointer,
        )
        with runtime:
            for _ in run_ids:
                result = runtime.run(support.agent, TICKET)
                assert result.status == "completed", result
    finally:
        store.close()


def build_store(store_dir: Path, *, redact_llm_args: bool = True, checkpoint: bool = True) -> None:
    """Two support runs, optionally a field redaction of the LLM prompt (shared by both runs
    through content addressing), and a checkpoint covering everything."""
    record_support_runs(store_dir)
    with DirectoryStore(store_dir) as store:
        if redact_llm_args:
            redact(store, "run-a", 0, fields=["args"], by="dpo@example.com", reason="GDPR erasure")
        if checkpoint:
            CheckpointHistory(store_dir).sign(store, SigningKey(log_key(), ORIGIN))


def bundle_files(store_dir: Path, runs: tuple[str, ...] = ("run-a", "run-b")) -> dict[str, bytes]:
    with DirectoryStore(store_dir, read_only=True) as store:
        history = CheckpointHistory(store_dir)
        latest = history.get()
        return collect_bundle(store, runs, latest, signer_vkeys=history.signer_vkeys(latest.number))


def verify_files(files: dict[str, bytes], pins: list[PinnedKey] | None = None, **kwargs: Any) -> BundleReport:
    return verify_bundle(BundleFiles("mutant", "dir", dict(files), []), pins if pins is not None else pinned(), **kwargs)


# ---------------------------------------------------------------------------------------
# The attacker: fixes everything that is not signed.


def jcs(value: Any) -> bytes:
    return bytes(rfc8785.dumps(value))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry_lines(files: dict[str, bytes]) -> list[bytes]:
    return files["entries.jsonl"].splitlines()


def proof_docs(files: dict[str, bytes]) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in files["proofs.jsonl"].splitlines()]


def set_entries(files: dict[str, bytes], lines: list[bytes], proofs: list[dict[str, Any]] | None = None) -> None:
    files["entries.jsonl"] = b"".join(line + b"\n" for line in lines)
    if proofs is not None:
        files["proofs.jsonl"] = b"".join(jcs(p) + b"\n" for p in proofs)


def fix_proof_labels(files: dict[str, bytes]) -> None:
    """Point each proof line at its (possibly altered) entry: seq and hash only, the path
    cannot be forged."""
    import json

    lines = entry_lines(files)
    proofs = proof_docs(files)
    for k, line in enumerate(lines[: len(proofs)]):
        try:
            doc = json.loads(line)
            proofs[k]["seq"] = doc["seq"]
        except (ValueError, KeyError, TypeError):
            pass
        proofs[k]["hash"] = sha(line)
    files["proofs.jsonl"] = b"".join(jcs(p) + b"\n" for p in proofs)


def drop_unreferenced_payloads(files: dict[str, bytes]) -> None:
    import json

    referenced = set()
    for line in entry_lines(files):
        try:
            payload = json.loads(line).get("payload")
        except ValueError:
            continue
        if payload:
            referenced.add(payload)
    for name in [n for n in files if n.startswith("payloads/")]:
        if name[len("payloads/") : -5] not in referenced:
            del files[name]


def refresh_manifest(files: dict[str, bytes], *, summaries: bool = True) -> None:
    """Rewrite the manifest so that it agrees with the files: its summaries (as a verifier
    derives them) and its file hashes."""
    import json

    manifest = json.loads(files["manifest.json"])
    if summaries:
        report = verify_files(files)
        manifest["runs"] = [run.summary() for run in report.runs]
        if report.checkpoint is not None:
            manifest["checkpoint"] = {
                k: report.checkpoint[k] for k in ("origin", "size", "root")
            }
        admin = [json.loads(line) for line in entry_lines(files) if b'"run":"tracelock:admin"' in line]
        manifest["policies"] = sorted(
            e["payload"] for e in admin if e["kind"] == "policy.register" and e["payload"]
        )
        redactions: dict[str, list[int]] = {}
        for e in admin:
            if e["kind"] == "payload.redact":
                redactions.setdefault(e["meta"]["payload"], []).append(e["seq"])
        referenced = set()
        for line in entry_lines(files):
            try:
                payload = json.loads(line).get("payload")
            except ValueError:
                continue
            if payload:
                referenced.add(payload)
        manifest["redacted"] = [
            {"payload": h, "redactions": redactions[h]}
            for h in sorted(referenced)
            if h in redactions and f"payloads/{h}.json" not in files
        ]
    manifest["files"] = [
        {"path": path, "sha256": sha(data), "size": len(data)}
        for path, data in sorted(files.items())
        if path != "manifest.json"
    ]
    files["manifest.json"] = jcs(manifest) + b"\n"


def rechain(files: dict[str, bytes], payload_map: dict[str, str] | None = None) -> list[bytes]:
    """Recompute prev links and hashes of every entry (after an edit), mapping old payload
    hashes to new ones; returns the new lines."""
    import json

    payload_map = payload_map or {}
    heads: dict[str, str] = {}
    closed: set[str] = set()
    out = []
    for line in entry_lines(files):
        doc = json.loads(line)
        if doc["payload"] in payload_map:
            doc["payload"] = payload_map[doc["payload"]]
        if doc.get("meta", {}).get("payload") in payload_map:
            doc["meta"]["payload"] = payload_map[doc["meta"]["payload"]]
        doc["prev"] = heads.get(doc["run"]) if doc["i"] else None
        new = jcs(doc)
        heads[doc["run"]] = sha(new)
        if doc["kind"] == "run.end":
            closed.add(doc["run"])
        out.append(new)
    return out


def reprove(files: dict[str, bytes], lines: list[bytes]) -> tuple[int, bytes]:
    """Build a new tree over ``lines`` (which must be every leaf 0..n-1) and new proofs."""
    leaves = [M.leaf_hash(line) for line in lines]
    size = len(leaves)
    assert [parse_entry(line).seq for line in lines] == list(range(size)), "need every leaf"
    proofs = [
        {"hash": sha(line), "proof": [p.hex() for p in M.inclusion_proof_from_leaves(k, leaves)], "seq": k}
        for k, line in enumerate(lines)
    ]
    set_entries(files, lines, proofs)
    return size, M.root(leaves)


def forge_note(files: dict[str, bytes], size: int, root: bytes, signer: NoteSigner | None) -> None:
    """A checkpoint note for (size, root): signed by ``signer``, or (None) carrying the
    original signature lines over the new body."""
    body = Checkpoint(ORIGIN, size, root)
    if signer is not None:
        files["checkpoint.note"] = sign_checkpoint(body, signer).encode()
        return
    old = files["checkpoint.note"].decode()
    signatures = old[old.rfind("\n\n") + 1 :]
    files["checkpoint.note"] = (body.to_body() + signatures).encode()


def small_order_vkey(name: str) -> tuple[bytes, str]:
    """The identity point (order 1), encoded as a public key, and its verifier key string."""
    raw = (1).to_bytes(32, "little")
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + raw).digest()[:4]
    return raw, f"{name}+{key_id.hex()}+" + base64.b64encode(b"\x01" + raw).decode()


def journal_records(store: Path) -> list[bytes]:
    """The records of a store's journal as an attacker edits them (NUL free space dropped)."""
    data = (store / "journal.log").read_bytes().rstrip(b"\0")
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def write_journal_records(store: Path, records: list[bytes]) -> None:
    """Write the edited journal, and its synced mark to match it, as an attacker who knows
    the format would (the mark is not signed: only a checkpoint tells then). A journal cut
    below an untouched mark is ``JOURNAL_CORRUPT`` already (tests/cli/test_cli_damage.py)."""
    data = b"".join(r + b"\n" for r in records)
    (store / "journal.log").write_bytes(data)
    (store / MARK_FILE).write_bytes(encode_mark(len(data)))


def rewrite_chain(store: Path) -> None:
    """Change run-a's second entry and recompute every later prev of its chain: the journal
    keeps its size and every chain rule holds again; only a Merkle root tells."""
    records = journal_records(store)
    heads: dict[str, str] = {}
    for k, record in enumerate(records):
        if not record.startswith(b"{"):
            continue
        doc = json.loads(record)
        if doc["run"] == "run-a" and doc["i"] == 1:
            doc["ts"] += 1000
        if doc["i"]:
            doc["prev"] = heads[doc["run"]]
        records[k] = jcs(doc)
        heads[doc["run"]] = sha(records[k])
    write_journal_records(store, records)

