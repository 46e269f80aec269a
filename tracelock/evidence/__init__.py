"""Evidence: Ed25519 keys, signed notes and checkpoints (and, built on them, bundles).

The names that work on a store (exporting, redacting, the checkpoint history, verifying a
store) are imported when first used (PEP 562): the offline bundle verifier, and whatever
imports it, loads no storage backend and no runtime.
"""

import importlib
from typing import TYPE_CHECKING, Any

from tracelock.evidence.bundle_files import read_bundle_files
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
from tracelock.evidence.verify import BundleReport, PinnedKey, load_pinned_keys, verify_bundle

if TYPE_CHECKING:
    from tracelock.evidence.bundle import export_bundle
    from tracelock.evidence.history import (
        Checkpointer,
        CheckpointHistory,
        SigningKey,
        StoredCheckpoint,
        load_signing_key,
    )
    from tracelock.evidence.redaction import redact
    from tracelock.evidence.store_verify import CheckpointVerdict, verify_store_checkpoints

#: The module of each name that needs a store, imported when the name is first used.
_ON_A_STORE = {
    "export_bundle": "tracelock.evidence.bundle",
    "Checkpointer": "tracelock.evidence.history",
    "CheckpointHistory": "tracelock.evidence.history",
    "SigningKey": "tracelock.evidence.history",
    "StoredCheckpoint": "tracelock.evidence.history",
    "load_signing_key": "tracelock.evidence.history",
    "redact": "tracelock.evidence.redaction",
    "CheckpointVerdict": "tracelock.evidence.store_verify",
    "verify_store_checkpoints": "tracelock.evidence.store_verify",
}


def __getattr__(name: str) -> Any:
    module = _ON_A_STORE.get(name)
    if module is None:
        raise AttributeError(f"module 'tracelock.evidence' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
