"""Signed notes (c2sp.org/signed-note): format rules, trust versus integrity, and
interoperability with the published Go ``sumdb/note`` example."""

from __future__ import annotations

import base64
import hashlib

import pytest

from tracelock.evidence.keys import KeyInvalidError, KeyNameError, PrivateKey
from tracelock.evidence.note import (
    MAX_SIGNATURES,
    KeyConflictError,
    NoteMalformedError,
    NoteSignatureInvalidError,
    NoteSigner,
    NoteTooLargeError,
    NoteUntrustedError,
    NoteVerifier,
    open_note,
    parse_note,
    sign_note,
)

# The example of the Go sumdb/note package documentation (golang.org/x/mod/sumdb/note): its
# verifier key, the seed inside its signer key "PRIVATE+KEY+PeterNeumann+c74f20a3+<base64>",
# the text and the signed note.
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SIGNER_KEYDATA = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def signer(name: str = "example.com/log", seed: int = 1) -> NoteSigner:
    return NoteSigner(name, PrivateKey.from_seed(bytes([seed]) * 32))


def test_go_example_verifies_and_is_reproduced() -> None:
    verifier = NoteVerifier.from_vkey(GO_VKEY)
    assert verifier.name == "PeterNeumann" and verifier.key_id == 0xC74F20A3
    assert verifier.vkey == GO_VKEY
    note = open_note(GO_NOTE, [verifier])
    assert note.text == GO_TEXT and note.signers == ("PeterNeumann",)
    assert open_note(GO_NOTE.encode("utf-8"), [verifier]).text == GO_TEXT

    seed = base64.b64decode(GO_SIGNER_KEYDATA)[1:]
    go_signer = NoteSigner("PeterNeumann", PrivateKey.from_seed(seed))
    assert go_signer.verifier() == verifier
    assert sign_note(GO_TEXT, go_signer) == GO_NOTE


def test_key_id_is_the_c2sp_construction() -> None:
    s = signer()
    expected = hashlib.sha256(b"example.com/log\n\x01" + s.public_key.raw).digest()[:4]
    assert s.key_id == int.from_bytes(expected, "big")
    line = sign_note("hello\n", s).splitlines()[-1]
    assert base64.b64decode(line.split(" ")[2])[:4] == expected


def test_round_trip_with_several_signers_and_unknown_signatures() -> None:
    a, b, c = signer("a.example/log", 1), signer("b.example/w", 2), signer("c.example/w", 3)
    text = "line one\n\nline three after an empty line\n"
    signed = sign_note(text, [a, b, c])
    note = open_note(signed, [a.verifier(), c.verifier()])
    assert note.text == text
    assert note.signers == ("a.example/log", "c.example/w")
    assert [s.name for s in note.unverified] == ["b.example/w"]


def test_trust_and_integrity_are_different_errors() -> None:
    s = signer()
    signed = sign_note("checkpoint body\n", s)

    # integrity: the pinned key's signature does not verify
    altered = signed.replace("checkpoint body", "checkpoint bodY")
    with pytest.raises(NoteSignatureInvalidError) as exc:
        open_note(altered, [s.verifier()])
    assert exc.value.code == "EVIDENCE_NOTE_SIGNATURE_INVALID"

    # trust: signed by a key we do not know
    with pytest.raises(NoteUntrustedError) as exc2:
        open_note(signed, [signer("other.example/log", 9).verifier()])
    assert exc2.value.code == "EVIDENCE_NOTE_UNTRUSTED"
    assert exc2.value.details["signatures"] == [
        {"name": "example.com/log", "key_id": f"{s.key_id:08x}"}
    ]
    with pytest.raises(NoteUntrustedError):
        open_note(signed, [])

    # same name, other key (so another key ID): unknown, ignored, hence untrusted
    with pytest.raises(NoteUntrustedError):
        open_note(signed, [signer("example.com/log", 2).verifier()])


def test_colliding_name_and_id_is_verified_and_fails() -> None:
    """A signature that claims the trusted (name, key ID) but was made by another key."""
    trusted, impostor = signer(seed=1), signer(seed=2)
    body = "text\n"
    forged_sig = impostor.sign(body.encode()).signature
    forged = body + "\n\u2014 example.com/log " + base64.b64encode(
        trusted.key_id.to_bytes(4, "big") + forged_sig
    ).decode() + "\n"
    with pytest.raises(NoteSignatureInvalidError):
        open_note(forged, [trusted.verifier()])
    # a bad signature by a trusted key rejects the note even next to a good one
    good = sign_note(body, trusted)
    with pytest.raises(NoteSignatureInvalidError):
        open_note(good + forged.split("\n\n")[1], [trusted.verifier()])


def test_duplicate_signatures_are_reported_once() -> None:
    s, other = signer(seed=1), signer("x.example", seed=5)
    signed = sign_note("t\n", [s, s, other, other])
    note = open_note(signed, [s.verifier()])
    assert len(note.signatures) == 1 and len(note.unverified) == 1


def test_conflicting_trusted_keys() -> None:
    s = signer()
    # two different keys cannot share a (name, key ID) in practice; build the conflict directly
    v1 = s.verifier()
    v2 = signer(seed=2).verifier()
    with pytest.raises(KeyConflictError):
        open_note(sign_note("t\n", s), [v1, _with_id(v2, v1.key_id)])
    open_note(sign_note("t\n", s), [v1, s.verifier()])  # the same key twice is fine


def _with_id(verifier: NoteVerifier, key_id: int) -> NoteVerifier:
    clone = NoteVerifier(verifier.name, verifier.public_key)
    clone._key_id = key_id
    return clone


@pytest.mark.parametrize(
    "note",
    [
        "",
        "no newline at all",
        "text\n",  # no blank line, no signature
        "text\n\n",  # blank line but no signature
        "text\n\n\u2014 example.com/log AAAAAAE=",  # no final newline
        "text\n\n- example.com/log AAAAAAE=\n",  # hyphen instead of em dash
        "text\n\n\u2014example.com/log AAAAAAE=\n",  # no space after the dash
        "text\n\n\u2014  AAAAAAE=\n",  # empty name
        "text\n\n\u2014 a+b AAAAAAE=\n",  # plus in name
        "text\n\n\u2014 example.com/log\n",  # no signature
        "text\n\n\u2014 example.com/log \n",  # empty signature
        "text\n\n\u2014 example.com/log AAAAAA==\n",  # key ID only, no signature bytes
        "text\n\n\u2014 example.com/log AAAAAAE\n",  # missing padding
        "text\n\n\u2014 example.com/log AAAAAAF=\n",  # non-canonical base64
        "text\n\n\u2014 example.com/log AAAA AAE=\n",  # space inside base64
        "text\n\n\u2014 example.com/log AAAAAAE= \n",  # trailing space
        "text\n\n\u2014 example.com/log AAAAAAE=\n\n",  # empty signature line
        "text\n\n\u2014 example.com/log AAAAAAE=\nnot a signature\n",
        "te\rxt\n\n\u2014 example.com/log AAAAAAE=\n",  # control character
        "te\txt\n\n\u2014 example.com/log AAAAAAE=\n",
    ],
)
def test_malformed_notes(note: str) -> None:
    with pytest.raises(NoteMalformedError) as exc:
        parse_note(note)
    assert exc.value.code in ("EVIDENCE_NOTE_MALFORMED", "EVIDENCE_NOTE_TOO_LARGE")
    with pytest.raises(NoteMalformedError):
        open_note(note, [signer().verifier()])


def test_invalid_utf8_and_surrogates() -> None:
    s = signer()
    raw = sign_note("caf\u00e9\n", s).encode("utf-8")
    assert open_note(raw, [s.verifier()]).text == "caf\u00e9\n"
    with pytest.raises(NoteMalformedError):
        open_note(raw.replace(b"\xc3\xa9", b"\xe9"), [s.verifier()])
    with pytest.raises(NoteMalformedError):
        parse_note("\ud800\n\n\u2014 a AAAAAAE=\n")


def test_text_separated_by_last_blank_line() -> None:
    s = signer()
    for text in ("\n", "a\n\n", "a\n\n\nb\n", "\u2014 looks like a signature AAAAAAE=\n"):
        assert open_note(sign_note(text, s), [s.verifier()]).text == text


def test_signature_limit() -> None:
    s = signer()
    signed = sign_note("t\n", s)
    extra = signed.split("\n\n")[1]
    unknown = "".join(
        f"\u2014 w{i}.example " + base64.b64encode(i.to_bytes(4, "big") + b"x" * 64).decode() + "\n"
        for i in range(15)
    )
    assert open_note(signed + unknown, [s.verifier()]).text == "t\n"  # 16 signatures accepted
    too_many = signed + extra * MAX_SIGNATURES
    with pytest.raises(NoteTooLargeError):
        open_note(too_many, [s.verifier()])
    with pytest.raises(NoteTooLargeError):
        parse_note("x" * (1 << 20) + "\n\n\u2014 a AAAAAAE=\n")


def test_sign_note_rejects_bad_text_and_names() -> None:
    s = signer()
    for bad in ("", "no final newline", "bad\x00char\n", "\ud800\n"):
        with pytest.raises(NoteMalformedError):
            sign_note(bad, s)
    with pytest.raises(NoteMalformedError):
        sign_note("t\n", [])
    with pytest.raises(KeyNameError):
        NoteSigner("bad name", PrivateKey.from_seed(b"\x01" * 32))


def test_vkey_parsing() -> None:
    v = signer().verifier()
    assert NoteVerifier.from_vkey(v.vkey) == v
    name, key_id, keydata = v.vkey.split("+", 2)
    for bad in (
        f"{name}+{key_id}",
        f"{name}+{int(key_id, 16) ^ 1:08x}+{keydata}",  # wrong key ID
        f"{name}+{key_id[:7]}+{keydata}",
        f"{name}+{key_id}+{keydata[:-4]}",
        f"{name}+{key_id}+" + base64.b64encode(b"\x02" + v.public_key.raw).decode(),
        f"bad name+{key_id}+{keydata}",
        f"+{key_id}+{keydata}",
    ):
        with pytest.raises(KeyInvalidError):
            NoteVerifier.from_vkey(bad)
    assert NoteVerifier.from_vkey(f"{name}+{key_id.upper()}+{keydata}") == v
