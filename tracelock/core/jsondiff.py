"""Differences between two JSON values, as RFC 6901 JSON pointers. Pure.

Leaves are compared by their RFC 8785 canonical form, the form every hash is taken over:
``0`` and ``0.0``, or ``500`` and ``5e2``, are one value and never reported as a change,
while ``true`` and ``1`` are two. Arrays may be lists or tuples (both are JSON arrays).
"""

from __future__ import annotations

from typing import Any

from tracelock.core.canonical import CanonicalError, dumps

__all__ = ["diff", "pointer", "same_value"]

_ARRAYS = (list, tuple)


def pointer(parts: list[str | int]) -> str:
    """RFC 6901: ``/`` separated, ``~`` as ``~0`` and ``/`` as ``~1``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def diff(recorded: Any, requested: Any, *, limit: int = 50) -> list[dict[str, Any]]:
    """Every place where ``requested`` differs from ``recorded``:
    ``{"path", "op": "changed"|"added"|"removed", "recorded"?, "requested"?}``."""
    out: list[dict[str, Any]] = []
    _walk(recorded, requested, [], out, limit)
    return out


def same_value(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` have the same canonical form. Values that have none (NaN, a
    set, an integer beyond 2**53) are the same only when of one type and equal in Python."""
    try:
        return dumps(a) == dumps(b)
    except CanonicalError:
        return type(a) is type(b) and bool(a == b)


def _same_leaf(a: Any, b: Any) -> bool:
    kind = type(a)
    if kind is type(b) and (kind is str or kind is bool or a is None):
        return bool(a == b)
    return same_value(a, b)


def _walk(a: Any, b: Any, path: list[str | int], out: list[dict[str, Any]], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if len(out) >= limit:
                return
            if key not in b:
                out.append({"path": pointer([*path, key]), "op": "removed", "recorded": a[key]})
            elif key not in a:
                out.append({"path": pointer([*path, key]), "op": "added", "requested": b[key]})
            else:
                _walk(a[key], b[key], [*path, key], out, limit)
        return
    if isinstance(a, _ARRAYS) and isinstance(b, _ARRAYS):
        for index in range(max(len(a), len(b))):
            if len(out) >= limit:
                return
            if index >= len(b):
                out.append({"path": pointer([*path, index]), "op": "removed", "recorded": a[index]})
            elif index >= len(a):
                out.append({"path": pointer([*path, index]), "op": "added", "requested": b[index]})
            else:
                _walk(a[index], b[index], [*path, index], out, limit)
        return
    if not _same_leaf(a, b):
        out.append({"path": pointer(path), "op": "changed", "recorded": a, "requested": b})
