"""RFC 9162 Merkle trees: hashing, proof generation over a subtree accessor, verification
errors, and property tests on random trees."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelock import errors
from tracelock import merkle as M

# RFC 6962 test data (the 8 leaves used by the Certificate Transparency test suites) and the
# roots of its prefixes.
RFC6962_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
RFC6962_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def leaves(n: int) -> list[bytes]:
    return [M.leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[(bit // 8) % len(b)] ^= 1 << (bit % 8)
    return bytes(b)


# -- hashing -------------------------------------------------------------------------------


def test_hashing_strategy() -> None:
    assert M.EMPTY_ROOT == hashlib.sha256(b"").digest() == M.root([]) == M.empty_root()
    assert M.leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    a, b = M.leaf_hash(b"a"), M.leaf_hash(b"b")
    assert M.node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert M.RFC9162_SHA256.hash_leaf(b"abc") == M.leaf_hash(b"abc")
    assert M.RFC9162_SHA256.hash_children(a, b) == M.node_hash(a, b)
    assert M.RFC9162_SHA256.size == M.HASH_SIZE == 32


def test_rfc6962_roots() -> None:
    hashes = [M.leaf_hash(d) for d in RFC6962_LEAVES]
    for n in range(1, 9):
        assert M.root(hashes[:n]).hex() == RFC6962_ROOTS[n - 1]


def test_public_module_reexports_the_core() -> None:
    from tracelock.core import merkle as core

    assert M.verify_inclusion is core.verify_inclusion
    assert M.ProofError is errors.ProofError
    for name in M.__all__:
        assert hasattr(M, name)
    assert issubclass(M.ProofRootMismatchError, M.ProofError)


# -- generation ------------------------------------------------------------------------------


def test_known_proofs_rfc6962() -> None:
    hashes = [M.leaf_hash(d) for d in RFC6962_LEAVES]
    # PATH(0, D[8]) = [leaf 1, MTH(D[2:4]), MTH(D[4:8])]
    assert M.inclusion_proof_from_leaves(0, hashes) == [
        hashes[1],
        M.root(hashes[2:4]),
        M.root(hashes[4:8]),
    ]
    # PROOF(3, D[7]) = [leaf 2, leaf 3, MTH(D[0:2]), MTH(D[4:7])]
    assert M.consistency_proof_from_leaves(3, hashes[:7]) == [
        hashes[2],
        hashes[3],
        M.root(hashes[0:2]),
        M.root(hashes[4:7]),
    ]
    # PROOF(4, D[8]): size 4 is a node of the larger tree, so its root is not repeated.
    assert M.consistency_proof_from_leaves(4, hashes) == [M.root(hashes[4:8])]
    assert M.consistency_proof_from_leaves(8, hashes) == []


def test_accessor_gets_node_ranges_only_once_per_element() -> None:
    hashes = leaves(1000)
    calls: list[tuple[int, int]] = []

    def subtree(start: int, end: int) -> bytes:
        assert M.is_node_range(start, end), (start, end)
        calls.append((start, end))
        return M.root(hashes[start:end])

    for size in (1, 2, 3, 7, 16, 17, 999, 1000):
        for index in {0, size // 2, size - 1}:
            calls.clear()
            proof = M.inclusion_proof(index, size, subtree)
            assert len(calls) == len(proof) == M.inclusion_proof_length(index, size)
            M.verify_inclusion(index, size, hashes[index], proof, M.root(hashes[:size]))
        for size1 in {1, size // 3 or 1, size}:
            calls.clear()
            proof = M.consistency_proof(size1, size, subtree)
            assert len(calls) == len(proof) == M.consistency_proof_length(size1, size)
            M.verify_consistency(size1, size, proof, M.root(hashes[:size1]), M.root(hashes[:size]))


def test_bad_requests() -> None:
    hashes = leaves(5)
    for index in (-1, 5, 6):
        with pytest.raises(M.ProofRequestError) as exc:
            M.inclusion_proof_from_leaves(index, hashes)
        assert exc.value.code == "PROOF_BAD_REQUEST"
    with pytest.raises(M.ProofRequestError):
        M.inclusion_proof_from_leaves(0, [])
    for size1 in (0, 6, -1):
        with pytest.raises(M.ProofRequestError):
            M.consistency_proof_from_leaves(size1, hashes)
    assert M.consistency_proof_from_leaves(0, []) == []
    with pytest.raises(M.ProofRequestError):
        M.split_point(1)
    assert [M.split_point(n) for n in (2, 3, 4, 5, 8, 9)] == [1, 2, 2, 4, 4, 8]
    assert M.is_node_range(8, 11) and M.is_node_range(0, 5) and M.is_node_range(4, 5)
    assert not M.is_node_range(2, 5) and not M.is_node_range(3, 3) and not M.is_node_range(-1, 0)


# -- verification errors ---------------------------------------------------------------------


def test_inclusion_errors_are_specific() -> None:
    hashes = leaves(6)
    r = M.root(hashes)
    proof = M.inclusion_proof_from_leaves(2, hashes)
    M.verify_inclusion(2, 6, hashes[2], proof, r)

    cases: list[tuple[type[M.ProofError], str, tuple[object, ...]]] = [
        (M.ProofIndexError, "PROOF_INDEX_OUT_OF_RANGE", (6, 6, hashes[2], proof, r)),
        (M.ProofIndexError, "PROOF_INDEX_OUT_OF_RANGE", (0, 0, hashes[2], [], M.EMPTY_ROOT)),
        (M.ProofIndexError, "PROOF_INDEX_OUT_OF_RANGE", (-1, 6, hashes[2], proof, r)),
        (M.ProofLengthError, "PROOF_WRONG_LENGTH", (2, 6, hashes[2], proof[:-1], r)),
        (M.ProofLengthError, "PROOF_WRONG_LENGTH", (2, 6, hashes[2], [*proof, r], r)),
        (M.ProofHashSizeError, "PROOF_BAD_HASH_SIZE", (2, 6, hashes[2][:31], proof, r)),
        (M.ProofHashSizeError, "PROOF_BAD_HASH_SIZE", (2, 6, hashes[2], [proof[0] + b"x", *proof[1:]], r)),
        (M.ProofHashSizeError, "PROOF_BAD_HASH_SIZE", (2, 6, hashes[2], proof, b"")),
        (M.ProofRootMismatchError, "PROOF_ROOT_MISMATCH", (2, 6, hashes[3], proof, r)),
        (M.ProofRootMismatchError, "PROOF_ROOT_MISMATCH", (2, 6, hashes[2], proof, flip(r, 0))),
    ]
    for cls, code, args in cases:
        with pytest.raises(cls) as exc:
            M.verify_inclusion(*args)  # type: ignore[arg-type]
        assert exc.value.code == code
        assert isinstance(exc.value, errors.ProofError)
        assert exc.value.message


def test_consistency_errors_are_specific() -> None:
    hashes = leaves(7)
    r3, r7 = M.root(hashes[:3]), M.root(hashes)
    proof = M.consistency_proof_from_leaves(3, hashes)
    M.verify_consistency(3, 7, proof, r3, r7)

    cases: list[tuple[type[M.ProofError], tuple[object, ...]]] = [
        (M.ProofSizeError, (7, 3, proof, r7, r3)),
        (M.ProofSizeError, (-1, 3, proof, r7, r3)),
        (M.ProofEmptyTreeError, (0, 7, [], M.EMPTY_ROOT, r7)),
        (M.ProofLengthError, (3, 7, [], r3, r7)),
        (M.ProofLengthError, (3, 7, proof[1:], r3, r7)),
        (M.ProofLengthError, (7, 7, [r7], r7, r7)),
        (M.ProofHashSizeError, (3, 7, proof, r3[:16], r7)),
        (M.ProofRootMismatchError, (3, 7, proof, flip(r3, 9), r7)),
        (M.ProofRootMismatchError, (3, 7, proof, r3, flip(r7, 9))),
        (M.ProofRootMismatchError, (7, 7, [], r7, r3)),
        (M.ProofRootMismatchError, (0, 0, [], r7, r7)),
    ]
    for cls, args in cases:
        with pytest.raises(cls):
            M.verify_consistency(*args)  # type: ignore[arg-type]
    M.verify_consistency(0, 0, [], M.EMPTY_ROOT, M.EMPTY_ROOT)
    M.verify_consistency(7, 7, [], r7, r7)


def test_root_from_inclusion_proof() -> None:
    hashes = leaves(11)
    for i in range(11):
        proof = M.inclusion_proof_from_leaves(i, hashes)
        assert M.root_from_inclusion_proof(i, 11, hashes[i], proof) == M.root(hashes)


# -- properties ------------------------------------------------------------------------------

tree_and_index = st.integers(min_value=1, max_value=300).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(min_value=0, max_value=n - 1))
)
two_sizes = st.integers(min_value=1, max_value=300).flatmap(
    lambda n: st.tuples(st.integers(min_value=1, max_value=n), st.just(n))
)


@settings(max_examples=200, deadline=None)
@given(tree_and_index, st.integers(min_value=0), st.integers(min_value=0, max_value=255))
def test_inclusion_property(case: tuple[int, int], pick: int, bit: int) -> None:
    size, index = case
    hashes = leaves(size)
    r = M.root(hashes)
    proof = M.inclusion_proof_from_leaves(index, hashes)
    M.verify_inclusion(index, size, hashes[index], proof, r)

    failures: list[tuple[object, ...]] = [
        (index, size, hashes[index], proof, flip(r, bit)),
        (index, size, flip(hashes[index], bit), proof, r),
        (index, size, hashes[index], [*proof, hashes[0]], r),
    ]
    if proof:
        failures.append((index, size, hashes[index], proof[:-1], r))
        k = pick % len(proof)
        failures.append((index, size, hashes[index], [*proof[:k], flip(proof[k], bit), *proof[k + 1 :]], r))
    if size > 1:
        other = (index + 1 + pick % (size - 1)) % size
        failures.append((other, size, hashes[index], proof, r))
        failures.append((other, size, hashes[other], proof, r))
    for args in failures:
        with pytest.raises(M.ProofError):
            M.verify_inclusion(*args)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(two_sizes, st.integers(min_value=0), st.integers(min_value=0, max_value=255))
def test_consistency_property(sizes: tuple[int, int], pick: int, bit: int) -> None:
    size1, size2 = sizes
    hashes = leaves(size2)
    r1, r2 = M.root(hashes[:size1]), M.root(hashes)
    proof = M.consistency_proof_from_leaves(size1, hashes)
    M.verify_consistency(size1, size2, proof, r1, r2)

    failures: list[tuple[object, ...]] = [
        (size1, size2, proof, flip(r1, bit), r2),
        (size1, size2, proof, r1, flip(r2, bit)),
        (size1, size2, [*proof, r1], r1, r2),
    ]
    if proof:
        k = pick % len(proof)
        failures.append((size1, size2, [*proof[:k], flip(proof[k], bit), *proof[k + 1 :]], r1, r2))
        failures.append((size1, size2, proof[:-1], r1, r2))
        failures.append((size2, size1, proof, r2, r1))
    if size1 != size2:
        # the proof of size1 does not show that an unrelated tree is a prefix
        failures.append((size1, size2, proof, M.root(leaves(size1 + 1)[1:]), r2))
    for args in failures:
        with pytest.raises(M.ProofError):
            M.verify_consistency(*args)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=40))
def test_subtree_root_matches_rfc_recursion(data: list[bytes]) -> None:
    def mth(d: list[bytes]) -> bytes:
        if len(d) == 1:
            return hashlib.sha256(b"\x00" + d[0]).digest()
        k = 1
        while k * 2 < len(d):
            k *= 2
        return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()

    assert M.root([M.leaf_hash(x) for x in data]) == mth(data)
