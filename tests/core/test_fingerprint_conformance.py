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
        "args": H(effect.get("args")),
        "result": H(effect.get("result")) if ok and effect["kind"] != "clock.now" else None,
        "outcome": effect.get("outcome"),
        "code": effect.get("code"),
        "attempts": effect.get("attempts", 1),
        "timeout_ms": effect.get("timeout_ms"),
    }
    if "sandbox" in effect:
        projected["sandbox"] = {"before": effect["sandbox"]["before"], "after": effect["sandbox"]["after"]}
    return projected


def _recompute(journal: list[str], run: str) -> tuple[str, str, list[str]]:
    payloads: dict[str, Any] = {}
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
    assert len(VECTORS) >= 2


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
