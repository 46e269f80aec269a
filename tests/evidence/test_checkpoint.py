"""Checkpoints (c2sp.org/tlog-checkpoint): body format, signing, verification, proofs."""

from __future__ import annotations

import base64

import pytest

from tracelock import merkle as M
from tracelock.evidence.checkpoint import (
    MAX_TREE_SIZE,
    Checkpoint,
    CheckpointMalformedError,
    CheckpointOriginError,
    open_checkpoint,
    sign_checkpoint,
)
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.note import NoteSignatureInvalidError, NoteSigner, NoteUntrustedError

ROOT = bytes(range(32))
ROOT_B64 = base64.b64encode(ROOT).decode()
ORIGIN = "example.com/log"


def signer(seed: int = 1, name: str = ORIGIN) -> NoteSigner:
    return NoteSigner(name, PrivateKey.from_seed(bytes([seed]) * 32))


def test_body_round_trip() -> None:
    cp = Checkpoint(ORIGIN, 20852163, ROOT)
    assert cp.to_body() == f"{ORIGIN}\n20852163\n{ROOT_B64}\n"
    assert Checkpoint.from_body(cp.to_body()) == cp
    ext = Checkpoint(ORIGIN, 0, M.EMPTY_ROOT, ("ext one", "ext two"))
    assert ext.to_body().endswith("\next one\next two\n")
    assert Checkpoint.from_body(ext.to_body()) == ext
    big = Checkpoint(ORIGIN, MAX_TREE_SIZE, ROOT)
    assert Checkpoint.from_body(big.to_body()) == big


@pytest.mark.parametrize(
    "body",
    [
        f"{ORIGIN}\n1\n{ROOT_B64}",  # no final newline
        f"{ORIGIN}\n1\n",  # two lines
        f"\n1\n{ROOT_B64}\n",  # empty origin
        f"{ORIGIN}\n01\n{ROOT_B64}\n",  # leading zero
        f"{ORIGIN}\n+1\n{ROOT_B64}\n",
        f"{ORIGIN}\n-1\n{ROOT_B64}\n",
        f"{ORIGIN}\n1_0\n{ROOT_B64}\n",
        f"{ORIGIN}\n 1\n{ROOT_B64}\n",
        f"{ORIGIN}\n\u0661\n{ROOT_B64}\n",  # Arabic-Indic digit one
        f"{ORIGIN}\n{2**64}\n{ROOT_B64}\n",  # beyond uint64
        f"{ORIGIN}\n\n{ROOT_B64}\n",
        f"{ORIGIN}\n1\n{ROOT_B64[:-1]}\n",  # bad padding
        f"{ORIGIN}\n1\n{base64.b64encode(ROOT[:31]).decode()}\n",  # 31 bytes
        f"{ORIGIN}\n1\n{ROOT.hex()}\n",  # hex, not base64
        f"{ORIGIN}\n1\n{ROOT_B64}\n\n",  # empty extension line
        f"{ORIGIN}\n1\n{ROOT_B64}\next\n\n",
    ],
)
def test_malformed_bodies(body: str) -> None:
    with pytest.raises(CheckpointMalformedError) as exc:
        Checkpoint.from_body(body)
    assert exc.value.code == "EVIDENCE_CHECKPOINT_MALFORMED"


def test_invalid_values() -> None:
    for args in (
        ("", 1, ROOT),
        ("a\nb", 1, ROOT),
        (ORIGIN, -1, ROOT),
        (ORIGIN, 2**64, ROOT),
        (ORIGIN, True, ROOT),
        (ORIGIN, 1, ROOT[:31]),
    ):
        with pytest.raises(CheckpointMalformedError):
            Checkpoint(*args)  # type: ignore[arg-type]
    with pytest.raises(CheckpointMalformedError):
        Checkpoint(ORIGIN, 1, ROOT, ("",))


def test_sign_and_open() -> None:
    s = signer()
    cp = Checkpoint(ORIGIN, 5, ROOT)
    text = sign_checkpoint(cp, s)
    assert text.startswith(cp.to_body() + "\n\u2014 example.com/log ")
    assert cp.sign(s) == text
    opened = open_checkpoint(text, [s.verifier()], origin=ORIGIN)
    assert opened.checkpoint == cp
    assert opened.text == text
    assert opened.note.signers == (ORIGIN,)
    assert open_checkpoint(text.encode(), [s.verifier()]).checkpoint == cp

    with pytest.raises(CheckpointOriginError) as exc:
        open_checkpoint(text, [s.verifier()], origin="example.com/other")
    assert exc.value.code == "EVIDENCE_CHECKPOINT_ORIGIN_MISMATCH"
    with pytest.raises(NoteUntrustedError):
        open_checkpoint(text, [signer(2).verifier()])
    with pytest.raises(NoteSignatureInvalidError):
        open_checkpoint(text.replace("\n5\n", "\n6\n"), [s.verifier()])


def test_signed_note_with_bad_body_is_malformed_checkpoint() -> None:
    from tracelock.evidence.note import sign_note

    s = signer()
    with pytest.raises(CheckpointMalformedError):
        open_checkpoint(sign_note("just one line\n", s), [s.verifier()])


def test_checkpoint_proofs() -> None:
    leaves = [M.leaf_hash(b"%d" % i) for i in range(10)]
    old = Checkpoint(ORIGIN, 4, M.root(leaves[:4]))
    new = Checkpoint(ORIGIN, 10, M.root(leaves))
    old.verify_consistency(new, M.consistency_proof_from_leaves(4, leaves))
    new.verify_inclusion(7, leaves[7], M.inclusion_proof_from_leaves(7, leaves))
    with pytest.raises(M.ProofError):
        new.verify_inclusion(6, leaves[7], M.inclusion_proof_from_leaves(7, leaves))
    forked = Checkpoint(ORIGIN, 10, M.root(leaves[:9] + [M.leaf_hash(b"x")]))
    with pytest.raises(M.ProofRootMismatchError):
        old.verify_consistency(forked, M.consistency_proof_from_leaves(4, leaves))
    with pytest.raises(CheckpointOriginError):
        old.verify_consistency(Checkpoint("other", 10, new.root), [])
