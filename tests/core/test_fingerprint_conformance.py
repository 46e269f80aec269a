"""Golden fingerprint vectors, recomputed from the journal with code independent of the
runtime (stdlib json + the reference rfc8785 + hashlib), following docs/spec.md 3 and 5."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import rfc8785

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
VECTORS = sorted((CONFORMANCE / "fingerprint").glob("*.json"))


def H(value: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def _effect_projection(effect: dict[str, Any]) -> dict[str, Any]:
    ok = effect.get("outcome") == "SUCCESS"
    projected = {
        "step": effect["step"],
        "kind": effect["kind"],
        "name": effect["name"],
        "class": effect["class"],
        "args": _h(effect.get("args")),
        "result": _h(effect.get("result")) if ok and effect["kind"] != "clock.now" else None,
        "outcome": effect.get("outcome"),
        "code": effect.get("code"),
        "attempts": effect.get("attempts", 1),
        "timeout_ms": effect.get("timeout_ms"),
    }
    if "sandbox" in effect:
        projected["sandbox"] = {"before": effect["sandbox"]["before"], "after": effect["sandbox"]["after"]}
    return projected


def _is_marker(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"__tracelock__", "hash"} and value["__tracelock__"] == "redacted"


class _Hidden:
    """A member a field redaction replaced by a marker: only its hash is known."""

    def __init__(self, digest: str) -> None:
        self.digest = digest


def _h(value: Any) -> str:
    return value.digest if isinstance(value, _Hidden) else H(value)


def _readable_copies(journal: list[str]) -> dict[str, dict[str, Any]]:
    """docs/spec.md 8.1: the copy a field redaction kept of each redacted payload (the last
    ``payload.redact`` entry with ``fields`` and ``copy``), its named members hidden."""
    payloads = {t[1:65]: json.loads(t[66:]) for t in journal if t.startswith("=")}
    copies: dict[str, dict[str, Any]] = {}
    for text in journal:
        if not text.startswith("{"):
            continue
        entry = json.loads(text)
        if entry["run"] == "tracelock:admin" and entry["kind"] == "payload.redact":
            doc = payloads[entry["payload"]]
            assert doc["payload"] == entry["meta"]["payload"]
            if doc["fields"] and doc["copy"] is not None:
                copy = dict(doc["copy"])
                for name in doc["fields"]:
                    assert _is_marker(copy[name])
                    copy[name] = _Hidden(copy[name]["hash"])
                copies[doc["payload"]] = copy
    return copies


def _recompute(journal: list[str], run: str) -> tuple[str, str, list[str]]:
    payloads: dict[str, Any] = _readable_copies(journal)
    heads: dict[str, str] = {}
    hashes = []
    effects: dict[int, dict[str, Any]] = {}
    intents: dict[int, dict[str, Any]] = {}
    routing: list[Any] = []
    start: dict[str, Any] = {}
    end: dict[str, Any] = {}
    seq = 0
    for text in journal:
        raw = text.encode("utf-8")
        if raw.startswith(b"="):
            digest, data = raw[1:65].decode(), raw[66:]
            assert hashlib.sha256(data).hexdigest() == digest
            payloads[digest] = json.loads(data)
            continue
        if raw.startswith(b"-"):
            # docs/spec.md 3.3: a redacted record keeps "-", the hash and one space, and
            # every data byte becomes a space.
            assert raw[65:66] == b" " and set(raw[66:]) <= {0x20}
            assert raw[1:65].decode() in payloads, "an erased payload without a readable copy"
            continue
        entry = json.loads(raw)
        assert rfc8785.dumps(entry) == raw, "entry line is not canonical"
        assert set(entry) <= {"v", "seq", "run", "i", "kind", "meta", "payload", "prev", "ts"}
        assert entry["v"] == 1 and entry["seq"] == seq
        seq += 1
        assert entry["prev"] == heads.get(entry["run"])
        digest = hashlib.sha256(raw).hexdigest()
        hashes.append(digest)
        heads[entry["run"]] = digest
        if entry["run"] != run:
            continue
        doc = payloads[entry["payload"]] if entry["payload"] else None
        kind = entry["kind"]
        if kind == "run.start":
            start = doc
        elif kind == "effect":
            effects[doc["step"]] = doc
        elif kind == "effect.intent":
            intents[doc["step"]] = doc
        elif kind == "effect.result":
            merged = dict(intents.pop(doc["step"]))
            merged.update({k: v for k, v in doc.items() if k != "step"})
            effects[doc["step"]] = merged
        elif kind == "route":
            routing.append(doc)
        elif kind == "run.end":
            end = doc
    projection = {
        "v": 1,
        "agent": start["agent"],
        "input": H(start["input"]),
        "policy": start["policy"],
        "effects": [_effect_projection(effects[step]) for step in sorted(effects)],
        "routing": routing,
        "output": H(end["output"]) if end["outcome"] == "SUCCESS" else None,
        "outcome": end["outcome"],
        "code": end["code"],
    }
    return hashlib.sha256(rfc8785.dumps(projection)).hexdigest(), end["fingerprint"], hashes


def test_vectors_exist() -> None:
    """Every kind of case the spec asks vectors for is present."""
    names = {path.stem for path in VECTORS}
    assert {
        "agent-success", "agent-denied", "gather-retry-timeout", "routing-fallback",
        "outcome-validation-error", "outcome-execution-error", "agent-success-redacted",
        "agent-success-provenance",
    } <= names


def _run_docs(vector: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    journal = vector["journal"]
    payloads = {t[1:65]: json.loads(t[66:]) for t in journal if t.startswith("=")}
    return [
        payloads[entry["payload"]]
        for entry in (json.loads(t) for t in journal if t.startswith("{"))
        if entry["run"] == vector["run"] and entry["kind"] == kind and entry["payload"] in payloads
    ]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_random_and_uuid_values_follow_from_the_seed(path: Path) -> None:
    """docs/spec.md 5.2: seed_bytes are the 32 bytes the hex encodes; the tags are ASCII;
    the step is 8 bytes big-endian; the uuid is version 4, variant 10, in byte order."""
    vector = json.loads(path.read_text())
    (start,) = _run_docs(vector, "run.start")
    seed = bytes.fromhex(start["seed"])
    assert len(seed) == 32
    for doc in _run_docs(vector, "effect"):
        step = doc["step"].to_bytes(8, "big")
        if doc["kind"] == "random":
            digest = hashlib.sha256(seed + b"random" + step).digest()
            assert doc["result"] == (int.from_bytes(digest[:8], "big") >> 11) / 2**53
        elif doc["kind"] == "uuid":
            raw = bytearray(hashlib.sha256(seed + b"uuid" + step).digest()[:16])
            raw[6] = (raw[6] & 0x0F) | 0x40
            raw[8] = (raw[8] & 0x3F) | 0x80
            text = raw.hex()
            assert doc["result"] == "-".join((text[:8], text[8:12], text[12:16], text[16:20], text[20:]))


def test_a_run_given_no_seed_uses_its_run_id() -> None:
    """The routed case is run through ``send_intent`` with no seed: H({"run": run id})."""
    vector = json.loads((CONFORMANCE / "fingerprint" / "routing-fallback.json").read_text())
    (start,) = _run_docs(vector, "run.start")
    assert start["seed"] == H({"run": vector["run"]})
    assert any(doc["kind"] in ("random", "uuid") for doc in _run_docs(vector, "effect"))
    routes = _run_docs(vector, "route")
    assert [r["chosen"] for r in routes] == ["primary", "backup"]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_fingerprint_recomputed_independently(path: Path) -> None:
    vector = json.loads(path.read_text())
    recomputed, recorded, hashes = _recompute(vector["journal"], vector["run"])
    assert recomputed == vector["fingerprint"]
    assert recorded == vector["fingerprint"]
    assert hashes == vector["entry_hashes"]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_recording_the_case_again_gives_the_same_bytes(path: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(CONFORMANCE))
    try:
        from fingerprint_cases import record_case
    finally:
        sys.path.remove(str(CONFORMANCE))
    lines, _ = record_case(path.stem, tmp_path / "store")
    assert [line.decode("utf-8") for line in lines] == json.loads(path.read_text())["journal"]


def test_changing_any_effect_result_changes_the_fingerprint() -> None:
    vector = json.loads((CONFORMANCE / "fingerprint" / "agent-success.json").read_text())
    base, _, _ = _recompute(vector["journal"], vector["run"])
    journal = list(vector["journal"])
    # Rewrite the lookup result payload consistently (new hash, entry points at it).
    for index, text in enumerate(journal):
        if text.startswith("=") and '"kind":"tool","name":"lookup"' in text and '"value":2' in text:
            doc = json.loads(text[66:])
            doc["result"]["value"] = 3
            data = rfc8785.dumps(doc)
            digest = hashlib.sha256(data).hexdigest()
            old = text[1:65]
            journal[index] = "=" + digest + " " + data.decode()
            journal = [line.replace(old, digest) if line.startswith("{") else line for line in journal]
            break
    else:
        pytest.fail("lookup effect payload not found")
    changed, _, _ = _recompute(_rechain(journal), vector["run"])
    assert changed != base


def _rechain(journal: list[str]) -> list[str]:
    heads: dict[str, str] = {}
    out = []
    for text in journal:
        if not text.startswith("{"):
            out.append(text)
            continue
        entry = json.loads(text)
        entry["prev"] = heads.get(entry["run"])
        raw = rfc8785.dumps(entry)
        heads[entry["run"]] = hashlib.sha256(raw).hexdigest()
        out.append(raw.decode())
    return out


def test_provenance_is_kept_once_named_by_hash_and_outside_the_fingerprint() -> None:
    """docs/spec.md 3.6: run.start names H(document) of a provenance.register entry of the
    admin chain written before it; the fingerprint is the one recorded without provenance."""
    vector = json.loads((CONFORMANCE / "fingerprint" / "agent-success-provenance.json").read_text())
    plain = json.loads((CONFORMANCE / "fingerprint" / "agent-success.json").read_text())
    journal = vector["journal"]
    payloads = {t[1:65]: json.loads(t[66:]) for t in journal if t.startswith("=")}
    entries = [json.loads(t) for t in journal if t.startswith("{")]
    (register,) = [e for e in entries if e["run"] == "tracelock:admin" and e["kind"] == "provenance.register"]
    (start,) = [e for e in entries if e["run"] == vector["run"] and e["kind"] == "run.start"]
    digest = payloads[start["payload"]]["provenance"]
    assert digest == register["payload"] and register["seq"] < start["seq"]
    document = payloads[digest]
    assert H(document) == digest and set(document) == {"engine", "code", "tools"}
    assert set(document["engine"]) == {"tracelock", "python", "implementation", "platform", "distributions"}
    assert document["code"]["digest"] == H(document["code"]["modules"])
    assert vector["fingerprint"] == plain["fingerprint"]


def test_the_vectors_cover_every_outcome_class() -> None:
    outcomes = {_run_docs(json.loads(path.read_text()), "run.end")[0]["outcome"] for path in VECTORS}
    assert outcomes == {"SUCCESS", "VALIDATION_ERROR", "DENIED", "EXECUTION_ERROR"}
