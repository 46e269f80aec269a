"""The golden Merkle vectors in conformance/merkle, recomputed independently of the module:
a direct transcription of the recursive definitions of RFC 9162 section 2.1 (MTH, PATH,
PROOF/SUBPROOF) with hashlib, then checked with the module's verifiers."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from tracelock import merkle as M

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "conformance" / "merkle"


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return path(m, d[:k]) + [mth(d[k:])]
    return path(m - k, d[k:]) + [mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [mth(d)]
    k = _k(n)
    if m <= k:
        return subproof(m, d[:k], b) + [mth(d[k:])]
    return subproof(m - k, d[k:], False) + [mth(d[:k])]


def test_golden_merkle_vectors() -> None:
    tree = json.loads((GOLDEN / "tree.json").read_text("utf-8"))
    data = [bytes.fromhex(leaf["data"]) for leaf in tree["leaves"]]
    assert len(data) >= 17
    for leaf, d in zip(tree["leaves"], data, strict=True):
        assert leaf["leaf_hash"] == hashlib.sha256(b"\x00" + d).hexdigest()
    assert [r["size"] for r in tree["roots"]] == list(range(len(data) + 1))
    for entry in tree["roots"]:
        assert entry["root"] == mth(data[: entry["size"]]).hex()

    inclusion = json.loads((GOLDEN / "inclusion.json").read_text("utf-8"))["proofs"]
    assert len(inclusion) == len(data) * (len(data) + 1) // 2
    for case in inclusion:
        i, n = case["index"], case["size"]
        expected = path(i, data[:n])
        assert case["proof"] == [h.hex() for h in expected], (i, n)
        M.verify_inclusion(i, n, hashlib.sha256(b"\x00" + data[i]).digest(), expected, mth(data[:n]))

    consistency = json.loads((GOLDEN / "consistency.json").read_text("utf-8"))["proofs"]
    assert len(consistency) == len(data) * (len(data) + 1) // 2
    for case in consistency:
        m, n = case["size1"], case["size2"]
        expected = subproof(m, data[:n], True) if m < n else []
        assert case["proof"] == [h.hex() for h in expected], (m, n)
        M.verify_consistency(m, n, expected, mth(data[:m]), mth(data[:n]))


def test_generator_output_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "conformance" / "generate_merkle.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
