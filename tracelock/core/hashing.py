"""SHA-256 helpers: every hash tracelock publishes is SHA-256, written as 64 lowercase hex digits."""

from __future__ import annotations

import hashlib
from typing import Any

from tracelock.core.canonical import dumps

__all__ = ["sha256_hex", "canonical_hash", "is_hex_digest"]

_HEX = frozenset("0123456789abcdef")


def sha256_hex(data: bytes) -> str:
    """The SHA-256 digest of ``data`` as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical form of a JSON value."""
    return hashlib.sha256(dumps(value)).hexdigest()


def is_hex_digest(text: object) -> bool:
    """True when ``text`` is a well-formed hex SHA-256 digest (64 lowercase hex digits)."""
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX
