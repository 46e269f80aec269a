"""The entry layout: the fixed template equals the general canonical encoder, parsing is strict."""

from __future__ import annotations

import hashlib

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from tracelock.core.entry import (
    ChainChecker,
    EntryFormatError,
    encode_entry,
    entry_hash,
    parse_entry,
    split_line,
)

hex64 = st.text("0123456789abcdef", min_size=64, max_size=64)
run_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True)
kinds = st.from_regex(r"[a-z][a-z0-9_]{0,8}(\.[a-z0-9_]{1,6}){0,2}", fullmatch=True)
json_leaf = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8)
metas = st.none() | st.dictionaries(st.text(min_size=1, max_size=6), json_leaf, min_size=1, max_size=3)


@given(
    seq=st.integers(0, 2**53 - 1),
    run=run_ids,
    i=st.integers(0, 10**6),
    kind=kinds,
    payload=st.none() | hex64,
    prev=hex64,
    ts=st.integers(0, 2**53 - 1),
    meta=metas,
)
def test_template_matches_reference_jcs(seq, run, i, kind, payload, prev, ts, meta) -> None:
    entry = encode_entry(
        seq=seq, run=run, i=i, kind=kind, payload=payload, prev=None if i == 0 else prev, ts=ts, meta=meta
    )
    assert entry.line == rfc8785.dumps(entry.to_dict())
    assert entry.hash == hashlib.sha256(entry.line).hexdigest()
    assert parse_entry(entry.line) == entry


# Meta texts that look like the members split_line cuts at.
tricky_text = st.sampled_from([',"prev":', ',"seq":', '"prev":null', ',"seq":7,', "x"]) | st.text(max_size=8)
tricky_metas = st.none() | st.dictionaries(tricky_text, st.none() | tricky_text | st.integers(0, 99), min_size=1, max_size=3)


@given(
    seq=st.integers(0, 2**53 - 1),
    other_seq=st.integers(0, 2**53 - 1),
    run=run_ids,
    i=st.integers(0, 10**6),
    kind=kinds,
    payload=st.none() | hex64,
    prev=hex64,
    other_prev=hex64,
    ts=st.integers(0, 2**53 - 1),
    meta=tricky_metas,
)
def test_split_line_parts_build_the_line_for_any_seq_and_prev(
    seq, other_seq, run, i, kind, payload, prev, other_prev, ts, meta
) -> None:
    """The parts around ``prev`` and ``seq`` do not depend on them: filled with another
    seq and prev (as PostgreSQL's append function fills them) they give that entry's line."""
    fields = {"run": run, "i": i, "kind": kind, "payload": payload, "ts": ts, "meta": meta}
    entry = encode_entry(seq=seq, prev=None if i == 0 else prev, **fields)
    a, b, c = split_line(entry)
    other = encode_entry(seq=other_seq, prev=None if i == 0 else other_prev, **fields)
    prev_text = b"null" if other.prev is None else b'"' + other.prev.encode() + b'"'
    assert a + prev_text + b + str(other_seq).encode() + c == other.line


def _entry(**overrides: object) -> bytes:
    fields: dict[str, object] = {"seq": 3, "run": "r", "i": 1, "kind": "effect", "payload": None, "prev": "a" * 64, "ts": 5}
    fields.update(overrides)
    return encode_entry(**fields).line  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1,2]",
        _entry().replace(b'"v":1', b'"v":2'),
        _entry().replace(b'{"i":1,', b'{"i":1, '),
        _entry().replace(b'"seq":3', b'"seq":3.0'),
        _entry().replace(b'"seq":3', b'"seq":-3'),
        _entry().replace(b'"run":"r"', b'"run":"r r"'),
        _entry().replace(b'"prev":"' + b"a" * 64, b'"prev":"' + b"A" * 64),
        _entry().replace(b'"v":1}', b'"v":1,"x":1}'),
        _entry().replace(b'"kind":"effect",', b""),
        _entry(i=0, prev=None).replace(b'"prev":null', b'"prev":"' + b"a" * 64 + b'"'),
    ],
)
def test_parse_rejects(line: bytes) -> None:
    with pytest.raises(EntryFormatError):
        parse_entry(line)


def test_prev_must_be_null_exactly_at_index_zero() -> None:
    with pytest.raises(EntryFormatError):
        encode_entry(seq=0, run="r", i=0, kind="k", payload=None, prev="a" * 64, ts=0)
    with pytest.raises(EntryFormatError):
        encode_entry(seq=0, run="r", i=1, kind="k", payload=None, prev=None, ts=0)


def test_chain_checker_flags_each_break() -> None:
    first = encode_entry(seq=0, run="r", i=0, kind="run.start", payload=None, prev=None, ts=1)
    second = encode_entry(seq=1, run="r", i=1, kind="effect", payload=None, prev=first.hash, ts=2)
    checker = ChainChecker()
    assert checker.check(first) is None
    assert checker.check(second) is None
    forged = encode_entry(seq=2, run="r", i=2, kind="effect", payload=None, prev=first.hash, ts=3)
    issue = checker.check(forged)
    assert issue is not None and issue.code == "JOURNAL_CHAIN_BROKEN"
    gap = encode_entry(seq=9, run="s", i=0, kind="run.start", payload=None, prev=None, ts=3)
    issue = ChainChecker(first_seq=3).check(gap)
    assert issue is not None and issue.code == "JOURNAL_SEQ_GAP"
    end = encode_entry(seq=0, run="t", i=0, kind="run.end", payload=None, prev=None, ts=1)
    after = encode_entry(seq=1, run="t", i=1, kind="effect", payload=None, prev=end.hash, ts=1)
    closed = ChainChecker()
    assert closed.check(end) is None
    issue = closed.check(after)
    assert issue is not None and issue.code == "JOURNAL_CHAIN_BROKEN"


def test_a_run_never_starts_a_fresh_chain_after_its_end() -> None:
    """docs/spec.md 3.2 rule 4: after run.end nothing of that run, not even i = 0."""
    start = encode_entry(seq=0, run="r", i=0, kind="run.start", payload=None, prev=None, ts=1)
    end = encode_entry(seq=1, run="r", i=1, kind="run.end", payload=None, prev=start.hash, ts=1)
    again = encode_entry(seq=2, run="r", i=0, kind="run.start", payload=None, prev=None, ts=1)
    checker = ChainChecker()
    assert checker.check(start) is None and checker.check(end) is None
    issue = checker.check(again)
    assert issue is not None and issue.code == "JOURNAL_CHAIN_BROKEN" and "after its run.end" in issue.message
    # Checking from the middle of a journal, the caller says which runs ended before.
    resumed = ChainChecker(first_seq=2, lookup=lambda run: None, closed=lambda run: run == "r")
    issue = resumed.check(again)
    assert issue is not None and issue.code == "JOURNAL_CHAIN_BROKEN"
    other = encode_entry(seq=2, run="s", i=0, kind="run.start", payload=None, prev=None, ts=1)
    assert ChainChecker(first_seq=2, lookup=lambda run: None, closed=lambda run: run == "r").check(other) is None


def test_entry_hash_is_sha256_of_line() -> None:
    line = _entry()
    assert entry_hash(line) == hashlib.sha256(line).hexdigest()


@pytest.mark.parametrize(
    ("opening", "match"),
    [
        # The canonical layout: the fast path rejects the meta.
        (b'{"i":0,', "meta"),
        # Not the canonical layout (a space), so the slow diagnosis re-encodes the entry:
        # the meta's canonical error must come out as a format error there too.
        (b'{"i": 0,', "meta cannot be canonical"),
    ],
)
def test_meta_outside_the_i_json_range_is_a_format_error(opening: bytes, match: str) -> None:
    line = opening + (
        b'"kind":"run.start","meta":{"n":9007199254740993},"payload":null,'
        b'"prev":null,"run":"r","seq":0,"ts":1,"v":1}'
    )
    with pytest.raises(EntryFormatError, match=match):
        parse_entry(line)
