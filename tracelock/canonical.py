"""Public home of canonical JSON (RFC 8785); the implementation lives in :mod:`tracelock.core.canonical`."""

from tracelock.core.canonical import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    CanonicalCycle,
    CanonicalDuplicateKey,
    CanonicalError,
    CanonicalIntegerRange,
    CanonicalInvalidUtf8,
    CanonicalKeyType,
    CanonicalLoneSurrogate,
    CanonicalMalformed,
    CanonicalNotFinite,
    CanonicalTooDeep,
    CanonicalUnsupportedType,
    dumps,
    format_number,
    loads,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "CanonicalCycle",
    "CanonicalDuplicateKey",
    "CanonicalError",
    "CanonicalIntegerRange",
    "CanonicalInvalidUtf8",
    "CanonicalKeyType",
    "CanonicalLoneSurrogate",
    "CanonicalMalformed",
    "CanonicalNotFinite",
    "CanonicalTooDeep",
    "CanonicalUnsupportedType",
    "dumps",
    "format_number",
    "loads",
]
