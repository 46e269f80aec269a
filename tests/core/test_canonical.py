"""RFC 8785 canonical JSON: conformance vectors, number formatting, both serializer paths,
every rejection of ``dumps`` and ``loads`` with its error class and location."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import re
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pytest
import rfc8785

from tracelock.core import canonical
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
    _exact_dumps,
    _fast_dumps,
    _strict_parse,
    dumps,
    format_number,
    loads,
)

REPO = Path(__file__).resolve().parents[2]
JCS_CASES = ["arrays", "french", "structures", "unicode", "values", "weird"]


def typed(value: Any) -> str:
    """A comparison key that tells 1 from 1.0 from True and 0.0 from -0.0, and sees key order."""
    return repr(value)


def nest(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


# --------------------------------------------------------------------------------------
# Conformance vectors


def test_every_jcs_vector_is_listed(vectors_dir: Path) -> None:
    names = sorted(path.stem for path in (vectors_dir / "jcs" / "input").glob("*.json"))
    assert names == JCS_CASES


@pytest.mark.parametrize("name", JCS_CASES)
def test_jcs_vector(vectors_dir: Path, name: str) -> None:
    jcs = vectors_dir / "jcs"
    source = (jcs / "input" / f"{name}.json").read_bytes()
    expected = (jcs / "output" / f"{name}.json").read_bytes()
    assert bytes.fromhex((jcs / "outhex" / f"{name}.txt").read_text()) == expected
    value = loads(source)
    assert typed(_strict_parse(source.decode("utf-8"))) == typed(value)
    assert dumps(value) == expected
    assert _exact_dumps(value) == expected
    assert dumps(loads(expected)) == expected  # canonical form is a fixed point


# --------------------------------------------------------------------------------------
# Numbers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.0, "-1"),
        (0.5, "0.5"),
        (0.7, "0.7"),
        (0.0012, "0.0012"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e-4, "0.0001"),
        (1e-5, "0.00001"),
        (1.5e-6, "0.0000015"),
        (1e-6, "0.000001"),
        (9.999999999999997e-7, "9.999999999999997e-7"),
        (1e-7, "1e-7"),
        (-1.5e-7, "-1.5e-7"),
        (123456.789, "123456.789"),
        (1e15, "1000000000000000"),
        (1e16, "10000000000000000"),
        (1.2345e20, "123450000000000000000"),
        (-1e20, "-100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (333333333.33333329, "333333333.3333333"),
        (9007199254740994.0, "9007199254740994"),
        (5e-324, "5e-324"),
        (2.2250738585072014e-308, "2.2250738585072014e-308"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (-1.7976931348623157e308, "-1.7976931348623157e+308"),
        (5, "5"),  # an int is formatted as the double it denotes
    ],
)
def test_format_number(value: float, expected: str) -> None:
    assert format_number(value) == expected
    assert float(expected) == value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_format_number_rejects_non_finite(value: float) -> None:
    with pytest.raises(CanonicalNotFinite) as caught:
        format_number(value)
    assert isinstance(caught.value, CanonicalError)
    assert isinstance(caught.value, ValueError)


def test_number_boundaries() -> None:
    assert dumps([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER]) == b"[9007199254740991,-9007199254740991]"
    assert dumps(float(MAX_SAFE_INTEGER)) == b"9007199254740991"
    assert dumps(-float(MAX_SAFE_INTEGER)) == b"-9007199254740991"
    assert dumps(1e21) == b"1e+21"
    assert dumps(-1e21) == b"-1e+21"
    for rejected in (2**53, -(2**53), 2.0**53, -(2.0**53), 1e17, 9.99e20, -1e20):
        with pytest.raises(CanonicalIntegerRange):
            dumps(rejected)


# --------------------------------------------------------------------------------------
# dumps


def test_dumps_scalars_and_structure() -> None:
    assert dumps(None) == b"null"
    assert dumps(True) == b"true"
    assert dumps(False) == b"false"
    assert dumps("") == b'""'
    assert dumps([]) == b"[]"
    assert dumps({}) == b"{}"
    assert dumps((1, "a", None)) == b'[1,"a",null]'
    assert dumps({"b": [1, 2.5, {"d": False, "c": True}], "a": ""}) == (
        b'{"a":"","b":[1,2.5,{"c":true,"d":false}]}'
    )
    assert dumps({"é": 1, "z": 2, "a": 3}) == '{"a":3,"z":2,"é":1}'.encode()


def test_keys_sort_by_utf16_code_units() -> None:
    # U+10000 is D800 DC00 in UTF-16, below U+E000 and U+FFFF: code point order differs.
    value = {"\uffff": 3, "\ue000": 2, "\U00010000": 1, "a": 0, "\U0001f600": 4}
    expected = '{"a":0,"\U00010000":1,"\U0001f600":4,"\ue000":2,"\uffff":3}'.encode()
    assert dumps(value) == expected
    assert _exact_dumps(value) == expected
    assert rfc8785.dumps(value) == expected
    assert _fast_dumps(value) is None  # orjson's code point order would be wrong: declined
    # Non-BMP characters in values only: the fast path keeps its (correct) bytes.
    only_values = {"b": "\U0001f600", "a": ["\U00010000"]}
    assert _fast_dumps(only_values) == _exact_dumps(only_values) == rfc8785.dumps(only_values)


def _spec_string(text: str) -> bytes:
    """RFC 8785 3.2.2.2, character by character, written independently of the module."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
    short["\t"] = "\\t"
    parts = []
    for char in text:
        if char in short:
            parts.append(short[char])
        elif ord(char) < 0x20:
            parts.append(f"\\u{ord(char):04x}")
        else:
            parts.append(char)
    return ('"' + "".join(parts) + '"').encode("utf-8")


def test_string_escaping_over_every_code_point() -> None:
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    expected = _spec_string(everything)
    assert _exact_dumps(everything) == expected
    assert rfc8785.dumps(everything) == expected
    # orjson may scan in blocks: shift the alignment of every character a few times.
    for shift in range(0, 33, 3):
        text = "x" * shift + everything
        assert _fast_dumps(text) == b'"' + b"x" * shift + expected[1:]
    assert dumps(everything) == expected


def test_escapes() -> None:
    assert dumps('\u0000\u001f\u007f\u2028\u2029"\\/') == (
        b'"\\u0000\\u001f\x7f\xe2\x80\xa8\xe2\x80\xa9\\"\\\\/"'
    )
    assert dumps("\b\t\n\f\r\x0b") == b'"\\b\\t\\n\\f\\r\\u000b"'


class MyStr(str):
    def __str__(self) -> str:
        return "overridden"

    def __iter__(self) -> Any:
        return iter("overridden")


class MyInt(int):
    def __repr__(self) -> str:
        return "overridden"

    def __int__(self) -> int:
        return 0


class MyFloat(float):
    def __repr__(self) -> str:
        return "overridden"


class MyDict(dict[str, Any]):
    def __iter__(self) -> Any:
        return iter(["overridden"])

    def items(self) -> Any:
        return [("overridden", 0)]

    def __getitem__(self, key: str) -> Any:
        return "overridden"


class MyList(list[Any]):
    def __iter__(self) -> Any:
        return iter(["overridden"])


class Color(enum.IntEnum):
    RED = 1


class Mood(str, enum.Enum):  # noqa: UP042 - the mixin form, whose __str__ is not the value
    HAPPY = "happy"


class Plain(enum.Enum):
    A = 1


class Point(NamedTuple):
    x: int
    y: float


def test_subclasses_are_written_as_their_builtin_value() -> None:
    value = {
        "s": MyStr("text"),
        "i": MyInt(7),
        "f": MyFloat(2.5),
        "d": MyDict(b=1, a=2),
        "l": MyList([1, 2]),
        "e": [Color.RED, Mood.HAPPY],
        "t": Point(1, 2.0),
        MyStr("k"): 0,
    }
    expected = (
        b'{"d":{"a":2,"b":1},"e":[1,"happy"],"f":2.5,"i":7,"k":0,"l":[1,2],"s":"text","t":[1,2]}'
    )
    assert dumps(value) == expected
    assert _exact_dumps(value) == expected
    assert _fast_dumps(value) is None  # orjson refuses subclasses; the exact path writes them


class CollidingKey(str):
    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@dataclasses.dataclass
class Record:
    x: int = 1


@pytest.mark.parametrize(
    ("value", "error", "pointer"),
    [
        ({1: 2}, CanonicalKeyType, ""),
        ({"a": [1, {(1, 2): 3}]}, CanonicalKeyType, "/a/1"),
        ({"a": {None: 3}}, CanonicalKeyType, "/a"),
        ({"a": float("nan")}, CanonicalNotFinite, "/a"),
        ([0, float("inf")], CanonicalNotFinite, "/1"),
        (float("-inf"), CanonicalNotFinite, ""),
        ({"n": 2**53}, CanonicalIntegerRange, "/n"),
        ({"n": [-(2**53)]}, CanonicalIntegerRange, "/n/0"),
        ({"n": 10**5000}, CanonicalIntegerRange, "/n"),
        ({"f": 1e16}, CanonicalIntegerRange, "/f"),
        ({"f": [0.5, -(2.0**60)]}, CanonicalIntegerRange, "/f/1"),
        ({"s": "x\ud800"}, CanonicalLoneSurrogate, "/s"),
        ({"s": ["\udc00\ud83d"]}, CanonicalLoneSurrogate, "/s/0"),
        ({"k\udfff": 1}, CanonicalLoneSurrogate, "/k\\udfff"),
        ({"a/b": {"c~d": {1, 2}}}, CanonicalUnsupportedType, "/a~1b/c~0d"),
        ({"u": uuid.UUID(int=1)}, CanonicalUnsupportedType, "/u"),
        ({"t": datetime.datetime(2024, 1, 1)}, CanonicalUnsupportedType, "/t"),
        ({"t": datetime.date(2024, 1, 1)}, CanonicalUnsupportedType, "/t"),
        ({"d": decimal.Decimal("1.5")}, CanonicalUnsupportedType, "/d"),
        ({"b": b"bytes"}, CanonicalUnsupportedType, "/b"),
        ({"b": bytearray(b"x")}, CanonicalUnsupportedType, "/b"),
        ({"e": Plain.A}, CanonicalUnsupportedType, "/e"),
        ({"f": orjson.Fragment(b"[1]")}, CanonicalUnsupportedType, "/f"),
        ({"r": Record()}, CanonicalUnsupportedType, "/r"),
        ({"o": object()}, CanonicalUnsupportedType, "/o"),
        ({"c": 1 + 2j}, CanonicalUnsupportedType, "/c"),
        ({"m": {"a": 1}.keys()}, CanonicalUnsupportedType, "/m"),
        ({"g": (x for x in [])}, CanonicalUnsupportedType, "/g"),
        ({CollidingKey("a"): 1, CollidingKey("a"): 2}, CanonicalDuplicateKey, "/a"),
        (nest(MAX_DEPTH + 1), CanonicalTooDeep, "/0" * MAX_DEPTH),
        ({"x": nest(MAX_DEPTH, kind="dict")}, CanonicalTooDeep, "/x" + "/k" * (MAX_DEPTH - 1)),
    ],
)
def test_dumps_rejects(value: Any, error: type[CanonicalError], pointer: str) -> None:
    for serialize in (dumps, _exact_dumps):
        with pytest.raises(error) as caught:
            serialize(value)
        assert type(caught.value) is error
        assert caught.value.details["pointer"] == pointer
        assert (pointer or "the root") in caught.value.message
        assert caught.value.code.startswith("CANONICAL_")
        dumps(caught.value.to_dict())  # the error itself has a canonical form
    assert _fast_dumps(value) is None


def test_dumps_reports_cycles() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CanonicalCycle) as caught:
        dumps(loop)
    assert caught.value.details == {"pointer": "/0", "target": ""}

    inner: dict[str, Any] = {"list": []}
    outer = {"a": {"b": inner}}
    inner["list"].append(inner)
    with pytest.raises(CanonicalCycle) as caught:
        dumps(outer)
    assert caught.value.details == {"pointer": "/a/b/list/0", "target": "/a/b"}

    shared = [1, 2]  # a shared container is not a cycle
    assert dumps({"x": shared, "y": [shared, shared]}) == b'{"x":[1,2],"y":[[1,2],[1,2]]}'


def test_depth_limit() -> None:
    for kind in ("list", "dict"):
        deepest = nest(MAX_DEPTH, kind=kind)  # MAX_DEPTH containers around a 1
        data = dumps(deepest)
        assert data == _exact_dumps(deepest)
        assert loads(data) == deepest
        assert dumps(nest(MAX_DEPTH - 1, leaf=[], kind=kind))  # the innermost one empty
        with pytest.raises(CanonicalTooDeep):
            dumps(nest(MAX_DEPTH + 1, kind=kind))
        with pytest.raises(CanonicalTooDeep):
            _exact_dumps(nest(MAX_DEPTH, leaf=[], kind=kind))
        with pytest.raises(CanonicalTooDeep):
            loads(data.replace(b"1", b"[]"))


# --------------------------------------------------------------------------------------
# The fast path


def test_fast_path_takes_the_common_cases() -> None:
    step = {
        "run_id": "run_01",
        "args": {"temperature": 0.7, "top_p": 0.0012, "stream": False, "n": 3, "x": None},
        "messages": [{"role": "user", "content": "Résume « ça » ✓ 日本語 😀"}],
        "tags": ("a", "b"),
    }
    assert _fast_dumps(step) == _exact_dumps(step) == rfc8785.dumps(step)


def test_fast_path_repairs_floats() -> None:
    value = {
        "zero": 0.0,
        "minus_zero": -0.0,
        "one": 1.0,
        "list": [30.0, -2.0, 1e-6, 2.5e-6, 1e-7, 1e21, 5e-324, 1.7976931348623157e308, 0.5],
        "root_like": [[1.0]],
        "same_text": [1.0, 1.0, 0.0],
    }
    fast = _fast_dumps(value)
    assert fast is not None
    assert fast == _exact_dumps(value) == rfc8785.dumps(value)
    assert _fast_dumps(1.0) == b"1"
    assert _fast_dumps(-0.0) == b"0"
    assert _fast_dumps([0.5, 1e-5]) == b"[0.5,0.00001]"


def test_fast_path_declines_on_look_alikes_in_strings() -> None:
    # A string holding what looks like a float token: the token count no longer proves the
    # replacement safe, so the fast path declines and the exact path writes the bytes.
    value = {"a": "x:1.0,y", "b": 1.0, "c": "[0.0]"}
    assert _fast_dumps(value) is None
    assert dumps(value) == _exact_dumps(value) == b'{"a":"x:1.0,y","b":1,"c":"[0.0]"}'
    # Without floats to repair, look-alikes do not matter.
    assert _fast_dumps({"a": "x:1.0,y", "b": 0.5}) == b'{"a":"x:1.0,y","b":0.5}'


def test_float_memo_holds_only_proven_floats() -> None:
    canonical._SAFE_FLOATS.clear()
    value = {"a": [0.7, 0.0012, 1.0, -0.0, 0.0, 1e-7, 2.5, 1e21, 0.1 + 0.2], "b": 2.5}
    expected = _exact_dumps(value)
    assert _fast_dumps(value) == expected  # cold: everything checked
    assert canonical._SAFE_FLOATS.issubset({0.7, 0.0012, 2.5, 0.1 + 0.2})
    for number in canonical._SAFE_FLOATS:
        assert orjson.dumps(number) == format_number(number).encode()
    assert _fast_dumps(value) == expected  # warm
    assert _fast_dumps({"b": 2.5, "c": 0.25}) == b'{"b":2.5,"c":0.25}'  # partly warm
    for bad in (0.0, -0.0, 1.0, float("nan"), float("inf"), 1e-7, 1e16):
        assert bad not in canonical._SAFE_FLOATS
    # The memo is bounded: it is emptied when it outgrows its limit.
    canonical._SAFE_FLOATS.update(float(i) + 0.5 for i in range(canonical._SAFE_FLOATS_LIMIT + 1))
    assert _fast_dumps([0.125]) == b"[0.125]"
    assert sorted(canonical._SAFE_FLOATS) == [0.125]


def test_fresh_floats_written_plain_are_proven_without_a_repair() -> None:
    # Python writes 1.5e-05, ECMAScript and orjson 0.000015: the float is proven canonical
    # from orjson's text alone and remembered, whatever its repr.
    canonical._SAFE_FLOATS.clear()
    value = {"p": [1.5e-05, 3.0517578125e-05, 0.00001], "q": 0.125}
    assert _fast_dumps(value) == b'{"p":[0.000015,0.000030517578125,0.00001],"q":0.125}'
    assert _fast_dumps(value) == _exact_dumps(value)
    assert sorted(canonical._SAFE_FLOATS) == [0.00001, 1.5e-05, 3.0517578125e-05, 0.125]


def test_float_repair_replaces_every_token_of_a_repeated_float() -> None:
    canonical._SAFE_FLOATS.clear()
    value = [1.0, 1.0, {"a": 1.0, "b": [1e-7, 1.0], "c": -0.0}, 1e-7, 0.5, 1.0]
    expected = b'[1,1,{"a":1,"b":[1e-7,1],"c":0},1e-7,0.5,1]'
    assert _fast_dumps(value) == expected == _exact_dumps(value)
    assert _fast_dumps(2.0) == b"2"  # a root float: the token is the whole text
    big = {"steps": [{"t": float(n), "u": n + 0.5, "s": "1.0"} for n in range(300)]}
    assert _fast_dumps(big) == _exact_dumps(big)


@pytest.mark.parametrize(
    "value",
    [
        {"u": uuid.UUID(int=7)},
        [Color.RED],
        (Mood.HAPPY,),
        [orjson.Fragment(b"1")],
        (MyStr("a"),),
        {"a": [1, (2, MyInt(3))]},
        [float("nan")],
        {"a": [float("inf")]},
        nest(MAX_DEPTH + 1),
        nest(MAX_DEPTH, leaf=[]),
    ],
)
def test_fast_path_declines(value: Any) -> None:
    assert _fast_dumps(value) is None


def test_fast_path_is_exact_on_edge_values() -> None:
    floats = [
        0.0,
        -0.0,
        1.0,
        0.1,
        1e-4,
        1e-5,
        1e-6,
        1e-7,
        1e15,
        2.0**53 - 1,
        2.0**52 - 0.5,
        1e21,
        1e22,
        5e-324,
    ]
    cases: list[Any] = [
        floats,
        {str(i): f for i, f in enumerate(floats)},
        {"\ue000": "\U00010000", "\x7f": "\u2028", "": ""},
        [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, True, False, None],
        {"nested": [[[{"x": [1.0, "1.0", ":1.0,"]}]]]},
        nest(MAX_DEPTH),
        nest(MAX_DEPTH - 1, leaf=[]),
        nest(MAX_DEPTH - 1, leaf={}),
        ["]", "}", ",", ":", "[", '"', "\\"],
    ]
    for value in cases:
        fast = _fast_dumps(value)
        exact = _exact_dumps(value)
        assert fast is None or fast == exact
        assert dumps(value) == exact


# --------------------------------------------------------------------------------------
# What the fast path's proof assumes of orjson and of CPython


class Sub(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        "\ud800",
        {"\udfff": 1},
        {1: 2},
        {Sub("k"): 1},
        2**53,
        -(2**53),
        nest(255),
        Sub("x"),
        MyInt(1),
        MyFloat(1.0),
        MyDict(),
        MyList(),
        Point(1, 2.0),
        Record(),
        datetime.datetime(2024, 1, 1),
        datetime.date(2024, 1, 1),
        datetime.time(1),
        decimal.Decimal(1),
        b"x",
        {1, 2},
        object(),
    ],
)
def test_orjson_refuses(value: Any) -> None:
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(value, option=canonical._ORJSON_OPTIONS)


def test_orjson_cycles_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(loop, option=canonical._ORJSON_OPTIONS)


def test_orjson_writes_these_without_complaint() -> None:
    # The reason for check 1: the fast path must see these types and decline.
    for value in (uuid.UUID(int=1), Plain.A, Color.RED, Mood.HAPPY, orjson.Fragment(b"{}")):
        orjson.dumps(value, option=canonical._ORJSON_OPTIONS)
        assert _fast_dumps([value]) is None


def test_referents_visit_every_value() -> None:
    leaves = ["s", 1, 2.5, True, None, orjson.Fragment(b"1"), uuid.UUID(int=1), Plain.A]
    split = Record().__dict__  # a split-table dict
    split.update({f"k{i}": leaf for i, leaf in enumerate(leaves)})
    general: dict[Any, Any] = {0: None}
    del general[0]  # a dict whose table once held a non-str key
    general.update({f"k{i}": leaf for i, leaf in enumerate(leaves)})
    containers: list[Any] = [
        leaves,
        tuple(leaves),
        {f"k{i}": leaf for i, leaf in enumerate(leaves)},
        split,
        general,
    ]
    for container in containers:
        values = container.values() if isinstance(container, dict) else container
        found = canonical._referents(container)
        for leaf in values:
            assert any(item is leaf for item in found), (type(container), leaf)
    for scalar in ("s", 1, 2.5, True, None):
        assert canonical._referents(scalar) == []


# --------------------------------------------------------------------------------------
# loads


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        ("-0", 0),
        ("1.0", 1.0),
        ("1e2", 100.0),
        ("1E+2", 100.0),
        ("-0.0", -0.0),
        ("1e-400", 0.0),
        ("1e21", 1e21),
        ("9007199254740991", MAX_SAFE_INTEGER),
        ("-9007199254740991", -MAX_SAFE_INTEGER),
        ("9007199254740991.0", float(MAX_SAFE_INTEGER)),
        (' \t\r\n{ "a" : [ true , false , null ] } \n', {"a": [True, False, None]}),
        ('"\\ud83d\\ude00 \\u00e9\\n\\/"', "\U0001f600 \u00e9\n/"),
        ('"\U0001f600"', "\U0001f600"),
        ('{"":{}}', {"": {}}),
    ],
)
def test_loads_accepts(text: str, expected: Any) -> None:
    assert typed(loads(text)) == typed(expected)
    assert typed(loads(text.encode("utf-8"))) == typed(expected)
    assert typed(_strict_parse(text)) == typed(expected)


@pytest.mark.parametrize(
    ("text", "error", "offset", "pointer"),
    [
        ('{"a":1,"a":2}', CanonicalDuplicateKey, 7, "/a"),
        ('{"a":{"b":[1,{"c":1,"c":2}]}}', CanonicalDuplicateKey, 20, "/a/b/1/c"),
        ('{"x":{"a~/":1,"a~/":2}}', CanonicalDuplicateKey, 14, "/x/a~0~1"),
        ("NaN", CanonicalNotFinite, 0, ""),
        ("[1,Infinity]", CanonicalNotFinite, 3, "/1"),
        ('{"x":-Infinity}', CanonicalNotFinite, 5, "/x"),
        ("1e400", CanonicalNotFinite, 0, ""),
        ('{"a":[-1.5e999]}', CanonicalNotFinite, 6, "/a/0"),
        ("9007199254740992", CanonicalIntegerRange, 0, ""),
        ("[-9007199254740992]", CanonicalIntegerRange, 1, "/0"),
        ("1" * 5000, CanonicalIntegerRange, 0, ""),
        ('{"n":1e17}', CanonicalIntegerRange, 5, "/n"),
        ('{"n":9007199254740993.0}', CanonicalIntegerRange, 5, "/n"),
        ('"\\ud800"', CanonicalLoneSurrogate, 1, ""),
        ('["ok","\\udc00\\ud800"]', CanonicalLoneSurrogate, 7, "/1"),
        ('{"k":"\\uD800\\u0041"}', CanonicalLoneSurrogate, 6, "/k"),
        ('{"\\ud800":1}', CanonicalLoneSurrogate, 2, ""),
        ('"a\ud800"', CanonicalLoneSurrogate, 2, ""),
        ("", CanonicalMalformed, 0, ""),
        ("   ", CanonicalMalformed, 3, ""),
        ("{", CanonicalMalformed, 1, ""),
        ("[1,]", CanonicalMalformed, 3, "/1"),
        ('{"a" 1}', CanonicalMalformed, 5, ""),
        ("{a:1}", CanonicalMalformed, 1, ""),
        ('{"a":1,}', CanonicalMalformed, 7, ""),
        ("[1 2]", CanonicalMalformed, 3, ""),
        ("01", CanonicalMalformed, 1, ""),
        ("1.", CanonicalMalformed, 1, ""),
        (".5", CanonicalMalformed, 0, ""),
        ("+1", CanonicalMalformed, 0, ""),
        ("-", CanonicalMalformed, 0, ""),
        ('"abc', CanonicalMalformed, 0, ""),
        ('["\x01"]', CanonicalMalformed, 2, "/0"),
        ('"\\x"', CanonicalMalformed, 1, ""),
        ('"\\u12"', CanonicalMalformed, 1, ""),
        ("tru", CanonicalMalformed, 0, ""),
        ("[1]x", CanonicalMalformed, 3, ""),
        ("1 2", CanonicalMalformed, 2, ""),
        ("{'a':1}", CanonicalMalformed, 1, ""),
        ("\ufeff{}", CanonicalMalformed, 0, ""),
        (
            "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
            CanonicalTooDeep,
            MAX_DEPTH,
            "/0" * MAX_DEPTH,
        ),
        ("[" * 100_000, CanonicalTooDeep, MAX_DEPTH, "/0" * MAX_DEPTH),
    ],
)
def test_loads_rejects(text: str, error: type[CanonicalError], offset: int, pointer: str) -> None:
    for data in (text, text.encode("utf-8", "surrogatepass")):
        if isinstance(data, bytes) and re.search("[\ud800-\udfff]", text):
            continue  # raw surrogates are not UTF-8: covered by the UTF-8 tests
        with pytest.raises(error) as caught:
            loads(data)
        details = caught.value.details
        assert type(caught.value) is error
        assert details["offset"] == offset
        assert details["pointer"] == pointer
        assert details["line"] == 1
        assert details["column"] == offset + 1
        assert f"line 1, column {offset + 1} (offset {offset})" in caught.value.message
        dumps(caught.value.to_dict())
    with pytest.raises(error):
        _strict_parse(text)


def test_loads_reports_lines_columns_and_keys() -> None:
    text = '{\n  "a": 1,\n  "b": {"c": 2,\n    "c": 3}\n}'
    with pytest.raises(CanonicalDuplicateKey) as caught:
        loads(text)
    assert caught.value.details == {
        "offset": text.index('"c": 3'),
        "line": 4,
        "column": 5,
        "pointer": "/b/c",
        "key": "c",
    }
    assert '"c"' in caught.value.message
    with pytest.raises(CanonicalMalformed) as malformed:
        loads("[\n1,\n2,,\n3]")
    assert (malformed.value.details["line"], malformed.value.details["column"]) == (3, 3)


@pytest.mark.parametrize(
    ("data", "byte_offset"),
    [
        (b"\xff", 0),
        (b'{"a":"\xed\xa0\x80"}', 6),  # an encoded surrogate
        (b'"\xc0\xaf"', 1),  # overlong
        (b'"caf\xc3"', 4),  # truncated
        (b'"\xf4\x90\x80\x80"', 1),  # beyond U+10FFFF
        (b"\xfe\xff\x00[\x00]", 0),  # UTF-16
    ],
)
def test_loads_rejects_invalid_utf8(data: bytes, byte_offset: int) -> None:
    with pytest.raises(CanonicalInvalidUtf8) as caught:
        loads(data)
    assert caught.value.details["byte_offset"] == byte_offset
    assert f"byte {byte_offset}" in caught.value.message


def test_loads_input_types() -> None:
    assert loads(bytearray(b"[1]")) == [1]
    assert loads(memoryview(b"[1]")) == [1]
    with pytest.raises(TypeError):
        loads(1)  # type: ignore[arg-type]


def test_canonical_output_loads_back() -> None:
    value = {"f": [1.0, 0.5, 1e21, 1e-7, -0.0], "i": MAX_SAFE_INTEGER, "s": "\U0001f600\x00"}
    data = dumps(value)
    assert dumps(loads(data)) == data


# --------------------------------------------------------------------------------------
# Errors and documentation


def test_error_classes() -> None:
    classes = [
        getattr(canonical, name)
        for name in canonical.__all__
        if isinstance(getattr(canonical, name), type)
        and issubclass(getattr(canonical, name), CanonicalError)
    ]
    assert len(classes) == 11
    codes = {cls.code for cls in classes}
    assert len(codes) == len(classes)
    documented = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    for cls in classes:
        assert issubclass(cls, ValueError)
        assert re.search(rf"^\| `{cls.code}` \|", documented, re.MULTILINE), cls.code


def test_public_module_reexports() -> None:
    import tracelock.canonical as public

    assert public.dumps is dumps
    assert public.loads is loads
    assert json.loads(dumps({"b": 1, "a": [1.5]})) == {"a": [1.5], "b": 1}
