"""``dumps_with``: an object's canonical bytes around members serialized already are the
bytes ``dumps`` writes for the whole object (the journal writes a step's effect document
around its arguments and result this way), by the fast path and by the exact one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.core.test_canonical_properties import SETTINGS, keys, values
from tracelock.core.canonical import (
    _SAFE_FLOATS,
    MAX_DEPTH,
    CanonicalError,
    CanonicalTooDeep,
    CanonicalUnsupportedType,
    Encoded,
    _spliced,
    dumps,
    dumps_with,
)

# Objects with members of every kind, a few of them not JSON (dumps refuses them).
members = st.one_of(values, st.sampled_from([{1, 2}, b"bytes", float("nan"), 2**60, {"k": object()}]))
objects = st.dictionaries(st.one_of(keys, st.sampled_from(["args", "result", "step", "kind"])), members, max_size=8)


def _outcome(write: Any) -> tuple[str, Any]:
    try:
        return "bytes", write()
    except CanonicalError as exc:
        return type(exc).__name__, exc.message


@SETTINGS
@given(objects, st.data(), st.booleans())
def test_splicing_known_members_writes_the_bytes_dumps_writes(doc: dict[str, Any], data: st.DataObject, cold: bool) -> None:
    if cold:
        _SAFE_FLOATS.clear()
    known: dict[str, bytes] = {}
    for key in data.draw(st.lists(st.sampled_from(sorted(doc)), unique=True) if doc else st.just([])):
        try:
            known[key] = dumps(doc[key])
        except CanonicalError:
            continue
    expected = _outcome(lambda: dumps(doc))
    assert _outcome(lambda: dumps_with(doc, known)) == expected
    rest = {key: value for key, value in doc.items() if key not in known}
    assert _outcome(lambda: _spliced(doc, rest, known)) == expected  # the exact path alone


def test_a_known_member_at_the_nesting_limit_makes_the_object_too_deep() -> None:
    deep: Any = []
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    data = dumps(deep)  # MAX_DEPTH containers: a value of its own, not a member
    with pytest.raises(CanonicalTooDeep):
        dumps({"args": deep})
    with pytest.raises(CanonicalTooDeep):
        dumps_with({"args": deep}, {"args": data})
    assert dumps_with({"args": deep[0]}, {"args": dumps(deep[0])}) == dumps({"args": deep[0]})


def test_known_members_are_written_as_given_and_must_be_members() -> None:
    doc = {"step": 1, "args": {"b": 1.0, "a": [1e-7, "é"]}, "result": None, "\U0001f600": 1, "\uffff": 2}
    assert dumps_with(doc, {"args": dumps(doc["args"]), "result": b"null"}) == dumps(doc)
    with pytest.raises(ValueError):
        dumps_with(doc, {"missing": b"1"})


def test_an_encoded_carrier_is_not_a_json_value() -> None:
    with pytest.raises(CanonicalUnsupportedType):
        dumps({"payload": Encoded({"a": 1}, b'{"a":1}')})
