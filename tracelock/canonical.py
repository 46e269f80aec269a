"""Public home of canonical JSON (RFC 8785); the implementation lives in :mod:`tracelock.core.canonical`."""

from tracelock.core.canonical import MAX_SAFE_INTEGER, CanonicalError, dumps, format_number, loads

__all__ = ["MAX_SAFE_INTEGER", "CanonicalError", "dumps", "format_number", "loads"]
