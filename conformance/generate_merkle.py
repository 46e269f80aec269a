"""Generate the golden vectors of the Merkle tree and of signed checkpoints.

    python conformance/generate_merkle.py           # (re)write conformance/merkle and checkpoint
    python conformance/generate_merkle.py --check   # exit 1 if the files are not up to date

Everything here is deterministic: the leaves are fixed strings and the signing key is the
secret of RFC 8032 section 7.1, test 1 (Ed25519 signatures are deterministic).
The tests recompute these files independently of the code that generates them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tracelock.core.merkle import (
    consistency_proof_from_leaves,
    inclusion_proof_from_leaves,
    leaf_hash,
    root,
)
from tracelock.evidence.checkpoint import Checkpoint, sign_checkpoint
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.note import NoteSigner

HERE = Path(__file__).resolve().parent

#: Number of leaves of the Merkle vectors (crosses the 16-leaf chunk of the node files).
TREE_LEAVES = 17
#: RFC 8032 section 7.1, TEST 1: SECRET KEY.
RFC8032_TEST1_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
ORIGIN = "example.com/tracelock-conformance"
CHECKPOINT_SIZES = (3, 7)
INCLUSION_INDEX = 5


def leaf_data(i: int) -> bytes:
    return f"tracelock conformance leaf {i}".encode("ascii")


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def merkle_files() -> dict[str, bytes]:
    data = [leaf_data(i) for i in range(TREE_LEAVES)]
    hashes = [leaf_hash(d) for d in data]
    tree = {
        "description": "RFC 9162 SHA-256 Merkle tree over fixed leaves; roots of every prefix.",
        "leaves": [{"data": d.hex(), "leaf_hash": h.hex()} for d, h in zip(data, hashes, strict=True)],
        "roots": [{"size": n, "root": root(hashes[:n]).hex()} for n in range(TREE_LEAVES + 1)],
    }
    inclusion = {
        "description": "Inclusion proofs of every leaf in every prefix of tree.json (hex).",
        "proofs": [
            {
                "index": i,
                "size": n,
                "proof": [p.hex() for p in inclusion_proof_from_leaves(i, hashes[:n])],
            }
            for n in range(1, TREE_LEAVES + 1)
            for i in range(n)
        ],
    }
    consistency = {
        "description": "Consistency proofs between every two non-empty prefixes of tree.json (hex).",
        "proofs": [
            {
                "size1": m,
                "size2": n,
                "proof": [p.hex() for p in consistency_proof_from_leaves(m, hashes[:n])],
            }
            for n in range(1, TREE_LEAVES + 1)
            for m in range(1, n + 1)
        ],
    }
    return {
        "merkle/tree.json": _json(tree),
        "merkle/inclusion.json": _json(inclusion),
        "merkle/consistency.json": _json(consistency),
    }


def checkpoint_files() -> dict[str, bytes]:
    key = PrivateKey.from_seed(bytes.fromhex(RFC8032_TEST1_SEED))
    signer = NoteSigner(ORIGIN, key)
    data = [leaf_data(i) for i in range(max(CHECKPOINT_SIZES))]
    hashes = [leaf_hash(d) for d in data]
    files: dict[str, bytes] = {}
    checkpoints = []
    for size in CHECKPOINT_SIZES:
        checkpoint = Checkpoint(ORIGIN, size, root(hashes[:size]))
        name = f"checkpoint-{size}.txt"
        files[f"checkpoint/{name}"] = sign_checkpoint(checkpoint, signer).encode("utf-8")
        checkpoints.append(
            {"file": name, "size": size, "root": checkpoint.root.hex(), "body": checkpoint.to_body()}
        )
    small, large = CHECKPOINT_SIZES
    vectors = {
        "description": (
            "Signed checkpoints (c2sp.org/tlog-checkpoint, c2sp.org/signed-note, Ed25519) over "
            "the first leaves of ../merkle/tree.json, signed with the RFC 8032 test 1 key."
        ),
        "key": {
            "seed": RFC8032_TEST1_SEED,
            "public_key": key.public_key.hex(),
            "name": ORIGIN,
            "key_id": f"{signer.key_id:08x}",
            "vkey": signer.verifier().vkey,
        },
        "origin": ORIGIN,
        "leaves": [d.hex() for d in data],
        "checkpoints": checkpoints,
        "consistency": {
            "size1": small,
            "size2": large,
            "proof": [p.hex() for p in consistency_proof_from_leaves(small, hashes[:large])],
        },
        "inclusion": {
            "index": INCLUSION_INDEX,
            "size": large,
            "leaf_hash": hashes[INCLUSION_INDEX].hex(),
            "proof": [p.hex() for p in inclusion_proof_from_leaves(INCLUSION_INDEX, hashes[:large])],
        },
    }
    files["checkpoint/vectors.json"] = _json(vectors)
    return files


def all_files() -> dict[str, bytes]:
    return {**merkle_files(), **checkpoint_files()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only check the files are current")
    parser.add_argument("--out", type=Path, default=HERE, help="conformance directory")
    args = parser.parse_args(argv)
    stale = []
    for rel, content in all_files().items():
        path = args.out / rel
        current = path.read_bytes() if path.exists() else None
        if current == content:
            continue
        stale.append(rel)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    if args.check:
        for rel in stale:
            print(f"out of date: {rel}")
        return 1 if stale else 0
    for rel in stale:
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
