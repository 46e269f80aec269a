"""Batch inclusion proofs equal the proofs of the reference construction, for every index of
every tree size up to 70 and for scattered subsets of larger trees."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tracelock.core.inclusion import InclusionVerifier
from tracelock.core.merkle import inclusion_proof_from_leaves, leaf_hash, root, verify_inclusion
from tracelock.errors import ProofError
from tracelock.evidence.proofs import batch_inclusion_proofs


def _leaves(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def test_every_index_of_small_trees() -> None:
    for size in range(1, 71):
        leaves = _leaves(size)
        got_root, proofs = batch_inclusion_proofs(iter(leaves), size, list(range(size)))
        assert got_root == root(leaves)
        for index in range(size):
            assert proofs[index] == inclusion_proof_from_leaves(index, leaves), (size, index)


def test_subsets_and_prefixes_of_larger_trees() -> None:
    rng = random.Random(7)
    leaves = _leaves(1500)
    for size in (1024, 1025, 1337, 1500):
        targets = sorted(rng.sample(range(size), 25))
        # More leaves than the tree: only the first ``size`` count.
        got_root, proofs = batch_inclusion_proofs(iter(leaves), size, targets)
        assert got_root == root(leaves[:size])
        assert all(proofs[i] == inclusion_proof_from_leaves(i, leaves[:size]) for i in targets)


def test_too_few_leaves_and_the_empty_tree() -> None:
    with pytest.raises(ValueError):
        batch_inclusion_proofs(iter(_leaves(3)), 4, [0])
    assert batch_inclusion_proofs(iter([]), 0, [])[1] == {}
    with pytest.raises(ValueError):
        batch_inclusion_proofs(iter([]), 0, [0])


def _verdict(call: Any, *args: Any) -> bool:
    try:
        call(*args)
    except ProofError:
        return False
    return True


def test_the_batch_verifier_decides_like_the_reference() -> None:
    rng = random.Random(11)
    for size in list(range(1, 41)) + [255, 256, 257, 1000]:
        leaves = _leaves(size)
        good_root = root(leaves)
        verifier = InclusionVerifier(size, good_root)
        indexes = list(range(size)) if size <= 40 else rng.sample(range(size), 60)
        rng.shuffle(indexes)
        for index in indexes:
            proof = inclusion_proof_from_leaves(index, leaves)
            cases = [(index, leaves[index], proof)]
            for k in range(len(proof)):
                bad = list(proof)
                bad[k] = bytes(32) if bad[k] != bytes(32) else b"\x01" * 32
                cases.append((index, leaves[index], bad))
            cases.append((index, leaf_hash(b"other"), proof))
            cases.append((index, leaves[index], proof[:-1]))
            cases.append((index, leaves[index], [*proof, bytes(32)]))
            cases.append((size, leaves[index], proof))
            if size > 1:
                cases.append(((index + 1) % size, leaves[index], proof))
            for i, leaf, candidate in cases:
                expected = _verdict(verify_inclusion, i, size, leaf, candidate, good_root)
                got = _verdict(verifier.verify, i, leaf, candidate)
                assert got == expected, (size, index, i)
