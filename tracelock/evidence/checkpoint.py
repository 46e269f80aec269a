"""Transparency-log checkpoints (c2sp.org/tlog-checkpoint): a signed note whose text is ::

    <origin>
    <tree size, decimal, no leading zero>
    <root hash, base64>
    [extension lines, non-empty]

The root is the RFC 9162 Merkle tree hash of the journal's first ``size`` leaves.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from tracelock.core.merkle import HASH_SIZE, verify_consistency, verify_inclusion
from tracelock.errors import EvidenceError
from tracelock.evidence.note import (
    Note,
    NoteSigner,
    NoteVerifier,
    open_note,
    sign_note,
)

__all__ = [
    "MAX_TREE_SIZE",
    "Checkpoint",
    "CheckpointMalformedError",
    "CheckpointOriginError",
    "SignedCheckpoint",
    "open_checkpoint",
    "sign_checkpoint",
]

#: Tree sizes are unsigned 64-bit integers.
MAX_TREE_SIZE = 2**64 - 1


class CheckpointMalformedError(EvidenceError, ValueError):
    """A checkpoint body (or the values to build one) does not follow c2sp.org/tlog-checkpoint."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_MALFORMED"


class CheckpointOriginError(EvidenceError):
    """A checkpoint is for another log than the one expected."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_ORIGIN_MISMATCH"


def _check_line(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise CheckpointMalformedError(f"the checkpoint {what} must be a non-empty string")
    for c in value:
        if c < " ":
            raise CheckpointMalformedError(
                f"the checkpoint {what} contains the control character U+{ord(c):04X}",
                details={"what": what},
            )
    return value


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: its origin, its size and the RFC 9162 root at that size."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_line(self.origin, "origin")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise CheckpointMalformedError("the checkpoint size must be an integer")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointMalformedError(
                f"the checkpoint size {self.size} is not an unsigned 64-bit integer"
            )
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise CheckpointMalformedError(f"the checkpoint root must be {HASH_SIZE} bytes")
        object.__setattr__(self, "extensions", tuple(self.extensions))
        for ext in self.extensions:
            _check_line(ext, "extension line")

    @property
    def root_base64(self) -> str:
        return base64.b64encode(self.root).decode("ascii")

    def to_body(self) -> str:
        """The note text: origin, size, base64 root, extension lines, each ending in newline."""
        lines = [self.origin, str(self.size), self.root_base64, *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def from_body(cls, body: str) -> Checkpoint:
        """Parse a checkpoint note text (strictly: see the module docstring)."""
        if not isinstance(body, str) or not body.endswith("\n"):
            raise CheckpointMalformedError("a checkpoint body ends with a newline")
        lines = body[:-1].split("\n")
        if len(lines) < 3:
            raise CheckpointMalformedError(
                f"a checkpoint body has at least 3 lines, this one has {len(lines)}",
                details={"lines": len(lines)},
            )
        for number, line in enumerate(lines, 1):
            if not line:
                raise CheckpointMalformedError(
                    f"line {number} of the checkpoint body is empty", details={"line": number}
                )
        origin, size_text, root_text, *extensions = lines
        if not (
            size_text.isascii()
            and size_text.isdigit()
            and (size_text == "0" or not size_text.startswith("0"))
        ):
            raise CheckpointMalformedError(
                f"the checkpoint size {size_text!r} is not a decimal number without leading zeros",
                details={"size": size_text},
            )
        size = int(size_text)
        if size > MAX_TREE_SIZE:
            raise CheckpointMalformedError(
                f"the checkpoint size {size_text} does not fit in 64 bits",
                details={"size": size_text},
            )
        try:
            root = base64.b64decode(root_text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            root = b""
        if len(root) != HASH_SIZE or base64.b64encode(root).decode("ascii") != root_text:
            raise CheckpointMalformedError(
                f"the checkpoint root {root_text!r} is not the base64 of a {HASH_SIZE}-byte hash",
                details={"root": root_text},
            )
        return cls(origin, size, root, tuple(extensions))

    def sign(self, signers: NoteSigner | Sequence[NoteSigner]) -> str:
        """The signed note of this checkpoint (see :func:`sign_checkpoint`)."""
        return sign_checkpoint(self, signers)

    def verify_inclusion(self, index: int, leaf_hash: bytes, proof: Sequence[bytes]) -> None:
        """Check that ``leaf_hash`` is leaf ``index`` of this tree (raises a ``ProofError``)."""
        verify_inclusion(index, self.size, leaf_hash, proof, self.root)

    def verify_consistency(self, newer: Checkpoint, proof: Sequence[bytes]) -> None:
        """Check that this tree is a prefix of ``newer`` of the same log (raises a
        ``ProofError``, or :class:`CheckpointOriginError` for another log)."""
        if newer.origin != self.origin:
            raise CheckpointOriginError(
                f"checkpoints of different logs: {self.origin!r} and {newer.origin!r}",
                details={"origin": self.origin, "other": newer.origin},
            )
        verify_consistency(self.size, newer.size, proof, self.root, newer.root)


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint whose note was verified against trusted keys."""

    checkpoint: Checkpoint
    note: Note
    text: str


def sign_checkpoint(checkpoint: Checkpoint, signers: NoteSigner | Sequence[NoteSigner]) -> str:
    """The signed note of ``checkpoint``. The log's key name should be its origin."""
    return sign_note(checkpoint.to_body(), signers)


def open_checkpoint(
    text: str | bytes,
    trusted_keys: Iterable[NoteVerifier],
    *,
    origin: str | None = None,
) -> SignedCheckpoint:
    """Verify a signed checkpoint note (see :func:`tracelock.evidence.note.open_note` for the
    signature errors) and parse its body; ``origin``, when given, must match."""
    note = open_note(text, trusted_keys)
    checkpoint = Checkpoint.from_body(note.text)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointOriginError(
            f"the checkpoint is for {checkpoint.origin!r}, expected {origin!r}",
            details={"origin": checkpoint.origin, "expected": origin},
        )
    full = text.decode("utf-8") if isinstance(text, bytes | bytearray) else text
    return SignedCheckpoint(checkpoint, note, full)
