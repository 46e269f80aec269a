"""Storage errors. Each says what failed and where; none is ever silently repaired."""

from __future__ import annotations

from tracelock.errors import StoreError

__all__ = [
    "DurabilityError",
    "IndexTamperedError",
    "JournalCorruptError",
    "MerkleLeafError",
    "MerkleTreeCorruptError",
    "MerkleTreeError",
    "MerkleTreeStaleError",
    "MerkleTreeTamperedError",
    "PayloadMissingError",
    "PayloadRedactedError",
    "RunNotFoundError",
    "SegmentCorruptError",
    "StoreClosedError",
    "StoreConnectionError",
    "StoreConnectionLostError",
    "StoreDriverMissingError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreLockedError",
    "StoreNotEmptyError",
    "StoreNotFoundError",
    "StorePermissionError",
    "StoreReadOnlyError",
    "StoreSchemaTooNewError",
    "StoreUnsupportedError",
]


class StoreLockedError(StoreError):
    """The store's writer lock could not be taken (the system refused the lock file).
    Writers wait for one another, one commit at a time; none is refused for another."""

    code = "STORE_LOCKED"


class StoreNotFoundError(StoreError):
    """No store exists at the given location (and creation was not requested)."""

    code = "STORE_NOT_FOUND"


class StoreFormatError(StoreError):
    """The location is not a tracelock store, or one of an unsupported format version."""

    code = "STORE_FORMAT"


class StoreReadOnlyError(StoreError):
    """A write was attempted through a read-only handle, or on a store whose file system is
    mounted read-only."""

    code = "STORE_READ_ONLY"


class StoreClosedError(StoreError):
    """The store handle was closed (or failed) and accepts no more work."""

    code = "STORE_CLOSED"


class DurabilityError(StoreError):
    """Writing or fsyncing the journal failed. Fatal for the handle: never retried, because
    after a failed fsync the kernel may have dropped the dirty pages, so a retry that
    succeeds would acknowledge data that is not on disk."""

    code = "STORE_DURABILITY_FAILED"


class StoreFullError(DurabilityError):
    """The device is full (ENOSPC/EDQUOT): the journal or the index cannot grow. Fatal for
    the handle like any durability error."""

    code = "STORE_FULL"


class JournalCorruptError(StoreError):
    """A journal record is damaged in a way no crash leaves (``docs/spec.md`` 3.5), or the
    journal ends before its synced mark: corruption or tampering. Reported, never repaired."""

    code = "JOURNAL_CORRUPT"


class SegmentCorruptError(JournalCorruptError):
    """A sealed segment of the journal (``docs/spec.md`` 3.8) fails its own checks, or is
    missing where the journal needs it: corruption or tampering, never repaired."""

    code = "JOURNAL_SEGMENT_CORRUPT"


class IndexTamperedError(StoreError):
    """``index.sqlite`` (a cache) is readable and covers only bytes that were written, yet
    states something the journal contradicts: it was altered. Never rebuilt silently; the
    remedy (delete the file to have it rebuilt) is in the message."""

    code = "STORE_INDEX_TAMPERED"


class PayloadMissingError(StoreError):
    """An entry references a payload that is not in the payload store."""

    code = "PAYLOAD_MISSING"


class PayloadRedactedError(StoreError):
    """The payload was removed by a recorded redaction; only its hash remains."""

    code = "PAYLOAD_REDACTED"


class RunNotFoundError(StoreError):
    """No run with that id exists in the store."""

    code = "RUN_NOT_FOUND"


class StoreConnectionError(StoreError):
    """A server backend could not be reached or refused the connection (a wrong connection
    string, an unreachable server, a failed login). The message never holds the password."""

    code = "STORE_CONNECTION_FAILED"


class StoreConnectionLostError(DurabilityError):
    """A server backend stopped answering a writer: the connection was lost, the server
    gave no answer within the writer's statement timeout, or cancelled the statement at it
    (``docs/storage-postgres.md``, "When the server goes away"). The append's outcome is
    unknown, so it is never retried, and the handle accepts no more work (a
    :class:`DurabilityError`); every append waiting in the handle fails with it too."""

    code = "STORE_CONNECTION_LOST"


class StorePermissionError(StoreError):
    """The server's account lacks a privilege the store needs (to create its tables, or to
    read or write them); or the system refuses this user a file of a directory store."""

    code = "STORE_PERMISSION_DENIED"


class StoreSchemaTooNewError(StoreFormatError):
    """The store's schema is of a newer version than this tracelock knows: it is refused,
    never downgraded or written to."""

    code = "STORE_SCHEMA_TOO_NEW"


class StoreDriverMissingError(StoreError):
    """The database driver a backend needs is not installed (``pip install 'tracelock[postgres]'``)."""

    code = "STORE_DRIVER_MISSING"


class StoreUnsupportedError(StoreError):
    """The operation is not supported on this storage backend yet."""

    code = "STORE_UNSUPPORTED"


class StoreNotEmptyError(StoreError):
    """The destination of ``tracelock store copy`` already holds entries: a copy never merges."""

    code = "STORE_NOT_EMPTY"


class MerkleTreeError(StoreError):
    """Base of the Merkle node file errors."""

    code = "STORE_MERKLE_ERROR"


class MerkleTreeCorruptError(MerkleTreeError):
    """The Merkle node files are torn, inconsistent or unreadable; rebuild them from the journal."""

    code = "STORE_MERKLE_CORRUPT"


class MerkleTreeStaleError(MerkleTreeError):
    """The Merkle node files describe a tree of another size than the journal's."""

    code = "STORE_MERKLE_STALE"


class MerkleTreeTamperedError(MerkleTreeError):
    """The Merkle node files are well formed but hold a node that differs from the one the
    journal gives: they were altered. Reported, never rebuilt silently (delete the
    ``merkle`` directory to have it rebuilt from the journal)."""

    code = "STORE_MERKLE_TAMPERED"


class MerkleLeafError(MerkleTreeError, ValueError):
    """A leaf hash given to the tree (appended, or returned by the leaf source) is not a
    32-byte hash, or the leaf source returned the wrong number of hashes."""

    code = "STORE_MERKLE_BAD_LEAF"
