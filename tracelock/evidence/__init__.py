"""Evidence: Ed25519 keys, signed notes and checkpoints (and, built on them, bundles)."""

from tracelock.evidence.checkpoint import (
    Checkpoint,
    CheckpointMalformedError,
    CheckpointOriginError,
    SignedCheckpoint,
    open_checkpoint,
    sign_checkpoint,
)
from tracelock.evidence.keys import (
    PrivateKey,
    PublicKey,
    load_private_key,
    load_public_key,
    write_private_key,
    write_public_key,
)
from tracelock.evidence.note import (
    Note,
    NoteSignature,
    NoteSigner,
    NoteVerifier,
    open_note,
    sign_note,
)

__all__ = [
    "Checkpoint",
    "CheckpointMalformedError",
    "CheckpointOriginError",
    "Note",
    "NoteSignature",
    "NoteSigner",
    "NoteVerifier",
    "PrivateKey",
    "PublicKey",
    "SignedCheckpoint",
    "load_private_key",
    "load_public_key",
    "open_checkpoint",
    "open_note",
    "sign_checkpoint",
    "sign_note",
    "write_private_key",
    "write_public_key",
]
