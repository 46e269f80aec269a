"""RFC 9162 Merkle trees: hashing, proof generation and proof verification. Pure: no I/O.

Three parts kept apart, as in the transparency-dev design:

* the **hashing strategy** (:class:`LogHasher`, with :data:`RFC9162_SHA256` as the only one
  tracelock uses): how leaves, interior nodes and the empty tree are hashed;
* the **tree logic**: roots and proof *generation*, written over a subtree-hash accessor
  ``subtree(start, end) -> bytes`` so that a store can answer each request in O(log n)
  without reading the whole log (:func:`inclusion_proof`, :func:`consistency_proof`), plus
  in-memory helpers over a list of leaf hashes (:func:`root`, :func:`inclusion_proof_from_leaves`,
  :func:`consistency_proof_from_leaves`);
* proof **verification** (:func:`verify_inclusion`, :func:`verify_consistency`), which follows
  the algorithms of RFC 9162 sections 2.1.3.2 and 2.1.4.2 and raises a :class:`ProofError`
  subclass with a specific code when a proof does not verify.

Every range handed to a ``subtree`` accessor is a *tree node* of RFC 9162's recursive split:
``start`` is a multiple of the smallest power of two that is ``>= end - start``. Such a range is
either a perfect subtree (``end - start`` a power of two) or the ragged right edge of a tree of
size ``end``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from tracelock.errors import ProofError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "RFC9162_SHA256",
    "LogHasher",
    "ProofEmptyTreeError",
    "ProofError",
    "ProofHashSizeError",
    "ProofIndexError",
    "ProofLengthError",
    "ProofRequestError",
    "ProofRootMismatchError",
    "ProofSizeError",
    "Rfc9162Sha256",
    "SubtreeHash",
    "consistency_proof",
    "consistency_proof_from_leaves",
    "consistency_proof_length",
    "empty_root",
    "inclusion_proof",
    "inclusion_proof_from_leaves",
    "inclusion_proof_length",
    "is_node_range",
    "leaf_hash",
    "node_hash",
    "root",
    "root_from_inclusion_proof",
    "split_point",
    "subtree_root",
    "verify_consistency",
    "verify_inclusion",
]

#: Size in bytes of every hash in the tree (SHA-256).
HASH_SIZE = 32

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"


# --------------------------------------------------------------------------------------------
# Errors


class ProofRequestError(ProofError, ValueError):
    """A proof or subtree was requested for indexes or sizes that do not exist in the tree."""

    code: ClassVar[str] = "PROOF_BAD_REQUEST"


class ProofIndexError(ProofError):
    """Inclusion proof: the leaf index is not below the tree size (including an empty tree)."""

    code: ClassVar[str] = "PROOF_INDEX_OUT_OF_RANGE"


class ProofSizeError(ProofError):
    """Consistency proof: the first tree is larger than the second."""

    code: ClassVar[str] = "PROOF_SIZE_ORDER"


class ProofEmptyTreeError(ProofError):
    """Consistency proof from the empty tree to a non-empty one: it would prove nothing."""

    code: ClassVar[str] = "PROOF_EMPTY_TREE"


class ProofLengthError(ProofError):
    """The proof does not have the number of hashes the tree sizes and index require."""

    code: ClassVar[str] = "PROOF_WRONG_LENGTH"


class ProofHashSizeError(ProofError):
    """A hash given to a verifier (leaf hash, root or proof element) is not 32 bytes long."""

    code: ClassVar[str] = "PROOF_BAD_HASH_SIZE"


class ProofRootMismatchError(ProofError):
    """The root recomputed from the proof differs from the expected root."""

    code: ClassVar[str] = "PROOF_ROOT_MISMATCH"


# --------------------------------------------------------------------------------------------
# Hashing strategy


class LogHasher(Protocol):
    """How a log hashes leaves, interior nodes and the empty tree."""

    @property
    def size(self) -> int:
        """Size in bytes of every hash this hasher produces."""
        ...

    def empty_root(self) -> bytes:
        """The root of the tree with no leaves."""
        ...

    def hash_leaf(self, data: bytes) -> bytes:
        """The hash of one leaf's data."""
        ...

    def hash_children(self, left: bytes, right: bytes) -> bytes:
        """The hash of an interior node from its two children."""
        ...


class Rfc9162Sha256:
    """RFC 9162 section 2.1.1 with SHA-256 (identical to RFC 6962).

    ``MTH({}) = SHA-256()``, ``MTH({d}) = SHA-256(0x00 || d)``,
    ``MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))``.
    """

    size = HASH_SIZE

    def empty_root(self) -> bytes:
        return hashlib.sha256(b"").digest()

    def hash_leaf(self, data: bytes) -> bytes:
        return hashlib.sha256(_LEAF_PREFIX + data).digest()

    def hash_children(self, left: bytes, right: bytes) -> bytes:
        return hashlib.sha256(_NODE_PREFIX + left + right).digest()

    def __repr__(self) -> str:
        return "RFC9162_SHA256"


#: The hasher tracelock uses everywhere.
RFC9162_SHA256 = Rfc9162Sha256()

#: ``SHA-256("")``, the root of the empty tree.
EMPTY_ROOT = RFC9162_SHA256.empty_root()

#: ``subtree(start, end)``: the hash of the leaves ``[start, end)`` of a tree node range.
SubtreeHash = Callable[[int, int], bytes]


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``: the hash of a leaf."""
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an interior node."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def empty_root() -> bytes:
    """``SHA-256("")``: the root of the tree with no leaves."""
    return EMPTY_ROOT


# --------------------------------------------------------------------------------------------
# Tree logic


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``): RFC 9162's ``k``."""
    if n < 2:
        raise ProofRequestError(f"a tree of {n} leaves has no split point")
    return 1 << ((n - 1).bit_length() - 1)


def is_node_range(start: int, end: int) -> bool:
    """True when ``[start, end)`` is a node of RFC 9162's recursive split of some tree:
    non-empty, and ``start`` a multiple of the smallest power of two ``>= end - start``."""
    if start < 0 or end <= start:
        return False
    width = 1 << (end - start - 1).bit_length()
    return start % width == 0


def subtree_root(leaf_hashes: Sequence[bytes], hasher: LogHasher = RFC9162_SHA256) -> bytes:
    """``MTH`` of a non-empty list of leaf hashes, folding perfect subtrees bottom-up."""
    if not leaf_hashes:
        raise ProofRequestError("a subtree has at least one leaf")
    level = list(leaf_hashes)
    # Hash pairs level by level; an odd last node is carried up unchanged, which is exactly
    # RFC 9162's left-balanced split (the right edge joins the tree as high as it can).
    while len(level) > 1:
        nxt = [hasher.hash_children(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def root(leaf_hashes: Sequence[bytes], hasher: LogHasher = RFC9162_SHA256) -> bytes:
    """The Merkle tree hash of a list of leaf hashes (the empty-tree root for ``[]``)."""
    if not leaf_hashes:
        return hasher.empty_root()
    return subtree_root(leaf_hashes, hasher)


def _check_index(index: int, size: int) -> None:
    if size < 0 or not 0 <= index < size:
        raise ProofRequestError(
            f"no leaf {index} in a tree of size {size}", details={"index": index, "size": size}
        )


def inclusion_proof(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """The RFC 9162 inclusion proof ``PATH(index, D[0:size])``, leaf side first.

    ``subtree(start, end)`` is called once per proof element, with node ranges only.
    """
    _check_index(index, size)
    proof: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        mid = start + split_point(end - start)
        if index < mid:
            proof.append(subtree(mid, end))
            end = mid
        else:
            proof.append(subtree(start, mid))
            start = mid
    proof.reverse()
    return proof


def _check_sizes(size1: int, size2: int) -> None:
    if not 0 <= size1 <= size2:
        raise ProofRequestError(
            f"no consistency proof from size {size1} to size {size2}",
            details={"size1": size1, "size2": size2},
        )
    if size1 == 0 and size2 > 0:
        raise ProofRequestError(
            "a consistency proof from the empty tree proves nothing and is not defined",
            details={"size1": size1, "size2": size2},
        )


def consistency_proof(size1: int, size2: int, subtree: SubtreeHash) -> list[bytes]:
    """The RFC 9162 consistency proof ``PROOF(size1, D[0:size2])`` (empty when equal sizes).

    ``subtree(start, end)`` is called once per proof element, with node ranges only.
    """
    _check_sizes(size1, size2)
    proof: list[bytes] = []
    if size1 == size2:
        return proof
    # SUBPROOF(m, D[start:end], b), unrolled; elements are produced root side first.
    start, end, m, whole = 0, size2, size1, True
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            proof.append(subtree(start + k, end))
            end = start + k
        else:
            proof.append(subtree(start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:
        proof.append(subtree(start, end))
    proof.reverse()
    return proof


def inclusion_proof_length(index: int, size: int) -> int:
    """How many hashes the inclusion proof of ``index`` in a tree of ``size`` has."""
    _check_index(index, size)
    count = 0
    start, end = 0, size
    while end - start > 1:
        mid = start + split_point(end - start)
        if index < mid:
            end = mid
        else:
            start = mid
        count += 1
    return count


def consistency_proof_length(size1: int, size2: int) -> int:
    """How many hashes the consistency proof from ``size1`` to ``size2`` has."""
    _check_sizes(size1, size2)
    if size1 == size2:
        return 0
    count = 0
    start, end, m, whole = 0, size2, size1, True
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            end = start + k
        else:
            start, m, whole = start + k, m - k, False
        count += 1
    return count + (0 if whole else 1)


def _leaf_accessor(leaf_hashes: Sequence[bytes], hasher: LogHasher) -> SubtreeHash:
    def subtree(start: int, end: int) -> bytes:
        return subtree_root(leaf_hashes[start:end], hasher)

    return subtree


def inclusion_proof_from_leaves(
    index: int, leaf_hashes: Sequence[bytes], hasher: LogHasher = RFC9162_SHA256
) -> list[bytes]:
    """:func:`inclusion_proof` over an in-memory list of all the tree's leaf hashes."""
    return inclusion_proof(index, len(leaf_hashes), _leaf_accessor(leaf_hashes, hasher))


def consistency_proof_from_leaves(
    size1: int, leaf_hashes: Sequence[bytes], hasher: LogHasher = RFC9162_SHA256
) -> list[bytes]:
    """:func:`consistency_proof` from ``size1`` to ``len(leaf_hashes)``, in memory."""
    return consistency_proof(size1, len(leaf_hashes), _leaf_accessor(leaf_hashes, hasher))


# --------------------------------------------------------------------------------------------
# Verification


def _check_hash(value: bytes, what: str, hasher: LogHasher) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != hasher.size:
        size = len(value) if isinstance(value, bytes | bytearray) else None
        raise ProofHashSizeError(
            f"{what} must be a {hasher.size}-byte hash, got "
            + (f"{size} bytes" if size is not None else type(value).__name__),
            details={"what": what, "length": size},
        )


def _check_proof(proof: Sequence[bytes], expected: int, hasher: LogHasher) -> None:
    if len(proof) != expected:
        raise ProofLengthError(
            f"proof has {len(proof)} hashes, {expected} expected",
            details={"length": len(proof), "expected": expected},
        )
    for i, element in enumerate(proof):
        _check_hash(element, f"proof[{i}]", hasher)


def root_from_inclusion_proof(
    leaf_index: int,
    tree_size: int,
    leaf_hash: bytes,
    proof: Sequence[bytes],
    hasher: LogHasher = RFC9162_SHA256,
) -> bytes:
    """The root implied by an inclusion proof (RFC 9162 2.1.3.2 steps 1-4).

    Raises :class:`ProofIndexError`, :class:`ProofLengthError` or :class:`ProofHashSizeError`
    when the inputs cannot form a proof; never checks against an expected root.
    """
    if tree_size < 0 or not 0 <= leaf_index < tree_size:
        raise ProofIndexError(
            f"leaf index {leaf_index} is not in a tree of size {tree_size}",
            details={"leaf_index": leaf_index, "tree_size": tree_size},
        )
    _check_hash(leaf_hash, "leaf hash", hasher)
    _check_proof(proof, inclusion_proof_length(leaf_index, tree_size), hasher)
    fn, sn, r = leaf_index, tree_size - 1, bytes(leaf_hash)
    for p in proof:
        if sn == 0:  # unreachable after the length check; kept as RFC 9162 states it
            raise ProofLengthError("proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = hasher.hash_children(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = hasher.hash_children(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:  # unreachable after the length check
        raise ProofLengthError("proof is shorter than the path to the root")
    return r


def verify_inclusion(
    leaf_index: int,
    tree_size: int,
    leaf_hash: bytes,
    proof: Sequence[bytes],
    root: bytes,
    hasher: LogHasher = RFC9162_SHA256,
) -> None:
    """Check that ``leaf_hash`` is leaf ``leaf_index`` of the tree of ``tree_size`` with ``root``.

    Returns None on success; raises a :class:`ProofError` subclass otherwise.
    """
    computed = root_from_inclusion_proof(leaf_index, tree_size, leaf_hash, proof, hasher)
    _check_hash(root, "root", hasher)
    if computed != root:
        raise ProofRootMismatchError(
            f"inclusion proof of leaf {leaf_index} leads to root {computed.hex()}, "
            f"expected {bytes(root).hex()}",
            details={"leaf_index": leaf_index, "tree_size": tree_size,
                     "computed": computed.hex(), "expected": bytes(root).hex()},
        )


def verify_consistency(
    size1: int,
    size2: int,
    proof: Sequence[bytes],
    root1: bytes,
    root2: bytes,
    hasher: LogHasher = RFC9162_SHA256,
) -> None:
    """Check that the tree of ``size1`` with ``root1`` is a prefix of the tree of ``size2``
    with ``root2`` (RFC 9162 2.1.4.2).

    Equal sizes need an empty proof and equal roots; for size 0 both roots must also be the
    empty-tree root. Returns None on success; raises a :class:`ProofError` subclass otherwise.
    """
    if size1 < 0 or size2 < size1:
        raise ProofSizeError(
            f"tree size {size1} is larger than tree size {size2}" if size1 >= 0
            else f"tree size {size1} is negative",
            details={"size1": size1, "size2": size2},
        )
    if size1 == size2:
        _check_proof(proof, 0, hasher)
        if root1 != root2:
            raise ProofRootMismatchError(
                f"trees of the same size {size1} have different roots",
                details={"size1": size1, "size2": size2},
            )
        if size1 == 0 and root1 != hasher.empty_root():
            raise ProofRootMismatchError(
                "the root of the empty tree must be SHA-256 of the empty string",
                details={"size1": 0, "size2": 0},
            )
        return
    if size1 == 0:
        raise ProofEmptyTreeError(
            f"a consistency proof from the empty tree to size {size2} proves nothing",
            details={"size1": size1, "size2": size2},
        )
    _check_hash(root1, "root1", hasher)
    _check_hash(root2, "root2", hasher)
    _check_proof(proof, consistency_proof_length(size1, size2), hasher)
    path = list(proof)
    if size1 & (size1 - 1) == 0:  # size1 is a power of two: its root is a node of tree 2
        path.insert(0, bytes(root1))
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:  # unreachable after the length check
            raise ProofLengthError("proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            fr = hasher.hash_children(c, fr)
            sr = hasher.hash_children(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = hasher.hash_children(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:  # unreachable after the length check
        raise ProofLengthError("proof is shorter than the path to the root")
    if fr != root1:
        raise ProofRootMismatchError(
            f"consistency proof leads to root {fr.hex()} for size {size1}, "
            f"expected {bytes(root1).hex()}",
            details={"which": "root1", "size1": size1, "size2": size2,
                     "computed": fr.hex(), "expected": bytes(root1).hex()},
        )
    if sr != root2:
        raise ProofRootMismatchError(
            f"consistency proof leads to root {sr.hex()} for size {size2}, "
            f"expected {bytes(root2).hex()}",
            details={"which": "root2", "size1": size1, "size2": size2,
                     "computed": sr.hex(), "expected": bytes(root2).hex()},
        )
