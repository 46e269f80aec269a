"""Strict mode: the nondeterminism the entropy scan looks for, refused at run time.

With ``Runtime(strict=True)``, a call covered by a rule of the scan's catalogue
(``tracelock.analysis.rules``, a leaf module of plain data) raises
:class:`NondeterminismError` when agent code makes it during a run, naming the rule and the
``ctx`` door to use instead. Nothing changes anywhere else:

* the guards are installed once, as thin wrappers around module attributes (``time.time``,
  ``random.random``, ``os.urandom``, ``uuid.uuid4``, ``subprocess.run``, ``os.environ`` reads...),
  and they pass every call through unless the calling thread is running agent code;
* "running agent code" is a context variable set only around the agent function and cleared
  inside every ctx door, so the runtime's own work, tools and LLM providers are never
  affected, nor are other threads, nor imports;
* seeded uses stay allowed (``random.Random(42)``), as in the static scan.

Limits (the static scan covers them): a name bound before the guards were installed
(``from time import time`` at import time) keeps the original function, and methods of
built-in types (``datetime.datetime.now``) cannot be wrapped.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from tracelock.analysis.rules import Rule, Target, TargetKind, patchable_targets
from tracelock.errors import RuntimeFault

__all__ = ["NondeterminismError", "install", "agent_code", "runtime_code", "active", "unguarded_targets"]

F = TypeVar("F", bound=Callable[..., Any])

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("tracelock_agent_code", default=False)
_LOCK = threading.Lock()
_DONE: set[str] = set()
_UNGUARDED: dict[str, str] = {}

# Modules a guard may import to install itself; any other module is guarded only once the
# program has imported it (a guard never imports third-party code on its own).
_STDLIB = frozenset(
    {
        "time", "random", "os", "uuid", "secrets", "socket", "subprocess", "threading",
        "_thread", "asyncio", "concurrent.futures", "multiprocessing", "multiprocessing.pool",
        "urllib.request", "http.client", "pty",
    }
)


class NondeterminismError(RuntimeFault):
    """Agent code reached for nondeterminism outside the ctx doors, in strict mode."""

    code = "NONDETERMINISM_DETECTED"

    def __init__(self, rule: Rule, target: Target, name: str) -> None:
        super().__init__(
            f"[{rule.id}] {rule.message(name + '()' if target.kind is not TargetKind.READ else name)} "
            "(strict mode)",
            details={"rule": rule.id, "target": target.name, "door": rule.door},
        )
        self.rule_id = rule.id
        self.door = rule.door


def active() -> bool:
    """True while the current thread runs agent code in strict mode."""
    return _ACTIVE.get()


@contextlib.contextmanager
def agent_code() -> Iterator[None]:
    """Mark the agent function's execution (the runtime wraps the agent call in it)."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def runtime_code() -> Iterator[None]:
    """Mark the runtime's own work inside a door (guards pass everything through)."""
    token = _ACTIVE.set(False)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def door(method: F) -> F:
    """Decorate a ctx door: whatever it does runs as runtime code."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _ACTIVE.get():
            return method(*args, **kwargs)
        with runtime_code():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _given(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return sum(1 for value in args if value is not None) + sum(1 for value in kwargs.values() if value is not None)


def _guard_call(original: Callable[..., Any], rule: Rule, target: Target, name: str, *, method: bool) -> Callable[..., Any]:
    @functools.wraps(original)
    def guard(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.get():
            given = _given(args[1:] if method else args, kwargs)
            if not target.is_safe_call(given):
                raise NondeterminismError(rule, target, name)
        return original(*args, **kwargs)

    guard.__tracelock_guard__ = original  # type: ignore[attr-defined]
    return guard


class _GuardedEnviron(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` that refuses reads from agent code (writes stay allowed)."""

    _rule: Rule
    _target: Target

    def __getitem__(self, key: Any) -> Any:
        if _ACTIVE.get():
            raise NondeterminismError(self._rule, self._target, "os.environ")
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[Any]:
        if _ACTIVE.get():
            raise NondeterminismError(self._rule, self._target, "os.environ")
        iterator: Iterator[Any] = super().__iter__()
        return iterator

    def __contains__(self, key: Any) -> bool:
        if _ACTIVE.get():
            raise NondeterminismError(self._rule, self._target, "os.environ")
        return bool(super().__contains__(key))


def _resolve(name: str) -> tuple[Any, str, Any] | None:
    """(owner, attribute, value) for a dotted name whose module is importable here."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        if module_name not in sys.modules and module_name not in _STDLIB:
            continue
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            return None
        for part in parts[cut:-1]:
            owner = getattr(owner, part, None)
            if owner is None:
                return None
        value = getattr(owner, parts[-1], None)
        return (owner, parts[-1], value) if value is not None else None
    return None


def _install_call(rule: Rule, target: Target, name: str) -> None:
    found = _resolve(name)
    if found is None:
        _UNGUARDED[name] = "module not imported"
        return
    owner, attribute, value = found
    if getattr(value, "__tracelock_guard__", None) is not None:
        return
    try:
        if inspect.isclass(value):
            init = value.__init__
            if getattr(init, "__tracelock_guard__", None) is not None:
                return
            setattr(value, "__init__", _guard_call(init, rule, target, name, method=True))  # noqa: B010
        else:
            setattr(owner, attribute, _guard_call(value, rule, target, name, method=False))
    except (TypeError, AttributeError):
        _UNGUARDED[name] = "a built-in type's attribute cannot be wrapped"


def _install_module(rule: Rule, target: Target) -> None:
    module = sys.modules.get(target.name)
    if module is None and target.name in _STDLIB:
        module = importlib.import_module(target.name)
    if module is None:
        _UNGUARDED[target.name] = "module not imported"
        return
    exported = set(getattr(module, "__all__", None) or ())
    for attribute in sorted(exported or dir(module)):
        if attribute.startswith("_") or attribute in rule.excludes:
            continue
        value = getattr(module, attribute, None)
        # What the module defines or exports (``socket`` exports functions of ``_socket``),
        # not what it merely imported.
        if value is None or (attribute not in exported and getattr(value, "__module__", None) != module.__name__):
            continue
        if inspect.isclass(value) and issubclass(value, BaseException):
            continue
        if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.isclass(value):
            _install_call(rule, Target(f"{target.name}.{attribute}"), f"{target.name}.{attribute}")


def install() -> None:
    """Install every guard that can be installed now (cheap when nothing is new)."""
    with _LOCK:
        for rule, target in patchable_targets():
            key = f"{rule.id}:{target.name}"
            if key in _DONE:
                continue
            module_name = target.name if target.kind is TargetKind.MODULE else target.name.rsplit(".", 1)[0]
            top = module_name.split(".")[0]
            if module_name not in sys.modules and module_name not in _STDLIB and top not in sys.modules:
                continue  # guarded later, if the program imports it
            if target.kind is TargetKind.READ:
                if target.name == "os.environ" and not isinstance(os.environ, _GuardedEnviron):
                    guarded = _GuardedEnviron(
                        os.environ._data,  # type: ignore[attr-defined]
                        os.environ.encodekey,
                        os.environ.decodekey,
                        os.environ.encodevalue,
                        os.environ.decodevalue,
                    )
                    guarded._rule, guarded._target = rule, target
                    os.environ = guarded  # noqa: B003 - the same data, guarded reads
                elif target.name != "os.environ":
                    _UNGUARDED[target.name] = "only os.environ reads are guarded at run time"
            elif target.kind is TargetKind.MODULE:
                _install_module(rule, target)
            else:
                _install_call(rule, target, target.name)
            _DONE.add(key)


def unguarded_targets() -> dict[str, str]:
    """Catalogue targets strict mode could not guard in this process, and why."""
    return dict(_UNGUARDED)
