"""Property tests of canonical JSON: against the reference ``rfc8785`` package, fast path
against exact path, round trips, and ``loads`` against the strict reference parser."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import orjson
import rfc8785
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tracelock.core.canonical import (
    _ORJSON_OPTIONS,
    _SAFE_FLOATS,
    MAX_SAFE_INTEGER,
    CanonicalError,
    CanonicalIntegerRange,
    _exact_dumps,
    _fast_dumps,
    _strict_parse,
    dumps,
    format_number,
    loads,
)

OPTIONS = _ORJSON_OPTIONS
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters that matter to escaping and to UTF-16 ordering: controls, the escaped ones,
# DEL, the line separators, both sides of the surrogate block, and beyond U+FFFF.
SPECIAL = [
    "\x00", "\x01", "\x1f", "\x7f", '"', "\\", "/", "\b", "\t", "\n", "\f", "\r", "\x0b",
    "\u2028", "\u2029", "\ud7ff", "\ue000", "\uf8ff", "\ufb33", "\ufffd", "\uffff",
    "\U00010000", "\U0001f600", "\U0010ffff", "a", "A", "é", "€", "0", ":", ",",
]  # fmt: skip
characters = st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=["Cs"]))
texts = st.text(characters, max_size=6)
keys = st.one_of(texts, st.sampled_from(SPECIAL), st.text(st.sampled_from(SPECIAL), max_size=3))

integers = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.sampled_from([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER - 1, 0, -1, 2**31]),
)


def _double(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


EDGE_FLOATS = [
    0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 0.7, 0.0012, 1e-4, 1e-5, 1e-6, 9.999999999999997e-7,
    1e-7, 1e15, 4503599627370495.5, 9007199254740991.0, 1e21, 1e22, 1.5e300, 5e-324,
    2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
]  # fmt: skip
finite_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(0, 2**64 - 1).map(_double).filter(math.isfinite),  # any bit pattern
    st.integers(0, 2**52 - 1).map(_double),  # subnormals
    st.sampled_from(EDGE_FLOATS),
    st.integers(-(10**6), 10**6).map(float),  # integral floats
)
scalars = st.one_of(st.none(), st.booleans(), integers, finite_floats, texts)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=25,
)


def _in_plain_integer_gap(value: Any) -> bool:
    """Whether ``value`` holds a float that dumps refuses (2**53-1 < |x| < 1e21)."""
    if isinstance(value, float):
        return MAX_SAFE_INTEGER < abs(value) < 1e21
    if isinstance(value, dict):
        return any(_in_plain_integer_gap(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_in_plain_integer_gap(item) for item in value)
    return False


@SETTINGS
@given(values)
def test_dumps_matches_rfc8785(value: Any) -> None:
    reference = rfc8785.dumps(value)
    if _in_plain_integer_gap(value):
        try:
            dumps(value)
        except CanonicalIntegerRange:
            return
        raise AssertionError("a float in the plain-integer gap was accepted")
    assert dumps(value) == reference
    assert _exact_dumps(value) == reference


@SETTINGS
@given(values, st.booleans())
def test_fast_path_equals_exact_path(value: Any, cold: bool) -> None:
    if cold:
        _SAFE_FLOATS.clear()
    fast = _fast_dumps(value)
    try:
        exact = _exact_dumps(value)
    except CanonicalError:
        assert fast is None
        return
    assert fast is None or fast == exact


@SETTINGS
@given(st.lists(finite_floats, min_size=1, max_size=8), st.lists(texts, max_size=3), st.booleans())
def test_fast_path_float_repair(numbers: list[float], strings: list[str], cold: bool) -> None:
    assume(not _in_plain_integer_gap(numbers))
    if cold:
        _SAFE_FLOATS.clear()
    value = {"n": numbers, "s": strings, "m": {"x": numbers[0]}}
    fast = _fast_dumps(value)
    assert fast is None or fast == _exact_dumps(value) == rfc8785.dumps(value)


@SETTINGS
@given(st.one_of(st.integers(0, 2**64 - 1).map(_double), st.floats()))
def test_format_number_matches_rfc8785(number: float) -> None:
    if not math.isfinite(number):
        return
    text = format_number(number)
    assert text.encode() == rfc8785.dumps(number)
    assert float(text) == number


@SETTINGS
@given(values)
def test_round_trip(value: Any) -> None:
    assume(not _in_plain_integer_gap(value))
    data = dumps(value)
    again = loads(data)
    assert dumps(again) == data
    assert loads(data.decode("utf-8")) == again


FRAGMENTS = [
    '"', "\\", ",", ":", "[", "]", "{", "}", "1", "0", "-", ".", "e", "+", " ", "\n",
    "NaN", "Infinity", "\\ud800", "\\udc00", "\\u00", "\\ud83d\\ude00", "\ud800", "\x00",
    "true", "nul", '"a":1,', "1e400", "9007199254740992", "1e17", "\ufeff", "é",
]  # fmt: skip


@st.composite
def json_texts(draw: st.DrawFn) -> str:
    text = json.dumps(
        draw(values),
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 0, 2])),
        separators=draw(st.sampled_from([None, (",", ":"), (" , ", " : ")])),
    )
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        if action == "insert":
            text = text[:position] + draw(st.sampled_from(FRAGMENTS)) + text[position:]
        elif action == "delete":
            text = text[:position] + text[position + draw(st.integers(1, 3)) :]
        else:
            end = draw(st.integers(position, len(text)))
            text = text[:end] + text[position:end] + text[end:]
    return text


def _outcome(parse: Any, text: str) -> tuple[str, ...]:
    try:
        return ("ok", repr(parse(text)))  # repr tells 1 from 1.0 and 0.0 from -0.0
    except CanonicalError as error:
        return (type(error).__name__, str(error.details.get("offset")))


@SETTINGS
@given(json_texts())
def test_loads_agrees_with_the_reference_parser(text: str) -> None:
    expected = _outcome(_strict_parse, text)
    assert _outcome(loads, text) == expected
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return  # a raw surrogate: not representable as UTF-8
    assert _outcome(loads, data) == expected
    if expected[0] == "ok":
        assert dumps(loads(dumps(loads(text)))) == dumps(loads(text))


@SETTINGS
@given(st.lists(finite_floats, min_size=1, max_size=10))
def test_orjson_writes_a_float_the_same_wherever_it_is(numbers: list[float]) -> None:
    # The fast path's float check compares orjson's text of the floats alone with their
    # canonical text, and assumes a float is written the same inside any document.
    alone = [orjson.dumps(number) for number in numbers]
    assert orjson.dumps(numbers) == b"[" + b",".join(alone) + b"]"
    nested = orjson.dumps({"a": [{"b": number} for number in numbers]}, option=OPTIONS)
    assert nested == b'{"a":[' + b",".join(b'{"b":' + text + b"}" for text in alone) + b"]}"


@settings(max_examples=2000, deadline=None)
@given(
    st.one_of(
        st.integers(0, 2**64 - 1).map(_double),
        st.floats(1e-7, 1e17),
        st.decimals(min_value=-(10**16), max_value=10**16, places=8, allow_nan=False).map(float),
    )
)
def test_orjson_plain_float_text_is_canonical(number: float) -> None:
    # The fast path takes a float token orjson writes in plain notation and not ending in
    # ".0" as the canonical text: orjson's digits are the shortest that round-trip (closest
    # to the value), and its plain notation stays within ECMAScript's plain range.
    assume(math.isfinite(number))
    text = orjson.dumps(number)
    if b"e" in text or text.endswith(b".0"):
        return
    assert 1e-6 <= abs(number) < 1e16
    assert text.decode() == format_number(number)


FRESH = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FRESH
@given(
    st.lists(finite_floats, min_size=1, max_size=12),
    st.lists(st.sampled_from(["1.0", "[1e-7]", ":0.5,", "x"]), max_size=2),
    st.booleans(),
)
def test_fresh_floats_in_a_step_match_rfc8785(
    numbers: list[float], notes: list[str], cold: bool
) -> None:
    # A journal step with floats dumps has not seen before (repeated inside the step, next
    # to each other, at several depths), and strings that look like float tokens.
    assume(not _in_plain_integer_gap(numbers))
    if cold:
        _SAFE_FLOATS.clear()
    step = {
        "args": {"temperature": numbers[0], "values": numbers, "notes": notes},
        "budget": {"cost_usd": numbers[-1], "pair": [numbers[-1], numbers[0]]},
        "seq": 7,
    }
    assert dumps(step) == rfc8785.dumps(step)
    fast = _fast_dumps(step)
    assert fast is None or fast == _exact_dumps(step)
