"""What a suspended frame is doing, read from its source: strict mode's naming of a call.

Everything here runs only when strict mode is about to refuse a call, so it may read source
files and parse them. A frame's instructions carry source positions (line and UTF-8 column
spans, Python 3.11+): the span of the instruction in progress is the expression the agent
wrote, and the spans of the calls still to come tell which call that expression is an
argument of. Values are looked up in the frame without running code: attributes of modules
and classes are read with ``getattr``, attributes of other objects only statically.
"""

from __future__ import annotations

import ast
import dis
import inspect
import itertools
import linecache
import logging
from types import CodeType, FrameType
from typing import Any

__all__ = ["expression", "log_argument", "lookup", "qualname", "frame_qualname"]

#: Logger methods that emit a record (as the static scan's logging exemption names them).
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})

_Span = tuple[int, int, int, int]


def _span(position: Any) -> _Span | None:
    first, last, start, end = position
    if first is None or last is None or start is None or end is None:
        return None
    return first, last, start, end


def _current(frame: FrameType) -> _Span | None:
    # One position per 2-byte code unit; f_lasti is the byte offset of the instruction.
    position = next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None), None)
    return None if position is None else _span(position)


def _parse(code: CodeType, span: _Span) -> ast.expr | None:
    first, last, start, end = span
    lines = [linecache.getline(code.co_filename, n).encode() for n in range(first, last + 1)]
    if not all(lines):
        return None
    lines[-1] = lines[-1][:end]
    lines[0] = lines[0][start:]
    try:
        return ast.parse(b"".join(lines).decode(), mode="eval").body
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None


def expression(frame: FrameType) -> ast.expr | None:
    """The expression ``frame`` is evaluating (the call or read in progress), or ``None``
    when its source is not available."""
    span = _current(frame)
    return None if span is None else _parse(frame.f_code, span)


def log_argument(frame: FrameType) -> bool:
    """Whether the expression in progress in ``frame`` is (inside) an argument of a call to a
    logger method that ``frame`` makes next (``log.info("at %s", time.time())``)."""
    here = _current(frame)
    if here is None:
        return False
    for instruction in dis.get_instructions(frame.f_code):
        if instruction.offset <= frame.f_lasti or instruction.opname != "CALL":
            continue
        span = _span(instruction.positions)
        if span is None or span == here or not _encloses(span, here):
            continue
        node = _parse(frame.f_code, span)
        if isinstance(node, ast.Call) and _after_callee(node, span, here) and _is_log_method(frame, node.func):
            return True
    return False


def _encloses(outer: _Span, inner: _Span) -> bool:
    return (outer[0], outer[2]) <= (inner[0], inner[2]) and (inner[1], inner[3]) <= (outer[1], outer[3])


def _after_callee(node: ast.Call, span: _Span, here: _Span) -> bool:
    """Whether ``here`` starts after the callee part of ``node`` (parsed from ``span``)."""
    func = node.func
    if func.end_lineno is None or func.end_col_offset is None:
        return False
    line = span[0] + func.end_lineno - 1
    column = func.end_col_offset + (span[2] if func.end_lineno == 1 else 0)
    return (here[0], here[2]) >= (line, column)


def _is_log_method(frame: FrameType, func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        if func.attr not in LOG_METHODS:
            return False
        owner = lookup(frame, func.value)
        return owner is logging or isinstance(owner, (logging.Logger, logging.LoggerAdapter))
    value = lookup(frame, func)
    if getattr(value, "__name__", None) not in LOG_METHODS:
        return False
    owner = getattr(value, "__self__", None)
    return isinstance(owner, (logging.Logger, logging.LoggerAdapter)) or getattr(value, "__module__", None) == "logging"


def lookup(frame: FrameType, node: ast.expr) -> Any:
    """The value of a dotted name in ``frame`` (``None`` when it cannot be read safely)."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in scope:
                return scope[node.id]
        return None
    if isinstance(node, ast.Attribute):
        owner = lookup(frame, node.value)
        if owner is None:
            return None
        if inspect.ismodule(owner) or inspect.isclass(owner):
            return getattr(owner, node.attr, None)
        try:
            # No property, descriptor or __getattr__ of the agent's objects runs here.
            value = inspect.getattr_static(owner, node.attr)
        except AttributeError:
            return None
        return None if hasattr(type(value), "__get__") and not inspect.isroutine(value) else value
    return None


def qualname(value: Any) -> str | None:
    """The qualified name of a function, method or class (``datetime.date.today``)."""
    owner = getattr(value, "__self__", None)
    name = getattr(value, "__qualname__", None)
    if inspect.isclass(owner) and not inspect.isclass(value):
        return f"{owner.__module__}.{owner.__qualname__}.{getattr(value, '__name__', '')}"
    module = getattr(value, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else None


def frame_qualname(frame: FrameType) -> str:
    """The qualified name of the function ``frame`` runs; a class for its constructor."""
    name = frame.f_code.co_qualname
    for suffix in (".__init__", ".__new__"):
        name = name.removesuffix(suffix)
    return f"{frame.f_globals.get('__name__')}.{name}"
