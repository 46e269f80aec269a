"""RFC 8785 (JCS) canonical JSON: ``dumps`` to canonical bytes, ``loads`` as a strict parser.

Two serializers live here and must agree byte for byte:

* the **exact path** (:func:`_exact_dumps`), a direct, readable transcription of RFC 8785
  sections 3.2.2 (serialization of primitives, with ECMAScript number formatting) and 3.2.3
  (members sorted by their UTF-16 code units). It is the reference, and it is the only
  place that builds error messages for ``dumps``;
* the **fast path** (:func:`_fast_dumps`), which lets ``orjson`` write the bytes and then
  proves, with cheap checks on the input and on the output, that they are the bytes the
  exact path would write. Whenever a check cannot prove it, the fast path declines and
  :func:`dumps` runs the exact path. The argument for each check is written next to it.

One deliberate restriction beyond RFC 8785 keeps ``dumps`` and ``loads`` inverse to each other
and every emitted number I-JSON (RFC 7493) interoperable: an integer outside
``+/-(2**53-1)`` is rejected, and so is a float in that same open range below ``1e21``
(ECMAScript would write it as such an integer, e.g. ``1e17`` as ``100000000000000000``).
Nesting is limited to :data:`MAX_DEPTH` containers, so that acceptance never depends on
how deep the caller's own stack happens to be.
"""

from __future__ import annotations

import gc
import json
import math
import re
import sys
from collections.abc import Mapping
from functools import partial
from itertools import chain, compress
from operator import is_
from typing import Any, ClassVar, Final, NoReturn

import orjson

from tracelock.errors import CanonicalError

__all__ = [
    "CanonicalError",
    "CanonicalUnsupportedType",
    "CanonicalKeyType",
    "CanonicalNotFinite",
    "CanonicalIntegerRange",
    "CanonicalLoneSurrogate",
    "CanonicalDuplicateKey",
    "CanonicalTooDeep",
    "CanonicalCycle",
    "CanonicalMalformed",
    "CanonicalInvalidUtf8",
    "dumps",
    "dumps_with",
    "Encoded",
    "loads",
    "format_number",
    "MAX_SAFE_INTEGER",
    "MAX_DEPTH",
]

#: I-JSON (RFC 7493) interoperable integer range: +/-(2**53 - 1).
MAX_SAFE_INTEGER: Final = 2**53 - 1

#: Most containers (objects and arrays) a value may nest, the outermost one included.
MAX_DEPTH: Final = 128

# Doubles in (MAX_SAFE_INTEGER, 1e21) are all integers (every double >= 2**52 is), and
# ECMAScript writes them in plain integer notation, outside the I-JSON range.
_PLAIN_INTEGER_LIMIT: Final = 1e21


# --------------------------------------------------------------------------------------
# Errors


class CanonicalUnsupportedType(CanonicalError):
    """``dumps`` met a value of a type that has no JSON form (set, bytes, datetime, ...)."""

    code: ClassVar[str] = "CANONICAL_UNSUPPORTED_TYPE"


class CanonicalKeyType(CanonicalError):
    """``dumps`` met an object key that is not a string."""

    code: ClassVar[str] = "CANONICAL_KEY_TYPE"


class CanonicalNotFinite(CanonicalError):
    """NaN or an infinity: in a value given to ``dumps``, or in JSON text (``NaN``,
    ``Infinity``, or a number too large for a double)."""

    code: ClassVar[str] = "CANONICAL_NOT_FINITE"


class CanonicalIntegerRange(CanonicalError):
    """An integer outside +/-(2**53-1), or a number that would be written as one."""

    code: ClassVar[str] = "CANONICAL_INTEGER_RANGE"


class CanonicalLoneSurrogate(CanonicalError):
    """A string holds a UTF-16 surrogate code point that is not part of a pair."""

    code: ClassVar[str] = "CANONICAL_LONE_SURROGATE"


class CanonicalDuplicateKey(CanonicalError):
    """An object has the same member name twice."""

    code: ClassVar[str] = "CANONICAL_DUPLICATE_KEY"


class CanonicalTooDeep(CanonicalError):
    """Containers nest deeper than :data:`MAX_DEPTH`."""

    code: ClassVar[str] = "CANONICAL_TOO_DEEP"


class CanonicalCycle(CanonicalError):
    """A value given to ``dumps`` contains itself."""

    code: ClassVar[str] = "CANONICAL_CYCLE"


class CanonicalMalformed(CanonicalError):
    """JSON text that does not follow the RFC 8259 grammar."""

    code: ClassVar[str] = "CANONICAL_MALFORMED"


class CanonicalInvalidUtf8(CanonicalError):
    """Bytes given to ``loads`` are not valid UTF-8."""

    code: ClassVar[str] = "CANONICAL_INVALID_UTF8"


def _pointer_token(key: str) -> str:
    """Escape one JSON Pointer reference token (RFC 6901 section 3)."""
    return key.replace("~", "~0").replace("/", "~1")


def _printable(text: str) -> str:
    """``text`` with lone surrogates shown as ``\\udXXX``, so messages and details encode."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _where(pointer: str) -> str:
    return f"at {pointer}" if pointer else "at the root"


def _short_repr(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# Numbers


def format_number(value: float) -> str:
    """Format a finite double as ECMAScript ``Number.prototype.toString`` does (RFC 8785 3.2.2.3).

    ``repr`` gives the shortest digit string that round-trips (and, among those, the one
    closest to the value), which is exactly the digit string ECMAScript uses; only the
    notation differs. Python writes plain notation for 1e-4 <= |x| < 1e16 and exponent
    notation otherwise; ECMAScript for 1e-6 <= |x| < 1e21. This function moves the decimal
    point accordingly. Raises :class:`CanonicalNotFinite` for NaN and the infinities.
    """
    if type(value) is not float:
        value = float(value)
    text = float.__repr__(value)
    position = text.find("e")
    if position < 0:
        if text[-2:] == ".0":  # integral, below 1e16
            return "0" if value == 0 else text[:-2]  # ECMAScript writes -0 as "0"
        if text in ("nan", "inf", "-inf"):
            raise CanonicalNotFinite(
                f"{text} is not a finite number and has no JSON form", details={"value": text}
            )
        return text  # 1e-4 <= |x| < 1e16 with a fraction: both notations agree
    exponent = int(text[position + 1 :])  # value = mantissa * 10**exponent, 1 <= |mantissa| < 10
    if exponent >= 21 or exponent <= -10:
        return text  # both write "1.5e+300", "1e+21", "2e-10" alike
    if exponent <= -7:
        return text[: position + 2] + text[position + 3 :]  # Python pads: "1e-07" -> "1e-7"
    # 16 <= exponent <= 20 or -6 <= exponent <= -5: ECMAScript uses plain notation here.
    sign = "-" if text[0] == "-" else ""
    digits = text[len(sign) : position].replace(".", "")
    if exponent > 0:
        return sign + digits + "0" * (exponent + 1 - len(digits))
    return sign + "0." + "0" * (-exponent - 1) + digits


def _float_text(value: float) -> str:
    """The canonical text of an exact ``float``, or a :class:`_Fault` (no pointer yet)."""
    try:
        text = format_number(value)
    except CanonicalNotFinite:
        raise _Fault(CanonicalNotFinite, f"{value!r} is not a finite number") from None
    if MAX_SAFE_INTEGER < abs(value) < _PLAIN_INTEGER_LIMIT:
        raise _Fault(
            CanonicalIntegerRange,
            f"float {value!r} would be written as the integer {text}, "
            "outside the I-JSON range +/-(2**53-1)",
        )
    return text


def _describe_int(value: int) -> str:
    if value.bit_length() <= 256:
        return f"integer {value}"
    return f"integer of {value.bit_length()} bits"


# --------------------------------------------------------------------------------------
# Exact path: the reference serializer


class _Fault(Exception):
    """An error found while walking a value; containers add their pointer token on the way out."""

    def __init__(self, kind: type[CanonicalError], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.tokens: list[str] = []  # innermost first
        self.containers: list[int] = []  # ids of the enclosing containers, innermost first

    def error(self) -> CanonicalError:
        pointer = "".join("/" + _pointer_token(token) for token in reversed(self.tokens))
        shown = _printable(pointer)
        return self.kind(f"{self.message} {_where(shown)}", details={"pointer": shown})


_ESCAPE_RE: Final = re.compile(r'[\x00-\x1f"\\]')
_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"
for _code in range(0x20):
    _ESCAPES.setdefault(chr(_code), f"\\u{_code:04x}")  # RFC 8785 3.2.2.2: lowercase hex
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return _ESCAPES[match.group()]


def _quote(text: str) -> str:
    """RFC 8785 3.2.2.2: a JSON string literal with only the mandatory escapes."""
    lone = _SURROGATE_RE.search(text)
    if lone is not None:
        raise _Fault(
            CanonicalLoneSurrogate,
            f"lone surrogate U+{ord(lone.group()):04X} at index {lone.start()} of a string",
        )
    return '"' + _ESCAPE_RE.sub(_escape, text) + '"'


def _utf16_units(member: tuple[bytes, str, str, Any]) -> bytes:
    return member[0]


def _encode(value: Any, out: list[str], depth: int) -> None:
    """Append the canonical text of ``value``; ``depth`` counts its enclosing containers.

    Subclasses of ``str``, ``int``, ``float``, ``dict``, ``list`` and ``tuple`` are
    serialized by their built-in value, through the built-in methods, so that an overridden
    ``__iter__``, ``__str__`` or ``__getitem__`` cannot change the bytes.
    """
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_quote(str.__str__(value)))
    elif isinstance(value, int):
        number = int.__index__(value)
        if not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
            raise _Fault(
                CanonicalIntegerRange,
                f"{_describe_int(number)} is outside the I-JSON range +/-(2**53-1)",
            )
        out.append(int.__repr__(number))
    elif isinstance(value, float):
        out.append(_float_text(float.__float__(value)))
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        members: list[tuple[bytes, str, str, Any]] = []
        for key, item in dict.items(value):
            if not isinstance(key, str):
                raise _Fault(
                    CanonicalKeyType,
                    f"object key {_short_repr(key)} ({type(key).__name__}) is not a string",
                )
            name = str.__str__(key)
            try:
                quoted = _quote(name)
            except _Fault as fault:
                fault.tokens.append(name)
                raise
            # RFC 8785 3.2.3: order by UTF-16 code units; big-endian bytes compare the same.
            members.append((name.encode("utf-16-be"), quoted, name, item))
        members.sort(key=_utf16_units)
        out.append("{")
        previous: bytes | None = None
        for units, quoted, name, item in members:
            if units == previous:  # only reachable with str subclasses that hash differently
                duplicate = _Fault(CanonicalDuplicateKey, f"duplicate object key {quoted}")
                duplicate.tokens.append(name)
                raise duplicate
            if previous is not None:
                out.append(",")
            previous = units
            out.append(quoted)
            out.append(":")
            try:
                _encode(item, out, depth + 1)
            except _Fault as fault:
                fault.tokens.append(name)
                fault.containers.append(id(value))
                raise
        out.append("}")
    elif isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
        out.append("[")
        for index, item in enumerate(items):
            if index:
                out.append(",")
            try:
                _encode(item, out, depth + 1)
            except _Fault as fault:
                fault.tokens.append(str(index))
                fault.containers.append(id(value))
                raise
        out.append("]")
    else:
        raise _Fault(
            CanonicalUnsupportedType,
            f"{type(value).__module__}.{type(value).__qualname__} has no canonical JSON form",
        )


def _too_deep() -> _Fault:
    return _Fault(CanonicalTooDeep, f"containers nest deeper than {MAX_DEPTH} levels")


def _exact_dumps(value: Any) -> bytes:
    """The reference serializer (see the module docstring); :func:`dumps` falls back to it."""
    out: list[str] = []
    try:
        _encode(value, out, 0)
    except _Fault as fault:
        if fault.kind is CanonicalTooDeep:
            _raise_if_cycle(fault)
        raise fault.error() from None
    return "".join(out).encode("utf-8")


def _raise_if_cycle(fault: _Fault) -> None:
    """A nesting overflow whose path meets the same container twice is a reference cycle."""
    outermost = list(reversed(fault.containers))  # outermost[i] is the container at depth i
    tokens = list(reversed(fault.tokens))  # tokens[i] is the member of outermost[i] followed
    seen: dict[int, int] = {}
    for position, ident in enumerate(outermost):
        if ident in seen:
            inner = _printable("".join("/" + _pointer_token(t) for t in tokens[:position]))
            outer = _printable("".join("/" + _pointer_token(t) for t in tokens[: seen[ident]]))
            raise CanonicalCycle(
                f"the container {_where(inner)} is the container {_where(outer)} (a cycle)",
                details={"pointer": inner, "target": outer},
            ) from None
        seen[ident] = position


# --------------------------------------------------------------------------------------
# Fast path: orjson writes, cheap checks prove the bytes equal the exact path's


_ORJSON_OPTIONS: Final = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)
_JSON_TYPES: Final = frozenset({dict, list, tuple, str, int, float, bool, type(None)})
_CONTAINER_TYPES: Final = frozenset({dict, list, tuple})
_DEPTHS: Final = range(1, MAX_DEPTH + 2)  # the loop breaks or returns by MAX_DEPTH + 1
_DEPTHS_BELOW_ROOT: Final = range(2, MAX_DEPTH + 2)
_IS_DICT: Final = partial(is_, dict)
_NON_BMP: Final = re.compile("[\U00010000-\U0010ffff]")
_referents: Final = gc.get_referents
# gc.get_referents reports the children of dict, list and tuple objects only on CPython.
_FAST_PATH_AVAILABLE: Final = sys.implementation.name == "cpython"


def _fast_dumps(value: Any) -> bytes | None:
    """``orjson``'s bytes when they provably equal :func:`_exact_dumps`'s, else ``None``.

    What orjson guarantees (with the options above), each covered by a test:
    compact separators; keys sorted by code point; strings escaped exactly as RFC 8785
    3.2.2.2 asks (the short escapes, ``\\u00xx`` in lowercase for the other controls, every
    other character as raw UTF-8: tested over every code point); integers in decimal; and
    an exception, never output, for lone surrogates, non-``str`` keys, integers outside
    +/-(2**53-1), nesting beyond 254 containers, cycles, subclasses of the built-in types,
    dataclasses and datetimes. What it does differently, and the check that catches it:

    1. It also writes ``uuid.UUID``, ``enum.Enum`` members and ``orjson.Fragment``
       without complaint (and tuples, as RFC 8785 arrays: fine). -> Check 1 looks at the
       type of every node.
    2. It writes floats its own way (``1.0``, ``-0.0``, ``1e-7``, ``1e+16``, NaN as
       ``null``). -> Check 2 finds the float tokens that can differ from the canonical
       text (exponent notation, ``.0``, ``null``), and repairs them or declines; the other
       floats are remembered as proven.
    3. It sorts keys by code point, RFC 8785 by UTF-16 code unit. -> Check 3.

    Beyond those tests, the argument assumes only that orjson writes a given double the
    same way wherever it appears, with the shortest digit string that round-trips and is
    closest to the value (the digits ECMAScript and ``repr`` use), in plain notation only
    within ECMAScript's plain range (all three tested, over every exponent), and that on
    CPython ``gc.get_referents`` reports every value of a dict, list or tuple (tested).
    """
    try:
        out = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return None  # the exact path accepts it (a subclass) or raises the precise error
    return _proven(value, out)


def _proven(value: Any, out: bytes) -> bytes | None:
    """The checks of :func:`_fast_dumps` on orjson's output ``out`` for ``value``: ``out``
    (repaired) when they prove it canonical, else ``None``."""
    # Check 1: look at the type of every node, breadth first, one level at a time.
    # gc.get_referents(*objects) returns, in one C call, the values of every dict (and its
    # keys too when some key is not an exact str; orjson refused those), the items of every
    # list and tuple, and nothing for str, int, float, bool and None. A level is expanded
    # only once all its nodes are of those types, so the walk never wanders into the
    # attributes of some other object, and only while it holds a container. The containers
    # of level ``depth`` (the root's level is 1) are nested ``depth`` deep, so the walk
    # stops after MAX_DEPTH expansions at most, each level no longer than ``out``.
    if type(value) is dict:  # the usual root: skip a level of one
        level = _referents(value)
        depths = _DEPTHS_BELOW_ROOT
    else:
        level = [value]
        depths = _DEPTHS
    floats: list[float] = []
    for depth in depths:
        kinds = {*map(type, level)}
        if not kinds <= _JSON_TYPES:
            return None  # UUID, Enum, Fragment, a subclass inside a tuple, ...
        if float in kinds:
            floats += [node for node in level if type(node) is float]
        if kinds.isdisjoint(_CONTAINER_TYPES):
            break
        if depth > MAX_DEPTH:
            return None  # the exact path names the container nested too deep
        level = _referents(*level)
    # From here every node is a dict (exact-str keys), list, tuple, str, int, bool, None or
    # float, and orjson wrote each one as RFC 8785 does, except floats and key order.

    # Check 3 (key order) first, it is cheaper: UTF-16 order differs from code point order
    # only for a key holding a character beyond U+FFFF (a surrogate pair, 0xD800-0xDFFF,
    # sorts below U+E000-U+FFFF). In UTF-8 such a character, and nothing else, starts with
    # a byte 0xF0-0xF4: if the output has none, no key holds one. Otherwise look at the keys.
    if not out.isascii() and _has_four_byte_sequence(out) and _non_bmp_key(value):
        return None
    # Check 2 (floats). Floats already proven exact by _settle_floats are remembered: a
    # memo of a pure function of the double (finite, canonical text == orjson's text).
    # Distinct doubles compare equal only for 0.0 and -0.0, and neither ever enters.
    if floats and not _SAFE_FLOATS.issuperset(floats):
        return _settle_floats(out, floats)
    return out


def _has_four_byte_sequence(out: bytes) -> bool:
    # Five memchr scans (an int operand; a bytes one is much slower) beat one regex scan.
    return 0xF0 in out or 0xF4 in out or 0xF1 in out or 0xF2 in out or 0xF3 in out


def _non_bmp_key(value: Any) -> bool:
    """Whether some object key in ``value`` (JSON types only) has a character beyond U+FFFF."""
    level = [value]
    keys: list[str] = []
    while level:
        keys += chain.from_iterable(compress(level, map(_IS_DICT, map(type, level))))
        level = _referents(*level)
    joined = "".join(keys)
    return not joined.isascii() and _NON_BMP.search(joined) is not None


def _settle_floats(out: bytes, floats: list[float]) -> bytes | None:
    """Check 2: make every float token of ``out`` its RFC 8785 text, or decline."""
    # orjson's float writer is a function of the double alone, so each float token in
    # ``out`` is the corresponding item of ``orjson.dumps(floats)``.
    # Common case, settled without formatting a single float in Python (``float.__repr__``
    # costs more than everything else here). orjson writes the shortest digit string that
    # round-trips, the one closest to the value: the digits of ``repr`` and of ECMAScript
    # (tested over every exponent, see test_orjson_plain_float_text_is_canonical). For a
    # finite double it writes plain notation only for 1e-5 <= |x| < 1e16 (and 0), inside
    # the range where ECMAScript writes plain notation (1e-6 <= |x| < 1e21), so such a
    # token is the canonical text unless it ends in ".0" (an integral value, which
    # ECMAScript writes without the fraction; every double in (2**53-1, 1e16) is integral,
    # so no token left over is out of range). "e" catches exponent notation, "n" NaN and
    # the infinities (orjson writes ``null``). Then ``out`` is exact; the floats join the memo.
    # (An int operand makes ``in`` a memchr; a bytes one is several times slower.)
    theirs = orjson.dumps(floats)
    if _E not in theirs and _N not in theirs and b".0," not in theirs and b".0]" not in theirs:
        if len(_SAFE_FLOATS) > _SAFE_FLOATS_LIMIT:
            _SAFE_FLOATS.clear()
        _SAFE_FLOATS.update(floats)
        return out
    # Repair. Only a token with "e" or "n" in it, or ending in ".0", may differ from the
    # canonical text (the argument above); the canonical text is computed for those alone.
    # For each float whose orjson text T differs from its canonical text E, replace the
    # token T by E. An occurrence of T counts only where a token can be: after "[", ":" or
    # "," (or at the start) and before ",", "]" or "}" (or at the end). Outside strings,
    # text so delimited is a whole scalar token; T contains "." or "e" and is not
    # true/false, so it is a float token, written T, hence a float in ``floats`` with orjson
    # text T. An occurrence cannot straddle a string boundary (T has no '"'). So the
    # occurrences counted are every float token with a text in ``mapping`` plus any
    # look-alikes inside strings. Their count equals ``expected`` (floats with T != E) only
    # if there are no look-alikes and no other float shares a text in ``mapping``: then
    # every replacement is right. Otherwise decline.
    tokens = theirs[1:-1].split(b",")
    if len(tokens) != len(floats):
        return None
    mapping: dict[bytes, bytes] = {}
    expected = 0
    for token, number in zip(tokens, floats, strict=True):
        if _E not in token and _N not in token and not token.endswith(b".0"):
            continue
        try:
            canonical = _float_text(number).encode("ascii")
        except _Fault:
            return None  # NaN, infinity or out-of-range: the exact path names it and where
        if token == canonical:
            continue
        if mapping.setdefault(token, canonical) != canonical or not _FLOAT_TOKEN.fullmatch(token):
            return None
        expected += 1
    if not mapping:
        return out
    spans: list[tuple[int, bytes]] = []
    for token in mapping:
        at = out.find(token)
        while at >= 0:
            end = at + len(token)
            if (at == 0 or out[at - 1] in b"[:,") and (end == len(out) or out[end] in b",]}"):
                spans.append((at, token))
            at = out.find(token, at + 1)
    if len(spans) != expected:
        return None
    spans.sort()  # whole tokens, so they do not overlap
    pieces: list[bytes] = []
    last = 0
    for at, token in spans:
        pieces += (out[last:at], mapping[token])
        last = at + len(token)
    pieces.append(out[last:])
    return b"".join(pieces)


# The float tokens orjson may write differently from RFC 8785: integral ("1.0", "-0.0")
# or in exponent notation ("1e-7", "1.5e+16").
_FLOAT_TOKEN: Final = re.compile(rb"-?[0-9]+(?:\.0|(?:\.[0-9]+)?e[-+][0-9]+)")
_E: Final = ord("e")
_N: Final = ord("n")
#: Floats proven to be written by orjson exactly as RFC 8785 writes them (see check 2).
_SAFE_FLOATS: set[float] = set()
_SAFE_FLOATS_LIMIT: Final = 4096  # emptied when it grows past this


def dumps(value: Any) -> bytes:
    """Serialize ``value`` to RFC 8785 canonical JSON bytes (UTF-8).

    Accepts ``dict`` with ``str`` keys, ``list``, ``tuple``, ``str``, ``int`` within
    +/-(2**53-1), finite ``float`` outside (2**53-1, 1e21) in magnitude, ``bool`` and
    ``None`` (subclasses are written as their built-in value), nested at most
    :data:`MAX_DEPTH` containers deep. Anything else raises a :class:`CanonicalError`
    subclass naming the JSON pointer of the offending value.
    """
    if _FAST_PATH_AVAILABLE:
        out = _fast_dumps(value)
        if out is not None:
            return out
    return _exact_dumps(value)


class Encoded:
    """A JSON value together with its canonical bytes (``data == dumps(value)``), made where
    the value was serialized, so that a later writer (a journal append) takes the bytes
    instead of serializing the value again. It is a carrier, not a JSON value: ``dumps``
    refuses it."""

    __slots__ = ("data", "value")

    def __init__(self, value: Any, data: bytes) -> None:
        self.value = value
        self.data = data


def dumps_with(value: dict[str, Any], known: Mapping[str, bytes]) -> bytes:
    """``dumps(value)`` for an object some of whose members are serialized already:
    ``known[key]`` is ``dumps(value[key])`` for some keys of ``value``. Those bytes are
    written as they are; only the other members are serialized (a step's effect document
    around its arguments and result, each serialized once, when the step made them)."""
    if not known or type(value) is not dict:
        return dumps(value)
    if not known.keys() <= value.keys():
        raise ValueError(f"known members {sorted(set(known) - set(value))} are not in the object")
    for key, data in known.items():
        # A member nesting MAX_DEPTH containers makes the object too deep, and a key beyond
        # ASCII could sort differently in UTF-16: dumps itself settles those rare objects.
        if not key.isascii() or data.count(b"[") + data.count(b"{") >= MAX_DEPTH:
            return dumps(value)
    rest = {key: item for key, item in value.items() if key not in known}
    if _FAST_PATH_AVAILABLE:
        # orjson writes the known members' bytes verbatim (Fragment) in key order; the
        # checks of the fast path then look at the other members only. They hold with the
        # fragments in the output: a fragment is canonical, so no float token in it is one
        # that check 2 would rewrite (such a token is not the canonical text of its value),
        # and a look-alike inside one of its strings makes check 2 decline.
        try:
            out = orjson.dumps(
                {**rest, **{key: orjson.Fragment(data) for key, data in known.items()}},
                option=_ORJSON_OPTIONS,
            )
        except orjson.JSONEncodeError:
            pass
        else:
            proven = _proven(rest, out)
            if proven is not None:
                return proven
    return _spliced(value, rest, known)


def _spliced(value: dict[str, Any], rest: dict[str, Any], known: Mapping[str, bytes]) -> bytes:
    """:func:`dumps_with` by the exact path: the object's members in canonical order, the
    unknown ones serialized in runs between the known ones (a run's members keep their
    order and text inside the whole object)."""
    if any(type(key) is not str for key in value):
        return dumps(value)  # raises, or serializes an object of str subclasses as dumps does
    parts: list[bytes] = []
    run: dict[str, Any] = {}
    try:
        for key in sorted(value, key=_utf16_key):
            data = known.get(key)
            if data is None:
                run[key] = rest[key]
                continue
            if run:
                parts.append(dumps(run)[1:-1])
                run = {}
            parts.append(dumps(key) + b":" + data)
        if run:
            parts.append(dumps(run)[1:-1])
    except CanonicalError:
        return dumps(value)  # raises the error dumps raises, with its pointer
    return b"{" + b",".join(parts) + b"}"


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


# --------------------------------------------------------------------------------------
# Parsing


class _Reject(Exception):
    """Raised by the json hooks; :func:`loads` then asks the strict parser where and why."""


def _object_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Reject
    return result


def _integer_hook(text: str) -> int:
    if len(text) <= 17:  # "-9007199254740991" has 17 characters; longer ones are out of range
        number = int(text)
        if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
            return number
    raise _Reject


def _float_hook(text: str) -> float:
    number = float(text)
    if math.isinf(number) or MAX_SAFE_INTEGER < abs(number) < _PLAIN_INTEGER_LIMIT:
        raise _Reject
    return number


def _constant_hook(name: str) -> NoReturn:
    raise _Reject


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_object_hook,
    parse_int=_integer_hook,
    parse_float=_float_hook,
    parse_constant=_constant_hook,
    strict=True,
)
_ESCAPED_SURROGATE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def loads(data: bytes | str) -> Any:
    """Parse one JSON text (RFC 8259) strictly.

    Rejects, each with its :class:`CanonicalError` subclass and its location (offset, line
    and column; the JSON pointer; the key for duplicates): invalid UTF-8, malformed JSON, a
    byte order mark, duplicate object keys, ``NaN``/``Infinity``/``-Infinity``, numbers
    that overflow to infinity, integers outside +/-(2**53-1) and numbers that denote one
    (``1e17``), lone surrogates (escaped or raw) and nesting beyond :data:`MAX_DEPTH`.
    A number with a fraction or an exponent is a ``float`` even when integral (``1.0``,
    ``1e2``); other numbers are ``int``.
    """
    if isinstance(data, str):
        text = data
        raw_surrogates_possible = not text.isascii()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw_surrogates_possible = False  # valid UTF-8 never encodes a surrogate
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            snippet = raw[exc.start : exc.start + 4].hex(" ")
            raise CanonicalInvalidUtf8(
                f"invalid UTF-8 at byte {exc.start} ({exc.reason}: {snippet})",
                details={"byte_offset": exc.start, "reason": exc.reason},
            ) from None
    else:
        raise TypeError(f"loads() takes bytes or str, not {type(data).__name__}")
    try:
        value = _DECODER.decode(text)
    except (_Reject, json.JSONDecodeError, RecursionError) as exc:
        _strict_parse(text)  # raises the first error in document order, with its location
        raise CanonicalMalformed(f"rejected JSON text ({exc})") from None  # pragma: no cover
    # The json module keeps lone surrogates (raw ones, and escaped ones without a partner)
    # and has no depth limit: look for them only when the text makes them possible.
    if (
        (raw_surrogates_possible and _SURROGATE_RE.search(text) is not None)
        or (_ESCAPED_SURROGATE.search(text) is not None and _has_surrogate(value))
        or (text.count("[") + text.count("{") > MAX_DEPTH and _nesting(value) > MAX_DEPTH)
    ):
        _strict_parse(text)
        raise CanonicalMalformed("rejected JSON text")  # pragma: no cover
    return value


def _has_surrogate(value: Any) -> bool:
    nodes = [value]
    level = nodes
    while level:
        level = _referents(*level)
        nodes += level
    strings = [node for node in nodes if type(node) is str]
    strings += chain.from_iterable(node for node in nodes if type(node) is dict)
    return _SURROGATE_RE.search("".join(strings)) is not None


def _nesting(value: Any) -> int:
    """How many containers nest in ``value`` (0 for a scalar)."""
    depth = 0
    level = [value]
    while True:
        kinds = set(map(type, level))
        if dict not in kinds and list not in kinds and tuple not in kinds:
            return depth
        depth += 1
        level = _referents(*level)


# The strict reference parser. loads() runs the json module's C scanner; when that (or a
# check after it) rejects the text, this parser reads it again to find the first error in
# document order and to report where it is. It is also the oracle of the loads tests.

_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_STRING_RUN: Final = re.compile(r'[^"\\\x00-\x1f]*')
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_SIMPLE_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n"}
_SIMPLE_ESCAPES.update({"r": "\r", "t": "\t"})


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.path: list[str] = []

    def fail(self, kind: type[CanonicalError], what: str, offset: int, **extra: Any) -> NoReturn:
        line = self.text.count("\n", 0, offset) + 1
        column = offset - self.text.rfind("\n", 0, offset)
        pointer = _printable("".join("/" + _pointer_token(token) for token in self.path))
        details: dict[str, Any] = {"offset": offset, "line": line, "column": column}
        details["pointer"] = pointer
        details.update(extra)
        where = f"line {line}, column {column} (offset {offset})"
        if pointer:
            where += f", pointer {pointer}"
        raise kind(f"{what} at {where}", details=details)

    def skip(self, pos: int) -> int:
        match = _WHITESPACE.match(self.text, pos)
        assert match is not None
        return match.end()

    def document(self) -> Any:
        if self.text.startswith("\ufeff"):
            self.fail(CanonicalMalformed, "byte order mark before the JSON text", 0)
        pos = self.skip(0)
        value, pos = self.value(pos, 0)
        pos = self.skip(pos)
        if pos != len(self.text):
            self.fail(CanonicalMalformed, "unexpected data after the JSON value", pos)
        return value

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        text = self.text
        char = text[pos : pos + 1]
        if char == "{":
            return self.object(pos, depth + 1)
        if char == "[":
            return self.array(pos, depth + 1)
        if char == '"':
            return self.string(pos)
        for literal, result in (("true", True), ("false", False), ("null", None)):
            if text.startswith(literal, pos):
                return result, pos + len(literal)
        for name in ("NaN", "Infinity", "-Infinity"):
            if text.startswith(name, pos):
                self.fail(CanonicalNotFinite, f"{name} is not a JSON number", pos)
        match = _NUMBER.match(text, pos)
        if match is None:
            if not char:
                self.fail(CanonicalMalformed, "expected a JSON value, found the end", pos)
            self.fail(CanonicalMalformed, f"expected a JSON value, found {char!r}", pos)
        return self.number(match), match.end()

    def number(self, match: re.Match[str]) -> int | float:
        literal, pos = match.group(), match.start()
        if match.group(1) is None and match.group(2) is None:
            if len(literal) <= 17:
                integer = int(literal)
                if -MAX_SAFE_INTEGER <= integer <= MAX_SAFE_INTEGER:
                    return integer
            shown = literal if len(literal) <= 40 else literal[:37] + "..."
            self.fail(
                CanonicalIntegerRange,
                f"integer {shown} is outside the I-JSON range +/-(2**53-1)",
                pos,
            )
        real = float(literal)
        shown = literal if len(literal) <= 40 else literal[:37] + "..."
        if math.isinf(real):
            self.fail(CanonicalNotFinite, f"number {shown} overflows to infinity", pos)
        if MAX_SAFE_INTEGER < abs(real) < _PLAIN_INTEGER_LIMIT:
            self.fail(
                CanonicalIntegerRange,
                f"number {shown} is an integer outside the I-JSON range +/-(2**53-1)",
                pos,
            )
        return real

    def string(self, start: int) -> tuple[str, int]:
        text = self.text
        pos = start + 1
        parts: list[str] = []
        while True:
            run = _STRING_RUN.match(text, pos)
            assert run is not None
            lone = _SURROGATE_RE.search(run.group())
            if lone is not None:
                self.fail(
                    CanonicalLoneSurrogate,
                    f"lone surrogate U+{ord(lone.group()):04X} in a string",
                    pos + lone.start(),
                )
            parts.append(run.group())
            pos = run.end()
            char = text[pos : pos + 1]
            if char == '"':
                return "".join(parts), pos + 1
            if not char:
                self.fail(CanonicalMalformed, "unterminated string", start)
            if char != "\\":
                self.fail(
                    CanonicalMalformed,
                    f"unescaped control character U+{ord(char):04X} in a string",
                    pos,
                )
            escape = text[pos + 1 : pos + 2]
            if escape in _SIMPLE_ESCAPES:
                parts.append(_SIMPLE_ESCAPES[escape])
                pos += 2
                continue
            if escape != "u" or _HEX4.match(text, pos + 2) is None:
                self.fail(CanonicalMalformed, "invalid escape sequence in a string", pos)
            unit = int(text[pos + 2 : pos + 6], 16)
            if 0xD800 <= unit <= 0xDBFF and text.startswith("\\u", pos + 6):
                low = int(text[pos + 8 : pos + 12], 16) if _HEX4.match(text, pos + 8) else 0
                if 0xDC00 <= low <= 0xDFFF:
                    parts.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
                    pos += 12
                    continue
            if 0xD800 <= unit <= 0xDFFF:
                self.fail(
                    CanonicalLoneSurrogate,
                    f"escaped lone surrogate \\u{text[pos + 2 : pos + 6]} in a string",
                    pos,
                )
            parts.append(chr(unit))
            pos += 6

    def object(self, start: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > MAX_DEPTH:
            self.fail(CanonicalTooDeep, f"containers nest deeper than {MAX_DEPTH} levels", start)
        result: dict[str, Any] = {}
        pos = self.skip(start + 1)
        if self.text.startswith("}", pos):
            return result, pos + 1
        while True:
            if not self.text.startswith('"', pos):
                self.fail(CanonicalMalformed, "expected a string key", pos)
            key, after = self.string(pos)
            if key in result:
                self.path.append(key)
                self.fail(
                    CanonicalDuplicateKey,
                    f"duplicate object key {_printable(json.dumps(key))}",
                    pos,
                    key=_printable(key),
                )
            pos = self.skip(after)
            if not self.text.startswith(":", pos):
                self.fail(CanonicalMalformed, "expected ':' after an object key", pos)
            self.path.append(key)
            result[key], pos = self.value(self.skip(pos + 1), depth)
            self.path.pop()
            pos = self.skip(pos)
            char = self.text[pos : pos + 1]
            if char == "}":
                return result, pos + 1
            if char != ",":
                self.fail(CanonicalMalformed, "expected ',' or '}' in an object", pos)
            pos = self.skip(pos + 1)

    def array(self, start: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_DEPTH:
            self.fail(CanonicalTooDeep, f"containers nest deeper than {MAX_DEPTH} levels", start)
        result: list[Any] = []
        pos = self.skip(start + 1)
        if self.text.startswith("]", pos):
            return result, pos + 1
        while True:
            self.path.append(str(len(result)))
            item, pos = self.value(pos, depth)
            self.path.pop()
            result.append(item)
            pos = self.skip(pos)
            char = self.text[pos : pos + 1]
            if char == "]":
                return result, pos + 1
            if char != ",":
                self.fail(CanonicalMalformed, "expected ',' or ']' in an array", pos)
            pos = self.skip(pos + 1)


def _strict_parse(text: str) -> Any:
    """The reference parser: the value of ``text``, or the first error with its location."""
    return _Parser(text).document()
