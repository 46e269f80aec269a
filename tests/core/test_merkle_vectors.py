"""Every inclusion and consistency case of the transparency-dev/merkle test data
(../shared/vectors/merkle): a ProofError exactly when ``wantErr``."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from tracelock import merkle as M


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _cases(root: Path) -> list[tuple[str, dict[str, Any]]]:
    files = sorted(root.rglob("*.json"))
    return [(str(f.relative_to(root)), json.loads(f.read_text("utf-8"))) for f in files]


def _outcome(call: Any) -> M.ProofError | None:
    try:
        call()
    except M.ProofError as exc:
        return exc
    return None


def test_inclusion_vectors(vectors_dir: Path) -> None:
    cases = _cases(vectors_dir / "merkle" / "inclusion")
    assert len(cases) >= 90
    wrong = []
    for name, case in cases:
        proof = [_b64(p) for p in case["proof"] or []]
        error = _outcome(
            lambda c=case, p=proof: M.verify_inclusion(
                c["leafIdx"], c["treeSize"], _b64(c["leafHash"]), p, _b64(c["root"])
            )
        )
        if (error is not None) != case["wantErr"]:
            wrong.append((name, case["desc"], error))
    assert sum(not c["wantErr"] for _, c in cases) >= 6
    assert not wrong, wrong


def test_consistency_vectors(vectors_dir: Path) -> None:
    cases = _cases(vectors_dir / "merkle" / "consistency")
    assert len(cases) >= 80
    wrong = []
    for name, case in cases:
        proof = [_b64(p) for p in case["proof"] or []]
        error = _outcome(
            lambda c=case, p=proof: M.verify_consistency(
                c["size1"], c["size2"], p, _b64(c["root1"]), _b64(c["root2"])
            )
        )
        if (error is not None) != case["wantErr"]:
            wrong.append((name, case["desc"], error))
    assert sum(not c["wantErr"] for _, c in cases) >= 6
    assert not wrong, wrong


def test_happy_paths_are_what_we_generate(vectors_dir: Path) -> None:
    """The valid proofs of the vectors over the RFC 6962 leaves are exactly the proofs the
    generator produces (checked where the vector's root is a prefix root of those leaves)."""
    data = [
        b"",
        b"\x00",
        b"\x10",
        b"\x20\x21",
        b"\x30\x31",
        b"\x40\x41\x42\x43",
        bytes(range(0x50, 0x58)),
        bytes(range(0x60, 0x70)),
    ]
    hashes = [M.leaf_hash(d) for d in data]
    roots = {M.root(hashes[:n]): n for n in range(1, 9)}
    checked = 0
    for _, case in _cases(vectors_dir / "merkle" / "inclusion"):
        size = roots.get(_b64(case["root"]))
        if case["wantErr"] or size != case["treeSize"]:
            continue
        expected = [_b64(p) for p in case["proof"] or []]
        assert M.inclusion_proof_from_leaves(case["leafIdx"], hashes[:size]) == expected
        checked += 1
    for _, case in _cases(vectors_dir / "merkle" / "consistency"):
        size2 = roots.get(_b64(case["root2"]))
        if case["wantErr"] or size2 != case["size2"] or roots.get(_b64(case["root1"])) != case["size1"]:
            continue
        expected = [_b64(p) for p in case["proof"] or []]
        assert M.consistency_proof_from_leaves(case["size1"], hashes[:size2]) == expected
        checked += 1
    assert checked >= 8
