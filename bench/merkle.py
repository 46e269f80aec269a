"""Merkle tree and checkpoint figures.

    python -m bench.merkle            # 1,000,000-leaf tree
    python -m bench.merkle --quick    # 50,000-leaf tree

Builds a persistent tree (:class:`tracelock.storage.directory.merkle_tree.MerkleTreeFile`) in a
temporary directory, reopens it, then times per proof: inclusion and consistency proof
generation (read from the node files, one chunk of leaf hashes from an in-memory journal
stand-in) and verification; and per checkpoint: signing and verifying (Ed25519 signed note).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cli import bench_main
from tracelock.core.merkle import leaf_hash, verify_consistency, verify_inclusion
from tracelock.evidence.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.note import NoteSigner
from tracelock.storage.directory.merkle_tree import MerkleTreeFile

FULL_LEAVES = 1_000_000
QUICK_LEAVES = 50_000


def _per_call_us(func: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        func()
    return (time.perf_counter() - start) / repeat * 1e6


def run(quick: bool) -> dict[str, Any]:
    n = QUICK_LEAVES if quick else FULL_LEAVES
    repeat = 200 if quick else 1000
    rng = random.Random(20240229)
    leaves = [leaf_hash(i.to_bytes(8, "big")) for i in range(n)]

    def source(start: int, end: int) -> list[bytes]:
        return leaves[start:end]

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "merkle"
        started = time.perf_counter()
        with MerkleTreeFile(directory, source) as tree:
            tree.rebuild(leaves)
        build_s = time.perf_counter() - started
        stored_bytes = sum(p.stat().st_size for p in directory.iterdir())

        with MerkleTreeFile(directory, source) as tree:
            root = tree.root()
            sizes = iter([rng.randint(1, n) for _ in range(repeat)])
            root_us = _per_call_us(lambda: tree.root(next(sizes)), repeat)

            indexes = [rng.randrange(n) for _ in range(repeat)]
            it = iter(indexes)
            inclusion_gen_us = _per_call_us(lambda: tree.inclusion_proof(next(it)), repeat)
            proofs = [(i, tree.inclusion_proof(i)) for i in indexes]
            pit = iter(proofs)

            def verify_one() -> None:
                i, proof = next(pit)
                verify_inclusion(i, n, leaves[i], proof, root)

            inclusion_verify_us = _per_call_us(verify_one, repeat)

            olds = [rng.randrange(1, n) for _ in range(repeat)]
            oit = iter(olds)
            consistency_gen_us = _per_call_us(lambda: tree.consistency_proof(next(oit), n), repeat)
            cases = [(m, tree.root(m), tree.consistency_proof(m, n)) for m in olds]
            cit = iter(cases)

            def verify_cons() -> None:
                m, root_m, proof = next(cit)
                verify_consistency(m, n, proof, root_m, root)

            consistency_verify_us = _per_call_us(verify_cons, repeat)
            proof_len = len(proofs[0][1])

    signer = NoteSigner("example.com/bench", PrivateKey.from_seed(bytes(32)))
    checkpoint = Checkpoint("example.com/bench", n, root)
    sign_us = _per_call_us(lambda: sign_checkpoint(checkpoint, signer), repeat)
    signed = sign_checkpoint(checkpoint, signer)
    verifiers = [signer.verifier()]
    open_us = _per_call_us(lambda: open_checkpoint(signed, verifiers), repeat)

    figures = {
        "leaves": n,
        "build_seconds": round(build_s, 3),
        "stored_bytes": stored_bytes,
        "stored_bytes_per_leaf": round(stored_bytes / n, 3),
        "inclusion_proof_hashes": proof_len,
        "root_at_random_size_us": round(root_us, 1),
        "inclusion_proof_us": round(inclusion_gen_us, 1),
        "inclusion_verify_us": round(inclusion_verify_us, 1),
        "consistency_proof_us": round(consistency_gen_us, 1),
        "consistency_verify_us": round(consistency_verify_us, 1),
        "checkpoint_sign_us": round(sign_us, 1),
        "checkpoint_open_us": round(open_us, 1),
        "repeat": repeat,
    }
    _print(figures)
    return figures


def _print(figures: dict[str, Any]) -> None:
    n = figures["leaves"]
    print(f"merkle: {n} leaves, built in {figures['build_seconds']} s, "
          f"{figures['stored_bytes']} bytes of node files ({figures['stored_bytes_per_leaf']} B/leaf)")
    print(f"  root at a random size     {figures['root_at_random_size_us']:>9.1f} us")
    print(f"  inclusion proof generate  {figures['inclusion_proof_us']:>9.1f} us/proof "
          f"({figures['inclusion_proof_hashes']} hashes)")
    print(f"  inclusion proof verify    {figures['inclusion_verify_us']:>9.1f} us/proof")
    print(f"  consistency proof generate{figures['consistency_proof_us']:>9.1f} us/proof")
    print(f"  consistency proof verify  {figures['consistency_verify_us']:>9.1f} us/proof")
    print(f"  checkpoint sign           {figures['checkpoint_sign_us']:>9.1f} us")
    print(f"  checkpoint open (verify)  {figures['checkpoint_open_us']:>9.1f} us")


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
