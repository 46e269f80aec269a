from __future__ import annotations

import hashlib

from tracelock.storage.seen import PayloadFilter


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
