"""RFC 8785 (JCS) canonical JSON: ``dumps`` to canonical bytes, ``loads`` as a strict parser.

This is the exact reference path: a direct, readable transcription of RFC 8785 sections
3.2.2 (serialization of primitives, with ECMAScript number formatting) and 3.2.3 (sorting
of object members by UTF-16 code units).
"""

from __future__ import annotations

import json
from typing import Any

from tracelock.errors import CanonicalError

__all__ = ["CanonicalError", "dumps", "loads", "format_number", "MAX_SAFE_INTEGER"]

#: I-JSON (RFC 7493) interoperable integer range: +/-(2**53 - 1).
MAX_SAFE_INTEGER = 2**53 - 1

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
for _c in range(0x20):
    _ESCAPES.setdefault(chr(_c), f"\\u{_c:04x}")


def format_number(value: float) -> str:
    """Format a finite double as ECMAScript ``Number.prototype.toString`` does (RFC 8785 3.2.2.3)."""
    if value != value or value in (float("inf"), float("-inf")):
        raise CanonicalError(f"{value!r} is not a finite number and has no JSON form")
    if value == 0:
        return "0"  # both 0.0 and -0.0
    sign = "-" if value < 0 else ""
    # repr() yields the shortest digit string that round-trips, as ECMAScript requires.
    text = repr(abs(value))
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    if frac_part == "0":
        frac_part = ""
    digits = (int_part + frac_part).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped) - len(frac_part)
    digits = stripped
    k = len(digits)
    n = k + exponent  # value = 0.<digits> * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    exp_sign = "+" if n - 1 >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{exp_sign}{abs(n - 1)}"


def _string(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalError(
            f"lone surrogate U+{ord(value[exc.start]):04X} in string at {where}",
            details={"path": where},
        ) from None
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: Any, out: list[str], where: str) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value, where))
    elif isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise CanonicalError(
                f"integer {value} at {where} is outside the I-JSON range +/-(2**53-1)",
                details={"path": where},
            )
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        try:
            out.append(format_number(value))
        except CanonicalError:
            raise CanonicalError(
                f"{value!r} at {where} is not a finite number", details={"path": where}
            ) from None
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise CanonicalError(
                    f"object key {key!r} at {where} is not a string", details={"path": where}
                )
        out.append("{")
        for index, key in enumerate(sorted(value, key=_utf16_key)):
            if index:
                out.append(",")
            child = f"{where}/{_pointer_token(key)}"
            out.append(_string(key, child))
            out.append(":")
            _encode(value[key], out, child)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out, f"{where}/{index}")
        out.append("]")
    else:
        raise CanonicalError(
            f"{type(value).__name__} at {where} has no canonical JSON form",
            details={"path": where, "type": type(value).__name__},
        )


def _pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def dumps(value: Any) -> bytes:
    """Serialize ``value`` to RFC 8785 canonical JSON bytes (UTF-8).

    Accepts ``dict`` (string keys), ``list``/``tuple``, ``str``, ``int`` within
    +/-(2**53-1), finite ``float``, ``bool`` and ``None``; anything else raises
    :class:`CanonicalError` naming the JSON pointer of the offending value.
    """
    out: list[str] = []
    try:
        _encode(value, out, "")
    except RecursionError:
        raise CanonicalError("value is nested too deeply (or contains a cycle)") from None
    return "".join(out).encode("utf-8")


def _reject_constant(name: str) -> Any:
    raise CanonicalError(f"{name} is not valid JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, val in pairs:
        if key in result:
            raise CanonicalError(f"duplicate object key {key!r}", details={"key": key})
        result[key] = val
    return result


def _parse_int(text: str) -> int:
    value = int(text)
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise CanonicalError(f"integer {text} is outside the I-JSON range +/-(2**53-1)")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise CanonicalError(f"number {text} overflows to infinity")
    return value


def _check_strings(value: Any) -> None:
    if isinstance(value, str):
        _string(value, "")
    elif isinstance(value, dict):
        for key, item in value.items():
            _string(key, "")
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def loads(data: bytes | str) -> Any:
    """Parse JSON strictly: reject duplicate keys, NaN/Infinity, numbers that overflow,
    lone surrogates and integers outside +/-(2**53-1), each with a :class:`CanonicalError`."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalError(f"invalid UTF-8 at byte {exc.start}") from None
    else:
        text = data
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except json.JSONDecodeError as exc:
        raise CanonicalError(
            f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            details={"line": exc.lineno, "column": exc.colno, "offset": exc.pos},
        ) from None
    _check_strings(value)
    return value
