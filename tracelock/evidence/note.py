"""Signed notes (c2sp.org/signed-note) with Ed25519 signatures.

A signed note is a text ending in a newline, a blank line, then one or more signature lines
``— <key name> <base64(4-byte key ID || signature)>``. The Ed25519 signature covers the text
(final newline included, separating blank line excluded). The key ID is
``SHA-256(key name || 0x0A || 0x01 || 32-byte public key)[:4]``, big-endian.

:func:`open_note` keeps integrity apart from trust:

* a signature line whose (name, key ID) matches a trusted key is always verified, and one
  that does not verify rejects the whole note (:class:`NoteSignatureInvalidError`);
* signatures by unknown keys are ignored (reported in :attr:`Note.unverified`), even when
  they share a name *or* an ID with a trusted key; a note with no signature by a trusted key
  is rejected with :class:`NoteUntrustedError`.

The note is parsed strictly: valid UTF-8, no control character other than newline, the text
separated from the signatures by the last blank line, every signature line well formed
(standard, canonical base64; at least one byte of signature after the key ID), at most
:data:`MAX_SIGNATURES` signature lines and :data:`MAX_NOTE_SIZE` bytes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from tracelock.errors import EvidenceError
from tracelock.evidence.keys import (
    ED25519_SIGNATURE_TYPE,
    PUBLIC_KEY_SIZE,
    KeyInvalidError,
    PrivateKey,
    PublicKey,
    check_key_name,
    is_valid_key_name,
)

__all__ = [
    "MAX_NOTE_SIZE",
    "MAX_SIGNATURES",
    "SIGNATURE_PREFIX",
    "KeyConflictError",
    "Note",
    "NoteMalformedError",
    "NoteSignature",
    "NoteSignatureInvalidError",
    "NoteSigner",
    "NoteTooLargeError",
    "NoteUntrustedError",
    "NoteVerifier",
    "open_note",
    "parse_note",
    "sign_note",
]

#: Largest signed note accepted, in bytes of UTF-8.
MAX_NOTE_SIZE = 1 << 20
#: Most signature lines accepted in one note (the spec requires at least 16).
MAX_SIGNATURES = 100
#: Every signature line starts with an em dash (U+2014) and a space.
SIGNATURE_PREFIX = "\u2014 "


# --------------------------------------------------------------------------------------------
# Errors


class NoteMalformedError(EvidenceError, ValueError):
    """The text is not a well-formed signed note (or a note text that cannot be signed)."""

    code: ClassVar[str] = "EVIDENCE_NOTE_MALFORMED"


class NoteTooLargeError(NoteMalformedError):
    """The note exceeds the size or signature-count limits."""

    code: ClassVar[str] = "EVIDENCE_NOTE_TOO_LARGE"


class NoteSignatureInvalidError(EvidenceError):
    """A signature line names a trusted key, but the signature does not verify: the note was
    altered, or signed by another key that collides on name and key ID."""

    code: ClassVar[str] = "EVIDENCE_NOTE_SIGNATURE_INVALID"


class NoteUntrustedError(EvidenceError):
    """The note carries no signature by any trusted key."""

    code: ClassVar[str] = "EVIDENCE_NOTE_UNTRUSTED"


class KeyConflictError(EvidenceError, ValueError):
    """Two different trusted keys share both a key name and a key ID."""

    code: ClassVar[str] = "EVIDENCE_KEY_CONFLICT"


# --------------------------------------------------------------------------------------------
# Values


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode_strict(text: str) -> bytes | None:
    """Standard base64 with padding, canonical only (re-encoding gives the same text)."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return data if _b64encode(data) == text else None


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, key ID and the algorithm's signature bytes."""

    name: str
    key_id: int
    signature: bytes

    def encoded(self) -> str:
        """``base64(key ID || signature)``."""
        return _b64encode(self.key_id.to_bytes(4, "big") + self.signature)

    def line(self) -> str:
        """The full signature line, newline included."""
        return f"{SIGNATURE_PREFIX}{self.name} {self.encoded()}\n"

    def __repr__(self) -> str:
        return f"NoteSignature(name={self.name!r}, key_id={self.key_id:08x})"


@dataclass(frozen=True)
class Note:
    """A verified note: its text and the signatures by trusted keys (each key once)."""

    text: str
    signatures: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...] = ()

    @property
    def signers(self) -> tuple[str, ...]:
        """Names of the trusted keys that signed."""
        return tuple(sig.name for sig in self.signatures)


class NoteVerifier:
    """A trusted Ed25519 key under a key name."""

    __slots__ = ("_key", "_key_id", "_name")

    def __init__(self, name: str, public_key: PublicKey) -> None:
        self._name = check_key_name(name)
        self._key = public_key
        self._key_id = public_key.key_id(name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def key_id(self) -> int:
        return self._key_id

    @property
    def public_key(self) -> PublicKey:
        return self._key

    def verify(self, text: bytes, signature: bytes) -> bool:
        return self._key.verify(text, signature)

    @property
    def vkey(self) -> str:
        """The verifier key string ``<name>+<8 hex key ID>+<base64(0x01 || public key)>``
        used by the Go ``sumdb/note`` tooling to configure trusted keys."""
        keydata = _b64encode(bytes([ED25519_SIGNATURE_TYPE]) + self._key.raw)
        return f"{self._name}+{self._key_id:08x}+{keydata}"

    @classmethod
    def from_vkey(cls, text: str) -> NoteVerifier:
        """Parse a verifier key string (see :attr:`vkey`); the key ID must match."""
        name, sep1, rest = text.strip().partition("+")
        id_hex, sep2, keydata = rest.partition("+")
        if not (sep1 and sep2) or not is_valid_key_name(name):
            raise KeyInvalidError(
                "a verifier key is <name>+<key ID>+<key data>", details={"vkey": text}
            )
        if len(id_hex) != 8 or any(c not in "0123456789abcdefABCDEF" for c in id_hex):
            raise KeyInvalidError(
                "the key ID of a verifier key is 8 hex digits", details={"vkey": text}
            )
        raw = _b64decode_strict(keydata)
        if raw is None or len(raw) != 1 + PUBLIC_KEY_SIZE or raw[0] != ED25519_SIGNATURE_TYPE:
            raise KeyInvalidError(
                "the key data of a verifier key is base64(0x01 || 32-byte Ed25519 key)",
                details={"vkey": text},
            )
        verifier = cls(name, PublicKey(raw[1:]))
        if verifier.key_id != int(id_hex, 16):
            raise KeyInvalidError(
                f"verifier key ID {id_hex} does not match its name and key "
                f"({verifier.key_id:08x})",
                details={"vkey": text},
            )
        return verifier

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NoteVerifier)
            and other._name == self._name
            and other._key == self._key
        )

    def __hash__(self) -> int:
        return hash((self._name, self._key))

    def __repr__(self) -> str:
        return f"NoteVerifier({self.vkey!r})"


class NoteSigner:
    """An Ed25519 private key used under a key name."""

    __slots__ = ("_key", "_key_id", "_name")

    def __init__(self, name: str, private_key: PrivateKey) -> None:
        self._name = check_key_name(name)
        self._key = private_key
        self._key_id = private_key.public_key.key_id(name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def key_id(self) -> int:
        return self._key_id

    @property
    def public_key(self) -> PublicKey:
        return self._key.public_key

    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self._name, self._key.public_key)

    def sign(self, text: bytes) -> NoteSignature:
        return NoteSignature(self._name, self._key_id, self._key.sign(text))

    def __repr__(self) -> str:
        return f"NoteSigner(name={self._name!r}, key_id={self._key_id:08x})"


# --------------------------------------------------------------------------------------------
# Signing and parsing


def _utf8(data: str | bytes, what: str) -> tuple[str, bytes]:
    if isinstance(data, bytes | bytearray):
        raw = bytes(data)
        if len(raw) > MAX_NOTE_SIZE:
            raise NoteTooLargeError(
                f"{what} is {len(raw)} bytes, more than the {MAX_NOTE_SIZE} accepted",
                details={"size": len(raw)},
            )
        try:
            return raw.decode("utf-8"), raw
        except UnicodeDecodeError as exc:
            raise NoteMalformedError(
                f"{what} is not valid UTF-8 (byte {exc.start})", details={"offset": exc.start}
            ) from None
    if not isinstance(data, str):
        raise NoteMalformedError(f"{what} must be text, not {type(data).__name__}")
    try:
        raw = data.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NoteMalformedError(
            f"{what} is not valid Unicode (character {exc.start})", details={"offset": exc.start}
        ) from None
    if len(raw) > MAX_NOTE_SIZE:
        raise NoteTooLargeError(
            f"{what} is {len(raw)} bytes, more than the {MAX_NOTE_SIZE} accepted",
            details={"size": len(raw)},
        )
    return data, raw


def _check_controls(text: str, what: str) -> None:
    for i, c in enumerate(text):
        if c < " " and c != "\n":
            raise NoteMalformedError(
                f"{what} contains the control character U+{ord(c):04X} at offset {i}",
                details={"offset": i, "character": f"U+{ord(c):04X}"},
            )


def sign_note(text: str, signers: NoteSigner | Sequence[NoteSigner]) -> str:
    """The signed note of ``text`` (non-empty, ending in a newline) with one line per signer."""
    if isinstance(signers, NoteSigner):
        signers = [signers]
    if not signers:
        raise NoteMalformedError("a signed note needs at least one signature")
    if len(signers) > MAX_SIGNATURES:
        raise NoteTooLargeError(f"at most {MAX_SIGNATURES} signatures per note")
    text, raw = _utf8(text, "note text")
    if not text.endswith("\n"):
        raise NoteMalformedError("a note text must be non-empty and end with a newline")
    _check_controls(text, "note text")
    lines = "".join(signer.sign(raw).line() for signer in signers)
    note = f"{text}\n{lines}"
    _utf8(note, "signed note")  # size limit on the result
    return note


def parse_note(data: str | bytes) -> tuple[str, list[NoteSignature]]:
    """Split a signed note into its text and signature lines, checking only their form.

    The text of an unverified note must not be trusted: use :func:`open_note`.
    """
    note, _ = _utf8(data, "signed note")
    _check_controls(note, "signed note")
    if not note.endswith("\n"):
        raise NoteMalformedError("a signed note ends with a newline")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteMalformedError("a signed note has a blank line between its text and signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise NoteMalformedError("a signed note has at least one signature line")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteTooLargeError(
            f"the note has {len(lines)} signature lines, at most {MAX_SIGNATURES} accepted",
            details={"signatures": len(lines)},
        )
    signatures: list[NoteSignature] = []
    for number, line in enumerate(lines, 1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteMalformedError(
                f"signature line {number} does not start with an em dash and a space",
                details={"line": number},
            )
        name, sep, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        if not sep or not is_valid_key_name(name):
            raise NoteMalformedError(
                f"signature line {number} has no valid key name", details={"line": number}
            )
        raw = _b64decode_strict(encoded)
        if raw is None or len(raw) < 5:
            raise NoteMalformedError(
                f"signature line {number} does not hold base64 of a key ID and a signature",
                details={"line": number},
            )
        signatures.append(NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
    return text, signatures


def open_note(data: str | bytes, trusted_keys: Iterable[NoteVerifier]) -> Note:
    """Parse a signed note and verify it against the trusted keys.

    Raises :class:`NoteMalformedError` (or :class:`NoteTooLargeError`) for a malformed note,
    :class:`NoteSignatureInvalidError` when a signature by a trusted key does not verify, and
    :class:`NoteUntrustedError` when no trusted key signed the note.
    """
    by_id: dict[tuple[str, int], NoteVerifier] = {}
    for verifier in trusted_keys:
        known = by_id.setdefault((verifier.name, verifier.key_id), verifier)
        if known.public_key != verifier.public_key:
            raise KeyConflictError(
                f"two trusted keys are named {verifier.name!r} with key ID {verifier.key_id:08x}",
                details={"name": verifier.name, "key_id": f"{verifier.key_id:08x}"},
            )
    text, signatures = parse_note(data)
    raw = text.encode("utf-8")
    verified: dict[tuple[str, int], NoteSignature] = {}
    unverified: dict[str, NoteSignature] = {}
    for sig in signatures:
        match = by_id.get((sig.name, sig.key_id))
        if match is None:
            unverified.setdefault(sig.line(), sig)
            continue
        if not match.verify(raw, sig.signature):
            raise NoteSignatureInvalidError(
                f"the signature by trusted key {sig.name} ({sig.key_id:08x}) does not verify",
                details={"name": sig.name, "key_id": f"{sig.key_id:08x}"},
            )
        verified.setdefault((sig.name, sig.key_id), sig)
    if not verified:
        raise NoteUntrustedError(
            "the note is not signed by any trusted key"
            + (
                " (signed by " + ", ".join(f"{s.name} {s.key_id:08x}" for s in signatures) + ")"
                if signatures
                else ""
            ),
            details={
                "signatures": [{"name": s.name, "key_id": f"{s.key_id:08x}"} for s in signatures],
                "trusted": [{"name": n, "key_id": f"{i:08x}"} for n, i in by_id],
            },
        )
    return Note(text, tuple(verified.values()), tuple(unverified.values()))
