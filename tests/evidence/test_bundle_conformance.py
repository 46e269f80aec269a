"""The golden bundle in conformance/bundle, checked with code independent of the verifier
(stdlib json and hashlib, the reference ``rfc8785``, the ``cryptography`` Ed25519 primitive,
a Merkle tree written from RFC 9162), following docs/spec.md section 8; then recorded again
to check the bytes are unchanged, and accepted by the verifier in every form."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tracelock.evidence.verify import load_pinned_keys, verify_bundle

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
GOLDEN = CONFORMANCE / "bundle"
VECTORS = json.loads((GOLDEN / "vectors.json").read_text("utf-8"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def H(value: Any) -> str:
    return sha(rfc8785.dumps(value))


def files_of_dir(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


FILES = files_of_dir(GOLDEN / "bundle")


# -- RFC 9162 -----------------------------------------------------------------------------


def mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def root_from_path(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.3.2."""
    assert index < size
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        assert sn != 0
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    assert sn == 0
    return r


# -- the checks ---------------------------------------------------------------------------


def test_manifest_and_file_hashes() -> None:
    manifest = json.loads(FILES["manifest.json"])
    assert FILES["manifest.json"] == rfc8785.dumps(manifest) + b"\n"
    assert manifest["format"] == "tracelock-bundle" and manifest["version"] == 1
    listed = {item["path"]: item for item in manifest["files"]}
    assert [item["path"] for item in manifest["files"]] == sorted(listed)
    assert set(listed) == set(FILES) - {"manifest.json"}
    for path, item in listed.items():
        assert sha(FILES[path]) == item["sha256"] and len(FILES[path]) == item["size"]
    assert manifest["signers"] == [VECTORS["key"]["vkey"]]


def _note() -> tuple[str, int, bytes, bytes]:
    note = FILES["checkpoint.note"].decode("utf-8")
    split = note.rfind("\n\n")
    text, signature_line = note[: split + 1], note[split + 2 :]
    origin, size, root_b64 = text.rstrip("\n").split("\n")
    assert signature_line.startswith("\u2014 " + origin + " ") and signature_line.endswith("\n")
    blob = base64.b64decode(signature_line.rstrip("\n").split(" ")[2], validate=True)
    public = bytes.fromhex(VECTORS["key"]["public_key"])
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()[:4]
    assert blob[:4] == key_id and key_id.hex() == VECTORS["key"]["key_id"]
    Ed25519PublicKey.from_public_bytes(public).verify(blob[4:], text.encode())
    return origin, int(size), base64.b64decode(root_b64), public


def test_checkpoint_signature_and_root() -> None:
    origin, size, root, _ = _note()
    assert origin == VECTORS["key"]["name"] == VECTORS["checkpoint"]["origin"]
    assert size == VECTORS["checkpoint"]["size"] and root.hex() == VECTORS["checkpoint"]["root"]
    lines = FILES["entries.jsonl"].splitlines()
    # The golden store holds exactly the bundle's entries: the root is recomputable.
    assert [json.loads(line)["seq"] for line in lines] == list(range(size))
    assert mth(lines) == root


def test_entries_chains_and_inclusion_proofs() -> None:
    _, size, root, _ = _note()
    lines = FILES["entries.jsonl"].splitlines()
    proofs = [json.loads(line) for line in FILES["proofs.jsonl"].splitlines()]
    assert FILES["entries.jsonl"].endswith(b"\n") and len(proofs) == len(lines)
    heads: dict[str, tuple[int, str]] = {}
    ended: set[str] = set()
    for line, proof_line, proof in zip(lines, FILES["proofs.jsonl"].splitlines(), proofs, strict=True):
        entry = json.loads(line)
        assert rfc8785.dumps(entry) == line and entry["v"] == 1
        assert rfc8785.dumps(proof) == proof_line
        digest = sha(line)
        assert proof["seq"] == entry["seq"] and proof["hash"] == digest
        path = [bytes.fromhex(p) for p in proof["proof"]]
        assert root_from_path(entry["seq"], size, hashlib.sha256(b"\x00" + line).digest(), path) == root
        run = entry["run"]
        assert run not in ended
        if run in heads:
            assert entry["i"] == heads[run][0] + 1 and entry["prev"] == heads[run][1]
        else:
            assert entry["i"] == 0 and entry["prev"] is None
        heads[run] = (entry["i"], digest)
        if entry["kind"] == "run.end":
            ended.add(run)
    assert ended == set(VECTORS["runs"])


def _payloads() -> dict[str, Any]:
    out = {}
    for name, data in FILES.items():
        if name.startswith("payloads/"):
            digest = name[len("payloads/") : -len(".json")]
            assert sha(data) == digest and rfc8785.dumps(json.loads(data)) == data
            out[digest] = json.loads(data)
    return out


def _effect_projection(effect: dict[str, Any], hidden: dict[str, str]) -> dict[str, Any]:
    def h(name: str) -> str:
        return hidden.get(name) or H(effect.get(name))

    ok = effect.get("outcome") == "SUCCESS"
    projected = {
        "step": effect["step"], "kind": effect["kind"], "name": effect["name"],
        "class": effect["class"], "args": h("args"),
        "result": h("result") if ok and effect["kind"] != "clock.now" else None,
        "outcome": effect.get("outcome"), "code": effect.get("code"),
        "attempts": effect.get("attempts", 1), "timeout_ms": effect.get("timeout_ms"),
    }
    if "sandbox" in effect:
        projected["sandbox"] = {"before": effect["sandbox"]["before"], "after": effect["sandbox"]["after"]}
    return projected


def test_payloads_redaction_and_fingerprints() -> None:
    payloads = _payloads()
    entries = [json.loads(line) for line in FILES["entries.jsonl"].splitlines()]
    referenced = {e["payload"] for e in entries if e["payload"]}
    assert set(payloads) <= referenced
    redactions = {
        e["meta"]["payload"]: payloads[e["payload"]]
        for e in entries
        if e["run"] == "tracelock:admin" and e["kind"] == "payload.redact"
    }
    absent = sorted(referenced - set(payloads))
    assert absent == VECTORS["redacted_payloads"] == sorted(redactions)
    for digest, doc in redactions.items():
        expected = VECTORS["redaction"]
        assert doc["payload"] == digest and doc["fields"] == expected["fields"]
        assert (doc["by"], doc["reason"], doc["run"], doc["step"]) == (
            expected["by"], expected["reason"], expected["run"], expected["step"],
        )
        for name in doc["fields"]:
            assert set(doc["copy"][name]) == {"__tracelock__", "hash"}
    policies = {e["payload"] for e in entries if e["kind"] == "policy.register"}
    for run, fingerprint in VECTORS["runs"].items():
        effects: dict[int, tuple[dict[str, Any], dict[str, str]]] = {}
        intents: dict[int, dict[str, Any]] = {}
        routing: list[Any] = []
        start: dict[str, Any] = {}
        end: dict[str, Any] = {}
        for entry in (e for e in entries if e["run"] == run):
            hidden: dict[str, str] = {}
            if entry["payload"] in payloads:
                doc = payloads[entry["payload"]]
            else:
                redaction = redactions[entry["payload"]]
                doc = dict(redaction["copy"])
                hidden = {name: doc[name]["hash"] for name in redaction["fields"]}
            kind = entry["kind"]
            if kind == "run.start":
                start = doc
                assert doc["policy"] in policies
            elif kind == "effect":
                effects[doc["step"]] = (doc, hidden)
            elif kind == "effect.intent":
                intents[doc["step"]] = doc
            elif kind == "effect.result":
                merged = dict(intents.pop(doc["step"]))
                merged.update({k: v for k, v in doc.items() if k != "step"})
                effects[doc["step"]] = (merged, hidden)
            elif kind == "route":
                routing.append(doc)
            elif kind == "run.end":
                end = doc
        projection = {
            "v": 1, "agent": start["agent"], "input": H(start["input"]), "policy": start["policy"],
            "effects": [_effect_projection(*effects[step]) for step in sorted(effects)],
            "routing": routing,
            "output": H(end["output"]) if end["outcome"] == "SUCCESS" else None,
            "outcome": end["outcome"], "code": end["code"],
        }
        assert sha(rfc8785.dumps(projection)) == end["fingerprint"] == fingerprint


def test_archives_hold_the_same_files_with_fixed_metadata() -> None:
    zip_data = (GOLDEN / "bundle.zip").read_bytes()
    tar_data = (GOLDEN / "bundle.tar").read_bytes()
    assert sha(zip_data) == VECTORS["archives"]["bundle.zip"]
    assert sha(tar_data) == VECTORS["archives"]["bundle.tar"]
    with zipfile.ZipFile(io.BytesIO(zip_data)) as archive:
        infos = archive.infolist()
        assert [i.filename for i in infos] == sorted(FILES)
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0) and info.compress_type == zipfile.ZIP_STORED
            assert info.create_system == 3 and info.external_attr == 0o100644 << 16 and info.extra == b""
            assert archive.read(info) == FILES[info.filename]
    with tarfile.open(fileobj=io.BytesIO(tar_data)) as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == sorted(FILES)
        for member in members:
            assert member.isreg() and (member.mtime, member.mode, member.uid, member.gid) == (0, 0o644, 0, 0)
            handle = archive.extractfile(member)
            assert handle is not None and handle.read() == FILES[member.name]


# -- The archives, built from docs/spec.md section 8.2 alone (no zipfile, no tarfile) -------


def zip_from_spec(files: dict[str, bytes]) -> bytes:
    out = bytearray()
    central = bytearray()
    for path in sorted(files, key=str.encode):
        data, name = files[path], path.encode("ascii")
        crc = zlib.crc32(data)
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0x0000, 0x0021, crc, len(data), len(data), len(name), 0)
        out += name + data
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 0x0314, 20, 0, 0, 0x0000, 0x0021, crc, len(data), len(data),
            len(name), 0, 0, 0, 0, 0x81A40000, offset,
        )
        central += name
    start = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(files), len(files), len(central), start, 0)
    return bytes(out)


def tar_from_spec(files: dict[str, bytes]) -> bytes:
    out = bytearray()
    for path in sorted(files, key=str.encode):
        data = files[path]
        header = bytearray(512)
        fields = [
            (0, path.encode("ascii")), (100, b"0000644\0"), (108, b"0000000\0"), (116, b"0000000\0"),
            (124, b"%011o\0" % len(data)), (136, b"00000000000\0"), (148, b" " * 8), (156, b"0"),
            (257, b"ustar\0"), (263, b"00"),
        ]
        for at, value in fields:
            header[at : at + len(value)] = value
        header[148:156] = b"%06o\0 " % sum(header)
        out += header + data + bytes(-len(data) % 512)
    out += bytes(1024)
    return bytes(out + bytes(-len(out) % 10240))


def test_the_archives_follow_the_spec_byte_for_byte() -> None:
    """A writer in another language reproduces both archive digests from section 8.2's text."""
    assert sha(zip_from_spec(FILES)) == VECTORS["archives"]["bundle.zip"]
    assert sha(tar_from_spec(FILES)) == VECTORS["archives"]["bundle.tar"]


def test_the_verifier_accepts_every_form() -> None:
    pins = load_pinned_keys([VECTORS["key"]["vkey"]])
    for target in ("bundle", "bundle.zip", "bundle.tar"):
        report = verify_bundle(GOLDEN / target, pins)
        assert report.ok, (target, [f.to_dict() for f in report.failures])
        assert {r.run: r.fingerprint for r in report.runs} == VECTORS["runs"]


def test_a_payload_file_that_fails_its_hash_counts_as_absent(tmp_path: Path) -> None:
    """docs/spec.md 8.3: a file under a redacted payload's name with other bytes fails
    ``payload.hash`` (and the manifest's file list), and is otherwise absent: the payload
    stays redacted for check 11 and check 12, so no other check fails."""
    (redacted,) = VECTORS["redacted_payloads"]
    bundle = tmp_path / "bundle"
    for path, data in FILES.items():
        (bundle / path).parent.mkdir(parents=True, exist_ok=True)
        (bundle / path).write_bytes(data)
    (bundle / "payloads" / f"{redacted}.json").write_bytes(b'{"forged":true}')
    report = verify_bundle(bundle, load_pinned_keys([VECTORS["key"]["vkey"]]))
    assert set(report.checks_failed()) == {"payload.hash", "manifest.hash"}
    assert {r.run: r.fingerprint for r in report.runs} == VECTORS["runs"]


def test_recording_the_case_again_gives_the_same_bytes() -> None:
    sys.path.insert(0, str(CONFORMANCE))
    try:
        from generate_bundle import all_files
    finally:
        sys.path.remove(str(CONFORMANCE))
    wanted = all_files()
    on_disk = {p.relative_to(CONFORMANCE).as_posix(): p.read_bytes() for p in GOLDEN.rglob("*") if p.is_file()}
    assert on_disk == wanted
