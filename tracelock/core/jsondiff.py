"""Differences between two JSON values, as RFC 6901 JSON pointers. Pure."""

from __future__ import annotations

from typing import Any

__all__ = ["diff", "pointer"]

_MISSING: Any = object()


def pointer(parts: list[str | int]) -> str:
    """RFC 6901: ``/`` separated, ``~`` as ``~0`` and ``/`` as ``~1``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def diff(recorded: Any, requested: Any, *, limit: int = 50) -> list[dict[str, Any]]:
    """Every place where ``requested`` differs from ``recorded``:
    ``{"path", "op": "changed"|"added"|"removed", "recorded"?, "requested"?}``."""
    out: list[dict[str, Any]] = []
    _walk(recorded, requested, [], out, limit)
    return out


def _same_scalar(a: Any, b: Any) -> bool:
    # JSON has no bool/int distinction problem in Python's ==, but true == 1 must not match.
    return type(a) is type(b) and a == b


def _walk(a: Any, b: Any, path: list[str | int], out: list[dict[str, Any]], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in b:
                out.append({"path": pointer([*path, key]), "op": "removed", "recorded": a[key]})
            elif key not in a:
                out.append({"path": pointer([*path, key]), "op": "added", "requested": b[key]})
            else:
                _walk(a[key], b[key], [*path, key], out, limit)
        return
    if isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            if index >= len(b):
                out.append({"path": pointer([*path, index]), "op": "removed", "recorded": a[index]})
            elif index >= len(a):
                out.append({"path": pointer([*path, index]), "op": "added", "requested": b[index]})
            else:
                _walk(a[index], b[index], [*path, index], out, limit)
        return
    if not _same_scalar(a, b):
        out.append({"path": pointer(path), "op": "changed", "recorded": a, "requested": b})
