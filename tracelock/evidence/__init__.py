"""Evidence: Ed25519 keys, signed notes and checkpoints (and, built on them, bundles)."""

from tracelock.evidence.bundle import export_bundle, read_bundle_files
from tracelock.evidence.checkpoint import (
    Checkpoint,
    CheckpointMalformedError,
    CheckpointOriginError,
    SignedCheckpoint,
    open_checkpoint,
    sign_checkpoint,
)
from tracelock.evidence.history import (
    Checkpointer,
    CheckpointHistory,
    SigningKey,
    StoredCheckpoint,
    load_signing_key,
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
from tracelock.evidence.redaction import redact
from tracelock.evidence.store_verify import CheckpointVerdict, verify_store_checkpoints
from tracelock.evidence.verify import BundleReport, PinnedKey, load_pinned_keys, verify_bundle

__all__ = [
    "CheckpointVerdict",
    "BundleReport",
    "Checkpoint",
    "CheckpointHistory",
    "CheckpointMalformedError",
    "CheckpointOriginError",
    "Checkpointer",
    "Note",
    "NoteSignature",
    "NoteSigner",
    "NoteVerifier",
    "PinnedKey",
    "PrivateKey",
    "PublicKey",
    "SignedCheckpoint",
    "SigningKey",
    "StoredCheckpoint",
    "export_bundle",
    "load_pinned_keys",
    "load_private_key",
    "load_public_key",
    "load_signing_key",
    "open_checkpoint",
    "open_note",
    "read_bundle_files",
    "redact",
    "sign_checkpoint",
    "sign_note",
    "verify_bundle",
    "verify_store_checkpoints",
    "write_private_key",
    "write_public_key",
]
