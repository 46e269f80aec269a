"""The real-world defaults every backend uses when nothing is injected: the clock that stamps
entries and the generator of a new store's id. Neither reaches a determinism hash."""

from __future__ import annotations

import os
import time

__all__ = ["random_store_id", "wall_clock_ms"]


def wall_clock_ms() -> int:
    """The default entry timestamp source. Timestamps are kept out of every determinism
    hash, so reading the real clock here decides nothing."""
    return time.time_ns() // 1_000_000  # tracelock: allow TL-CLOCK-001 -- entry timestamps are excluded from every determinism hash


def random_store_id() -> str:
    return os.urandom(16).hex()  # tracelock: allow TL-RAND-004 -- a store's name, never hashed
