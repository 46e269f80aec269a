from __future__ import annotations

import hashlib
import random

from tracelock.storage.directory.payload_filter import PayloadFilter


def test_no_false_negatives_and_few_false_positives() -> None:
    present = [hashlib.sha256(b"in %d" % n).digest() for n in range(20_000)]
    absent = [hashlib.sha256(b"out %d" % n).digest() for n in range(20_000)]
    seen = PayloadFilter(len(present))
    seen.update(present)
    assert all(seen.may_contain(digest) for digest in present)
    false_positives = sum(seen.may_contain(digest) for digest in absent)
    assert false_positives < len(absent) // 100


def test_empty_filter_contains_nothing() -> None:
    assert not PayloadFilter(0).may_contain(hashlib.sha256(b"x").digest())


def test_a_full_filter_grows_a_stage_and_keeps_its_false_positive_rate() -> None:
    """Filled past what it was sized for, the filter adds a larger stage instead of letting
    its bits fill up (a long-lived writer's false positives would each cost an index
    query): nothing added is ever reported absent, and strangers still rarely pass."""
    draw = random.Random(7)
    seen = PayloadFilter(0)
    first = [draw.randbytes(32) for _ in range(_capacity(seen))]
    seen.update(first)
    assert seen.stages == 1
    more = [draw.randbytes(32) for _ in range(len(first) // 2)]
    seen.update(more)
    assert seen.stages == 2
    assert all(seen.may_contain(digest) for digest in first[:: 97] + more)
    absent = [draw.randbytes(32) for _ in range(20_000)]
    assert sum(seen.may_contain(digest) for digest in absent) < len(absent) // 100


def _capacity(seen: PayloadFilter) -> int:
    """Items the filter's first stage holds at 16 bits each, from its own bytes."""
    return len(seen._stages[0].bits) * 8 // 16
