"""The persistent Merkle tree against the pure reference: roots, proofs, reopen, truncation,
and detection of torn or stale files."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracelock import merkle as M
from tracelock.storage.directory.merkle_tree import CHUNK_SIZE, MerkleTreeFile
from tracelock.storage.errors import MerkleLeafError, MerkleTreeCorruptError, MerkleTreeStaleError


class Journal:
    """A stand-in for the journal: leaf hashes in memory, with a record of what was read."""

    def __init__(self, n: int = 0, seed: int = 0) -> None:
        self.leaves = [M.leaf_hash(f"{seed}/{i}".encode()) for i in range(n)]
        self.reads: list[tuple[int, int]] = []

    def extend(self, n: int) -> list[bytes]:
        start = len(self.leaves)
        new = [M.leaf_hash(f"x/{i}".encode()) for i in range(start, start + n)]
        self.leaves.extend(new)
        return new

    def __call__(self, start: int, end: int) -> list[bytes]:
        assert 0 <= start <= end <= len(self.leaves)
        assert end - start <= CHUNK_SIZE, "the tree reads at most one chunk at a time"
        self.reads.append((start, end))
        return self.leaves[start:end]


def check_against_reference(tree: MerkleTreeFile, leaves: list[bytes], rng: random.Random) -> None:
    n = len(leaves)
    assert tree.size == n
    assert tree.root() == M.root(leaves)
    sizes = {0, 1, n, n // 2, max(n - 1, 0), rng.randint(0, n)}
    for size in sorted(s for s in sizes if 0 <= s <= n):
        assert tree.root(size) == M.root(leaves[:size])
        if size:
            for index in {0, size - 1, rng.randrange(size)}:
                proof = tree.inclusion_proof(index, size)
                assert proof == M.inclusion_proof_from_leaves(index, leaves[:size])
                M.verify_inclusion(index, size, leaves[index], proof, M.root(leaves[:size]))
            size1 = rng.randint(1, size)
            proof = tree.consistency_proof(size1, size)
            assert proof == M.consistency_proof_from_leaves(size1, leaves[:size])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.integers(min_value=0, max_value=70), min_size=1, max_size=6),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_matches_reference_across_appends_and_reopen(
    tmp_path_factory: pytest.TempPathFactory, batches: list[int], seed: int
) -> None:
    directory = tmp_path_factory.mktemp("tree") / "merkle"
    rng = random.Random(seed)
    journal = Journal()
    for k, count in enumerate(batches):
        with MerkleTreeFile(directory, journal) as tree:
            assert tree.problem is None
            tree.check(expected_size=len(journal.leaves))
            tree.append(journal.extend(count))
            check_against_reference(tree, journal.leaves, rng)  # before the flush
            if k % 2:
                tree.flush()
                check_against_reference(tree, journal.leaves, rng)
        # reopen from disk
        with MerkleTreeFile(directory, journal) as tree:
            check_against_reference(tree, journal.leaves, rng)


def test_large_random_sizes(tmp_path: Path) -> None:
    rng = random.Random(7)
    for n in (15, 16, 17, 31, 32, 33, 255, 256, 257, 1000, 1023, 1024, 1025, 4097):
        directory = tmp_path / f"t{n}"
        journal = Journal(n, seed=n)
        with MerkleTreeFile(directory, journal) as tree:
            tree.rebuild(iter(journal.leaves))
        with MerkleTreeFile(directory, journal) as tree:
            check_against_reference(tree, journal.leaves, rng)
        # every stored level holds exactly size >> level nodes
        for level in range(4, n.bit_length()):
            assert (directory / f"level-{level:02d}.bin").stat().st_size == (n >> level) * 32


def test_proofs_read_one_chunk(tmp_path: Path) -> None:
    journal = Journal(5000)
    with MerkleTreeFile(tmp_path / "m", journal) as tree:
        tree.rebuild(journal.leaves)
    with MerkleTreeFile(tmp_path / "m", journal) as tree:
        journal.reads.clear()
        tree.root()  # the open chunk (5000 % 16 = 8 leaves), read once and kept
        assert journal.reads == [(4992, 5000)]
        journal.reads.clear()
        tree.inclusion_proof(1234)  # the chunk of leaf 1234
        assert journal.reads == [(1232, 1248)]
        journal.reads.clear()
        tree.consistency_proof(1234, 4321)  # the chunks of both edges
        assert len(journal.reads) <= 2


def test_small_run_stays_small(tmp_path: Path) -> None:
    journal = Journal(5)
    directory = tmp_path / "m"
    with MerkleTreeFile(directory, journal) as tree:
        tree.append(journal.leaves)
    total = sum(p.stat().st_size for p in directory.iterdir())
    assert total <= 128
    assert [p.name for p in directory.iterdir()] == ["head"]


def test_truncate_after_journal_cut(tmp_path: Path) -> None:
    rng = random.Random(3)
    journal = Journal(300)
    directory = tmp_path / "m"
    with MerkleTreeFile(directory, journal) as tree:
        tree.append(journal.leaves)
    for cut in (290, 256, 100, 17, 16, 3, 0):
        del journal.leaves[cut:]
        with MerkleTreeFile(directory, journal) as tree:
            with pytest.raises(MerkleTreeStaleError) as exc:
                tree.check(expected_size=cut)
            assert exc.value.code == "STORE_MERKLE_STALE"
            assert exc.value.details["tree_size"] > cut
            tree.truncate(cut)
            check_against_reference(tree, journal.leaves, rng)
        with MerkleTreeFile(directory, journal) as tree:
            tree.check(expected_size=cut)
            check_against_reference(tree, journal.leaves, rng)
        journal.extend(cut % 7 + 1)  # the journal grows again with other leaves
        with MerkleTreeFile(directory, journal) as tree:
            tree.append(journal.leaves[cut:])
            check_against_reference(tree, journal.leaves, rng)


def test_tree_behind_journal_catches_up(tmp_path: Path) -> None:
    journal = Journal(40)
    directory = tmp_path / "m"
    with MerkleTreeFile(directory, journal) as tree:
        tree.append(journal.leaves[:20])
    with MerkleTreeFile(directory, journal) as tree:
        with pytest.raises(MerkleTreeStaleError):
            tree.check(expected_size=40)
        tree.append(journal.leaves[20:])
        tree.check(expected_size=40)
        assert tree.root() == M.root(journal.leaves)


def _write_tree(directory: Path, n: int) -> Journal:
    journal = Journal(n)
    with MerkleTreeFile(directory, journal) as tree:
        tree.append(journal.leaves)
    return journal


def _assert_corrupt(directory: Path, journal: Journal, fragment: str) -> None:
    tree = MerkleTreeFile(directory, journal)
    assert tree.problem is not None
    assert tree.problem.code == "STORE_MERKLE_CORRUPT"
    assert fragment in tree.problem.message
    for call in (tree.check, tree.root, lambda: tree.inclusion_proof(0), lambda: tree.size):
        with pytest.raises(MerkleTreeCorruptError):
            call()
    tree.rebuild(journal.leaves)
    assert tree.problem is None
    assert tree.root() == M.root(journal.leaves)
    tree.close()
    with MerkleTreeFile(directory, journal) as reopened:
        reopened.check(expected_size=len(journal.leaves))


def test_torn_level_file_is_detected(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = _write_tree(directory, 100)
    level4 = directory / "level-04.bin"
    os.truncate(level4, level4.stat().st_size - 1)
    _assert_corrupt(directory, journal, "torn")


def test_missing_level_file_is_detected(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = _write_tree(directory, 100)
    (directory / "level-05.bin").unlink()
    _assert_corrupt(directory, journal, "holds nothing")


def test_torn_header_is_detected(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = _write_tree(directory, 100)
    head = directory / "head"
    head.write_bytes(head.read_bytes()[:30])
    _assert_corrupt(directory, journal, "torn")


def test_foreign_header_is_detected(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = _write_tree(directory, 100)
    head = directory / "head"
    head.write_bytes(b"NOTMERKL" + head.read_bytes()[8:])
    _assert_corrupt(directory, journal, "not a version 1")


def test_overwritten_node_is_detected(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = _write_tree(directory, 100)
    level4 = directory / "level-04.bin"
    data = bytearray(level4.read_bytes())
    data[-1] ^= 1  # the last node of a level is covered by the header digest
    level4.write_bytes(bytes(data))
    _assert_corrupt(directory, journal, "does not match")


def test_level_files_without_header(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = _write_tree(directory, 100)
    (directory / "head").unlink()
    _assert_corrupt(directory, journal, "without a header")


def test_interrupted_flush_is_ignored_and_overwritten(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    journal = Journal(64)
    with MerkleTreeFile(directory, journal) as tree:
        tree.append(journal.leaves[:32])
    head = (directory / "head").read_bytes()
    with MerkleTreeFile(directory, journal) as tree:
        tree.append(journal.leaves[32:])
    (directory / "head").write_bytes(head)  # as if the header rename never happened
    with MerkleTreeFile(directory, journal) as tree:
        assert tree.problem is None and tree.size == 32
        assert tree.root() == M.root(journal.leaves[:32])
        other = [M.leaf_hash(b"other %d" % i) for i in range(32)]
        journal.leaves[32:] = other
        tree.append(other)
    with MerkleTreeFile(directory, journal) as tree:
        assert tree.root() == M.root(journal.leaves)
    assert (directory / "level-04.bin").stat().st_size == 4 * 32


def test_bad_inputs(tmp_path: Path) -> None:
    journal = Journal(20)
    with MerkleTreeFile(tmp_path / "m", journal) as tree:
        with pytest.raises(MerkleLeafError):
            tree.append([b"short"])
        tree.append(journal.leaves)
        with pytest.raises(M.ProofRequestError):
            tree.inclusion_proof(20)
        with pytest.raises(M.ProofRequestError):
            tree.root(21)
        with pytest.raises(M.ProofRequestError):
            tree.consistency_proof(5, 21)
        with pytest.raises(M.ProofRequestError):
            tree.subtree_hash(2, 5)  # not a node range
        assert tree.subtree_hash(16, 20) == M.root(journal.leaves[16:20])

    def lying_source(start: int, end: int) -> list[bytes]:
        return journal.leaves[start : end - 1]

    with MerkleTreeFile(tmp_path / "m", lying_source) as tree, pytest.raises(MerkleLeafError):
        tree.root()


def test_empty_tree(tmp_path: Path) -> None:
    journal = Journal()
    with MerkleTreeFile(tmp_path / "never-created", journal) as tree:
        assert tree.size == 0 and tree.root() == M.EMPTY_ROOT
        tree.check(expected_size=0)
    assert not (tmp_path / "never-created").exists()
    with MerkleTreeFile(tmp_path / "m", journal) as tree:
        tree.rebuild([])
        assert tree.root() == M.EMPTY_ROOT
    assert (tmp_path / "m" / "head").stat().st_size == 56


def test_check_against_an_expected_root(tmp_path: Path) -> None:
    journal = Journal(50)
    with MerkleTreeFile(tmp_path / "m", journal) as tree:
        tree.append(journal.leaves)
        tree.check(expected_size=50, expected_root=M.root(journal.leaves))
        tree.check(expected_root=M.root(journal.leaves))
        with pytest.raises(MerkleTreeStaleError) as exc:
            tree.check(expected_size=50, expected_root=M.root(journal.leaves[:49]))
        assert exc.value.details["expected_root"] == M.root(journal.leaves[:49]).hex()


# -- the streaming root (verification) and its comparison with the node files -------------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=140),
    marks=st.lists(st.integers(min_value=0, max_value=160), max_size=5),
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=6),
)
def test_the_streamed_root_equals_the_tree_root_at_every_mark(
    n: int, marks: list[int], cuts: list[int]
) -> None:
    from tracelock.storage.merkle_stream import MerkleStream

    leaves = Journal(n, seed=n).leaves
    stream = MerkleStream(marks)
    position = 0
    for cut in [*cuts, n]:  # fed in arbitrary batches
        stream.add(leaves[position : position + cut])
        position = min(n, position + cut)
    assert stream.size == n and stream.root() == M.root(leaves)
    assert stream.roots == {m: M.root(leaves[:m]) for m in marks if m <= n}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=16, max_value=300), pick=st.integers(min_value=0))
def test_the_stream_finds_any_stored_node_that_differs(tmp_path: Path, n: int, pick: int) -> None:
    from tracelock.storage.directory.merkle_tree import open_node_files
    from tracelock.storage.merkle_stream import MerkleStream

    source = Journal(n, seed=n)
    directory = tmp_path / f"tree-{n}-{pick}"
    with MerkleTreeFile(directory, source) as tree:
        tree.append(source.leaves)
    cache, problem = open_node_files(directory)
    assert cache is not None and problem is None
    stream = MerkleStream([], cache)
    stream.add(source.leaves)
    assert stream.mismatch is None
    cache.close()
    nodes = [(level, index) for level in range(4, n.bit_length()) for index in range(n >> level)]
    level, index = nodes[pick % len(nodes)]
    path = directory / f"level-{level:02d}.bin"
    data = bytearray(path.read_bytes())
    data[index * 32] ^= 0x80
    path.write_bytes(bytes(data))
    cache, problem = open_node_files(directory)
    if cache is None:  # the last node of a level is tied to the header: torn, not compared
        assert problem is not None and index == (n >> level) - 1
        return
    stream = MerkleStream([], cache)
    stream.add(source.leaves)
    cache.close()
    assert stream.mismatch is not None
    assert (stream.mismatch.level, stream.mismatch.index) == (level, index)
