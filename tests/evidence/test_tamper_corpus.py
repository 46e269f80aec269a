"""The tamper corpus: a real recorded bundle (two runs of the example support agent, one
field redaction, a signed checkpoint), mutated every way an attacker could, each mutant
fixed up as far as an attacker without the log key can (proof labels, unreferenced payloads,
the manifest's summaries and hashes). Every mutant must fail ``verify`` with the specific
check expected; the untouched bundle must pass."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import (
    ORIGIN,
    build_store,
    bundle_files,
    drop_unreferenced_payloads,
    entry_lines,
    evil_key,
    fix_proof_labels,
    forge_note,
    jcs,
    pinned,
    proof_docs,
    rechain,
    refresh_manifest,
    reprove,
    set_entries,
    sha,
    small_order_vkey,
    verify_files,
)

from tracelock.evidence.bundle import BundleFiles, archive_bytes
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.evidence.keys import KeySmallOrderError
from tracelock.evidence.note import NoteSigner
from tracelock.evidence.verify import load_pinned_keys, verify_bundle
from tracelock.storage.directory import DirectoryStore

Files = dict[str, bytes]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tamper") / "store"
    build_store(path)
    return path


@pytest.fixture(scope="module")
def original(store_dir: Path) -> Files:
    return bundle_files(store_dir)


def _consistent(files: Files) -> Files:
    fix_proof_labels(files)
    drop_unreferenced_payloads(files)
    refresh_manifest(files)
    return files


def _checks(files: Files, **kwargs: Any) -> set[str]:
    report = verify_files(files, **kwargs)
    assert not report.ok
    return set(report.checks_failed())


def test_the_untouched_bundle_passes(original: Files) -> None:
    report = verify_files(original)
    assert report.ok, [f.to_dict() for f in report.failures]
    assert report.integrity_ok and report.trust_ok
    assert [r.fingerprint_status for r in report.runs] == ["match", "match"]
    assert report.redacted == 1
    # The attacker's fix-ups are no-ops on an untouched bundle.
    assert _consistent(dict(original)) == original


# ---------------------------------------------------------------------------------------
# Every field of every entry


def _flip(name: str, value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return "00" * 32 if name in ("payload", "prev") else 1
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str) and len(value) == 64:
        return value[:-1] + ("0" if value[-1] != "0" else "1")
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, dict):
        return dict(value, tampered=True)
    raise AssertionError(name)


def _field_mutants(original: Files) -> list[tuple[str, int, str]]:
    out = []
    for k, line in enumerate(entry_lines(original)):
        for name in sorted(json.loads(line)):
            out.append((f"line{k + 1}-{name}", k, name))
        out.append((f"line{k + 1}-add-meta", k, "+meta"))
    return out


def test_flipping_any_field_of_any_entry_fails(original: Files) -> None:
    mutants = _field_mutants(original)
    assert len(mutants) >= 18 * 9
    for label, k, name in mutants:
        files = dict(original)
        lines = entry_lines(files)
        doc = json.loads(lines[k])
        if name == "+meta":
            if "meta" in doc:
                continue
            doc["meta"] = {"status": "completed"}
        else:
            doc[name] = _flip(name, doc[name])
        lines[k] = jcs(doc)
        set_entries(files, lines)
        checks = _checks(_consistent(files))
        # A value the canonical layout forbids (v != 1, prev without i > 0...) is a format
        # failure; any other change leaves a leaf that is not in the signed tree.
        expected = {"entry.format"} if name == "v" else {"entry.format", "entry.inclusion"}
        assert expected & checks, (label, checks)
        report = verify_files(files)
        assert not report.integrity_ok and report.trust_ok, label


def test_flipping_a_byte_of_the_entry_hash_in_the_proof_file_fails(original: Files) -> None:
    files = dict(original)
    proofs = proof_docs(files)
    proofs[3]["hash"] = _flip("hash", proofs[3]["hash"])
    files["proofs.jsonl"] = b"".join(jcs(p) + b"\n" for p in proofs)
    assert "entry.hash" in _checks(refresh_or_keep(files))


def refresh_or_keep(files: Files) -> Files:
    refresh_manifest(files)
    return files


def test_flipping_any_proof_node_fails(original: Files) -> None:
    for k, doc in enumerate(proof_docs(original)):
        for n in range(len(doc["proof"])):
            files = dict(original)
            proofs = proof_docs(files)
            proofs[k]["proof"][n] = _flip("node", proofs[k]["proof"][n])
            files["proofs.jsonl"] = b"".join(jcs(p) + b"\n" for p in proofs)
            assert "entry.inclusion" in _checks(refresh_or_keep(files)), (k, n)


# ---------------------------------------------------------------------------------------
# Deleting, inserting, reordering, duplicating, truncating entries


def _without(original: Files, predicate: Callable[[dict[str, Any], int], bool]) -> Files:
    files = dict(original)
    lines = entry_lines(files)
    proofs = proof_docs(files)
    keep = [k for k, line in enumerate(lines) if not predicate(json.loads(line), k)]
    assert len(keep) < len(lines)
    set_entries(files, [lines[k] for k in keep], [proofs[k] for k in keep])
    return _consistent(files)


@pytest.mark.parametrize(
    ("label", "predicate", "expected"),
    [
        ("first entry of a run", lambda d, k: d["run"] == "run-a" and d["i"] == 0, "run.chain"),
        ("a middle entry of a run", lambda d, k: d["run"] == "run-a" and d["i"] == 4, "run.chain"),
        ("last entry of a run (run.end)", lambda d, k: d["run"] == "run-b" and d["kind"] == "run.end", "run.open"),
        ("the bundle's first entry (the policy)", lambda d, k: k == 0, "policy.missing"),
        ("the runs' provenance document", lambda d, k: d["kind"] == "provenance.register", "provenance.missing"),
        ("the bundle's last entry (the redaction)", lambda d, k: d["kind"] == "payload.redact", "payload.missing"),
        ("a whole run", lambda d, k: d["run"] == "run-a", "run.missing"),
    ],
)
def test_deleting_entries_fails(original: Files, label: str, predicate: Any, expected: str) -> None:
    files = _without(original, predicate)
    assert expected in _checks(files, required_runs=["run-a", "run-b"]), label


def test_inserting_a_forged_entry_fails(original: Files) -> None:
    files = dict(original)
    lines = entry_lines(files)
    proofs = proof_docs(files)
    k = next(k for k, line in enumerate(lines) if b'"run":"run-a"' in line and b'"i":3,' in line)
    previous = json.loads(lines[k])
    forged = dict(previous, kind="effect", i=4, prev=sha(lines[k]), ts=previous["ts"] + 1)
    lines.insert(k + 1, jcs(forged))
    proofs.insert(k + 1, dict(proofs[k]))
    set_entries(files, lines, proofs)
    checks = _checks(_consistent(files))
    assert {"entry.inclusion", "entry.order", "run.chain"} <= checks


def test_reordering_entries_fails(original: Files) -> None:
    files = dict(original)
    lines = entry_lines(files)
    proofs = proof_docs(files)
    lines[3], lines[4] = lines[4], lines[3]
    proofs[3], proofs[4] = proofs[4], proofs[3]
    set_entries(files, lines, proofs)
    assert {"entry.order", "run.chain"} <= _checks(_consistent(files))


def test_duplicating_an_entry_fails(original: Files) -> None:
    files = dict(original)
    lines = entry_lines(files)
    proofs = proof_docs(files)
    lines.insert(5, lines[5])
    proofs.insert(5, proofs[5])
    set_entries(files, lines, proofs)
    assert {"entry.order", "run.chain"} <= _checks(_consistent(files))


def test_truncating_the_entries_file_fails(original: Files) -> None:
    files = dict(original)
    data = files["entries.jsonl"]
    files["entries.jsonl"] = data[: len(data) // 2]
    refresh_manifest(files, summaries=False)
    checks = _checks(files)
    assert {"entry.format", "proof.format"} <= checks


def test_truncating_the_archive_fails(original: Files, tmp_path: Path) -> None:
    for kind in ("zip", "tar"):
        data = archive_bytes(original, kind)
        path = tmp_path / f"cut.{kind}"
        path.write_bytes(data[: len(data) * 2 // 3])
        report = verify_bundle(path, pinned())
        assert not report.ok
        assert {"bundle.container", "manifest.hash"} & set(report.checks_failed()) or {
            "bundle.files"
        } <= set(report.checks_failed()), kind


# ---------------------------------------------------------------------------------------
# Re-hashing the whole chain without the key


def _rewrite_output(original: Files) -> tuple[Files, list[bytes]]:
    """Change run-b's output (a refund that never happened) and re-hash everything."""
    files = dict(original)
    end_line = next(line for line in entry_lines(files) if b'"run":"run-b"' in line and b'"kind":"run.end"' in line)
    old = json.loads(end_line)["payload"]
    doc = json.loads(files[f"payloads/{old}.json"])
    doc["output"]["handled"][2] = {"id": "p3", "outcome": "SUCCESS", "result": {"refunded_cents": 24999}}
    data = jcs(doc)
    new = sha(data)
    del files[f"payloads/{old}.json"]
    files[f"payloads/{new}.json"] = data
    return files, rechain(files, {old: new})


def test_rehashing_the_chain_with_the_old_checkpoint_fails_inclusion(original: Files) -> None:
    files, lines = _rewrite_output(original)
    set_entries(files, lines)
    checks = _checks(_consistent(files))
    assert "entry.inclusion" in checks and "checkpoint.trust" not in checks


def test_rehashing_the_chain_and_the_tree_under_the_old_signature_fails(original: Files) -> None:
    files, lines = _rewrite_output(original)
    size, root = reprove(files, lines)
    forge_note(files, size, root, None)
    checks = _checks(_consistent(files))
    assert "checkpoint.signature" in checks


def test_rehashing_everything_and_signing_with_another_key_fails_trust_only(original: Files) -> None:
    files, lines = _rewrite_output(original)
    size, root = reprove(files, lines)
    forge_note(files, size, root, NoteSigner(ORIGIN, evil_key()))
    report = verify_files(_consistent(files))
    # The recorded fingerprint no longer matches the changed output: integrity catches that
    # even though every hash was recomputed.
    assert "fingerprint.mismatch" in report.checks_failed()
    assert not report.trust_ok and "checkpoint.trust" in report.checks_failed()


def test_another_key_with_consistent_content_passes_integrity_but_fails_trust(original: Files) -> None:
    files = dict(original)
    lines = entry_lines(files)
    size, root = reprove(files, lines)
    forge_note(files, size, root, NoteSigner(ORIGIN, evil_key()))
    report = verify_files(_consistent(files))
    assert report.integrity_ok, [f.to_dict() for f in report.failures]
    assert not report.trust_ok and not report.ok
    assert report.checks_failed() == ["checkpoint.trust"]


def test_a_bundle_that_ships_its_own_key_is_not_trusted(original: Files) -> None:
    files = dict(original)
    evil = NoteSigner(ORIGIN, evil_key())
    size, root = reprove(files, entry_lines(files))
    forge_note(files, size, root, evil)
    manifest = json.loads(files["manifest.json"])
    manifest["signers"] = [evil.verifier().vkey]
    files["manifest.json"] = jcs(manifest) + b"\n"
    refresh_manifest(files)
    report = verify_files(files)
    assert report.integrity_ok and not report.trust_ok
    assert report.checks_failed() == ["checkpoint.trust"]
    message = report.failures_of("trust")[0].message
    assert evil.verifier().vkey in message and "never trusted unless pinned" in message
    assert report.claimed_signers == [{"vkey": evil.verifier().vkey, "valid": True, "pinned": False}]
    # Verifying with no pin at all can never be satisfied by the bundle's own key.
    assert not verify_files(files, pins=[]).trust_ok


def test_a_small_order_key_is_rejected_both_shipped_and_pinned(original: Files) -> None:
    raw, vkey = small_order_vkey(ORIGIN)
    files = dict(original)
    key_id = bytes.fromhex(vkey.split("+")[1])
    # R = identity, S = 0: "valid" under the identity key for any message with a lax verifier.
    forged_sig = (1).to_bytes(32, "little") + bytes(32)
    note = files["checkpoint.note"].decode()
    body = note[: note.rfind("\n\n") + 1]
    import base64

    files["checkpoint.note"] = (
        body + "\n\u2014 " + ORIGIN + " " + base64.b64encode(key_id + forged_sig).decode() + "\n"
    ).encode()
    manifest = json.loads(files["manifest.json"])
    manifest["signers"] = [vkey]
    files["manifest.json"] = jcs(manifest) + b"\n"
    refresh_manifest(files)
    report = verify_files(files)
    assert report.checks_failed() == ["checkpoint.trust"]
    assert any("EVIDENCE_KEY_SMALL_ORDER" in note for note in report.notes)
    with pytest.raises(KeySmallOrderError):
        load_pinned_keys([vkey])
    with pytest.raises(KeySmallOrderError):
        load_pinned_keys([raw.hex()])


# ---------------------------------------------------------------------------------------
# Payloads, the checkpoint, the manifest


def test_swapping_payloads_between_runs_fails(original: Files) -> None:
    files = dict(original)
    ends = [json.loads(line)["payload"] for line in entry_lines(files) if b'"kind":"run.end"' in line]
    a, b = (f"payloads/{h}.json" for h in ends)
    assert files[a] != files[b]
    files[a], files[b] = files[b], files[a]
    refresh_manifest(files, summaries=False)
    assert "payload.hash" in _checks(files)


def test_pointing_an_entry_at_another_runs_payload_fails(original: Files) -> None:
    files = dict(original)
    lines = entry_lines(files)
    ends = [k for k, line in enumerate(lines) if b'"kind":"run.end"' in line]
    a, b = (json.loads(lines[k]) for k in ends)
    a["payload"] = b["payload"]
    lines[ends[0]] = jcs(a)
    set_entries(files, lines)
    assert "entry.inclusion" in _checks(_consistent(files))


def test_editing_a_payload_fails(original: Files) -> None:
    files = dict(original)
    name = next(n for n in files if n.startswith("payloads/"))
    files[name] = files[name].replace(b"}", b',"x":1}', 1)
    refresh_manifest(files, summaries=False)
    assert "payload.hash" in _checks(files)


def test_removing_a_payload_that_was_not_redacted_fails(original: Files) -> None:
    files = dict(original)
    name = next(n for n in sorted(files) if n.startswith("payloads/"))
    del files[name]
    refresh_manifest(files)
    assert "payload.missing" in _checks(files)


def test_an_extra_payload_or_file_fails(original: Files) -> None:
    files = dict(original)
    data = jcs({"smuggled": True})
    files[f"payloads/{sha(data)}.json"] = data
    files["notes.txt"] = b"trust me"
    refresh_manifest(files, summaries=False)
    assert {"payload.unreferenced", "bundle.files"} <= _checks(files)


def test_replacing_the_checkpoint_with_an_older_or_newer_genuine_one_fails(
    original: Files, store_dir: Path, tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(store_dir, copy)
    with DirectoryStore(copy) as store:
        store.append("run-z", "run.start", payload={"agent": "x"})
        newer, _ = CheckpointHistory(copy).sign(store, SigningKey(pinned()[0] and _log(), ORIGIN))
    for replacement in (_older_note(copy), newer.note.encode()):
        files = dict(original)
        files["checkpoint.note"] = replacement
        refresh_manifest(files)
        checks = _checks(files)
        assert checks == {"entry.inclusion"}, checks


def _log() -> Any:
    from evidence_helpers import log_key

    return log_key()


def _older_note(store: Path) -> bytes:
    """A genuine checkpoint of a shorter journal, signed by the log key."""
    from tracelock.core import merkle as M
    from tracelock.evidence.checkpoint import Checkpoint, sign_checkpoint

    with DirectoryStore(store, read_only=True) as opened:
        size = 9
        root = opened.tree_root(size)
    del M
    return sign_checkpoint(Checkpoint(ORIGIN, size, root), NoteSigner(ORIGIN, _log())).encode()


def test_altering_the_checkpoint_text_fails(original: Files) -> None:
    files = dict(original)
    note = files["checkpoint.note"].decode()
    lines = note.split("\n")
    lines[1] = str(int(lines[1]) + 1)
    files["checkpoint.note"] = "\n".join(lines).encode()
    refresh_manifest(files)
    assert "checkpoint.signature" in _checks(files)
    files = dict(original)
    files["checkpoint.note"] = b"not a note"
    refresh_manifest(files, summaries=False)
    assert "checkpoint.format" in _checks(files)


def test_a_naive_edit_is_caught_by_the_manifest(original: Files) -> None:
    for name in sorted(original):
        if name == "manifest.json":
            continue
        files = dict(original)
        files[name] = files[name] + b" "
        assert "manifest.hash" in _checks(files), name
    files = dict(original)
    files["manifest.json"] = files["manifest.json"].replace(b'"version":1', b'"version":2')
    assert "manifest.format" in _checks(files)


def test_lying_in_the_manifest_summary_fails(original: Files) -> None:
    files = dict(original)
    manifest = json.loads(files["manifest.json"])
    manifest["runs"][0]["status"] = "failed"
    files["manifest.json"] = jcs(manifest) + b"\n"
    assert _checks(files) == {"manifest.summary"}


def test_unsafe_names_links_and_duplicates_in_archives_fail(original: Files, tmp_path: Path) -> None:
    import io
    import tarfile
    import zipfile

    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in sorted(original.items()):
            archive.writestr(name, data)
        archive.writestr("../escape.json", b"{}")
    report = verify_bundle(path, pinned())
    assert "bundle.container" in report.checks_failed()
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as archive:
        for name, data in sorted(original.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("payloads/link.json")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        archive.addfile(link)
    report = verify_bundle(path, pinned())
    assert "bundle.container" in report.checks_failed()
    files = BundleFiles("dup", "zip", dict(original), [("entries.jsonl", "the file appears twice in the bundle")])
    assert "bundle.container" in verify_bundle(files, pinned()).checks_failed()


def test_every_failure_says_where(original: Files) -> None:
    files = _without(original, lambda d, k: d["run"] == "run-a" and d["i"] == 4)
    report = verify_files(files)
    failure = next(f for f in report.failures if f.check == "run.chain")
    assert failure.run == "run-a" and failure.i == 5 and failure.file == "entries.jsonl"
    assert failure.seq is not None and failure.category == "integrity"
    assert hashlib.sha256(b"").hexdigest()  # keep hashlib import meaningful


def test_an_unknown_manifest_member_is_refused(original: Files) -> None:
    files = dict(original)
    manifest = json.loads(files["manifest.json"])
    manifest["note"] = "trust me"
    files["manifest.json"] = jcs(manifest) + b"\n"
    report = verify_files(files)
    failure = next(f for f in report.failures if f.check == "manifest.format")
    assert "unknown member" in failure.message and "'note'" in failure.message
    assert not report.ok


def test_a_compressed_zip_member_is_named_as_such(original: Files, tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "deflated.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in sorted(original.items()):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16  # permission bits only, as some tools write
            info.compress_type = zipfile.ZIP_DEFLATED if name == "entries.jsonl" else zipfile.ZIP_STORED
            archive.writestr(info, data)
    report = verify_bundle(path, pinned())
    messages = {f.file: f.message for f in report.failures if f.check == "bundle.container"}
    assert "compressed" in messages["entries.jsonl"], messages
    assert "link?" not in messages["entries.jsonl"]


def test_an_entry_format_failure_names_the_run_and_seq(original: Files) -> None:
    files = dict(original)
    lines = entry_lines(files)
    doc = json.loads(lines[3])
    lines[3] = json.dumps(doc, separators=(", ", ": ")).encode()  # not canonical
    files["entries.jsonl"] = b"".join(line + b"\n" for line in lines)
    report = verify_files(files)
    failure = next(f for f in report.failures if f.check == "entry.format")
    assert failure.run == doc["run"] and failure.seq == doc["seq"]
    assert f"run {doc['run']}" in failure.message and f"seq {doc['seq']}" in failure.message
