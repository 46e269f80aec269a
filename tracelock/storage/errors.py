"""Storage errors. Each says what failed and where; none is ever silently repaired."""

from __future__ import annotations

from tracelock.errors import StoreError

__all__ = [
    "DurabilityError",
    "JournalCorruptError",
    "PayloadMissingError",
    "PayloadRedactedError",
    "RunNotFoundError",
    "StoreClosedError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
]


class StoreLockedError(StoreError):
    """Another process holds the store's writer lock."""

    code = "STORE_LOCKED"


class StoreNotFoundError(StoreError):
    """No store exists at the given location (and creation was not requested)."""

    code = "STORE_NOT_FOUND"


class StoreFormatError(StoreError):
    """The location is not a tracelock store, or one of an unsupported format version."""

    code = "STORE_FORMAT"


class StoreReadOnlyError(StoreError):
    """A write was attempted through a read-only handle."""

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
    """The device is full (ENOSPC/EDQUOT). Fatal for the handle like any durability error."""

    code = "STORE_FULL"


class JournalCorruptError(StoreError):
    """A journal record is damaged in a way no crash leaves (``docs/spec.md`` 3.5), or the
    journal ends before its synced mark: corruption or tampering. Reported, never repaired."""

    code = "JOURNAL_CORRUPT"


class PayloadMissingError(StoreError):
    """An entry references a payload that is not in the payload store."""

    code = "PAYLOAD_MISSING"


class PayloadRedactedError(StoreError):
    """The payload was removed by a recorded redaction; only its hash remains."""

    code = "PAYLOAD_REDACTED"


class RunNotFoundError(StoreError):
    """No run with that id exists in the store."""

    code = "RUN_NOT_FOUND"
