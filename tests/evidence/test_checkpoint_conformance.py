"""The golden checkpoints in conformance/checkpoint, rebuilt byte for byte by hand: the Merkle
root with hashlib, the body as a string, the key ID with hashlib, the signature with the
``cryptography`` Ed25519 primitive, the note by concatenation. Then the module must accept
them."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tracelock import merkle as M
from tracelock.evidence.checkpoint import open_checkpoint
from tracelock.evidence.note import NoteVerifier

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "conformance" / "checkpoint"

# RFC 8032 section 7.1, TEST 1.
SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"


def mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = 1
    while k * 2 < len(d):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()


def test_golden_checkpoints_rebuilt_by_hand() -> None:
    vectors = json.loads((GOLDEN / "vectors.json").read_text("utf-8"))
    origin = vectors["origin"]
    key = vectors["key"]
    assert key["seed"] == SEED and key["public_key"] == PUBLIC and key["name"] == origin

    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(SEED))
    public = private.public_key().public_bytes_raw()
    assert public.hex() == PUBLIC
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()[:4]
    assert key["key_id"] == key_id.hex()
    assert key["vkey"] == f"{origin}+{key_id.hex()}+" + base64.b64encode(b"\x01" + public).decode()

    leaves = [bytes.fromhex(x) for x in vectors["leaves"]]
    tree = json.loads((REPO / "conformance" / "merkle" / "tree.json").read_text("utf-8"))
    assert [bytes.fromhex(x["data"]) for x in tree["leaves"][: len(leaves)]] == leaves

    assert len(vectors["checkpoints"]) == 2
    verifier = NoteVerifier.from_vkey(key["vkey"])
    for entry in vectors["checkpoints"]:
        size = entry["size"]
        root = mth(leaves[:size])
        assert entry["root"] == root.hex()
        body = f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"
        assert entry["body"] == body
        signature = private.sign(body.encode("utf-8"))
        note = body + "\n\u2014 " + origin + " " + base64.b64encode(key_id + signature).decode() + "\n"
        assert (GOLDEN / entry["file"]).read_bytes() == note.encode("utf-8")

        opened = open_checkpoint((GOLDEN / entry["file"]).read_bytes(), [verifier], origin=origin)
        assert opened.checkpoint.size == size and opened.checkpoint.root == root

    small, large = (c["size"] for c in vectors["checkpoints"])
    c = vectors["consistency"]
    assert (c["size1"], c["size2"]) == (small, large)
    M.verify_consistency(
        small, large, [bytes.fromhex(p) for p in c["proof"]], mth(leaves[:small]), mth(leaves[:large])
    )
    i = vectors["inclusion"]
    assert i["leaf_hash"] == hashlib.sha256(b"\x00" + leaves[i["index"]]).hexdigest()
    M.verify_inclusion(
        i["index"],
        i["size"],
        bytes.fromhex(i["leaf_hash"]),
        [bytes.fromhex(p) for p in i["proof"]],
        mth(leaves[: i["size"]]),
    )
