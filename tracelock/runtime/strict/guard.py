"""Strict mode: the nondeterminism the entropy scan looks for, refused at run time.

With ``Runtime(strict=True)``, a call covered by a rule of the scan's catalogue
(``tracelock.analysis.rules``, a leaf module of plain data) raises
:class:`NondeterminismError` when agent code makes it during a run, naming the rule, what the
agent wrote and the ``ctx`` door to use instead. Nothing changes anywhere else:

* the guards are installed once, as thin wrappers around module attributes (``time.time``,
  ``random.random``, ``os.urandom``, ``uuid.uuid4``, ``subprocess.run``, ``os.environ`` reads...),
  and they pass every call through unless the calling thread is running agent code;
* "running agent code" is a context variable set only around the agent function and cleared
  inside every ctx door, so the runtime's own work, tools and LLM providers are never
  affected, nor are other threads;
* seeded uses stay allowed (``random.Random(42)``), as in the static scan, and so are the
  pure helpers a rule ``excludes`` (``socket.htons``).

When a guard is reached in agent code it walks the stack from its caller up to the frame
that entered agent code, and lets the call through when the walk meets

* the logging package (a log record reads the clock and the pid: observability, not a
  decision) or the import system (a module's first import runs its top level, which may
  read the environment), or
* another guard: the outermost guarded call was judged already and allowed, so what its
  implementation does inside is not judged again;

and, for the log-exempt rules, when the value is computed in the arguments of a logger
method call (``log.info("at %s", time.time())``), as the static scan exempts it.

Otherwise it raises, attributing the call to the nearest frame of code under the guard
(not in the standard library or site-packages): the message names the call that frame is
making, as written in its source (``date.today()``, ``uuid4()``), with the rule of that call
when the catalogue has one, else with the rule of the guarded call it reached
(``os.get_exec_path() (via os.environ)``).

Limits (the static scan covers them): a name bound before the guards were installed
(``from time import time`` at import time) keeps the original function, and methods of
built-in types (``datetime.datetime.now``) cannot be wrapped; either is caught only when its
implementation reaches a guarded function.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import enum
import functools
import importlib
import inspect
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any, TypeVar

from tracelock.analysis.rules import RULES_BY_ID, Rule, Target, TargetKind, match, patchable_targets
from tracelock.errors import RuntimeFault
from tracelock.runtime.strict import source

__all__ = [
    "NondeterminismError",
    "install",
    "agent_code",
    "runtime_code",
    "active",
    "unguarded_targets",
    "allow_library",
    "door_receiver",
]

F = TypeVar("F", bound=Callable[..., Any])

# The frame that entered agent code (the stack walk stops there), or None outside agent code.
_ACTIVE: contextvars.ContextVar[FrameType | None] = contextvars.ContextVar("tracelock_agent_code", default=None)
_LOCK = threading.Lock()
_DONE: set[str] = set()
_UNGUARDED: dict[str, str] = {}
# The modules (as one tuple) whose import would let install() guard more targets.
_WAITING: list[tuple[str, ...]] = []

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
    """Agent code reached for nondeterminism outside the ctx doors, in strict mode.

    ``details``: ``rule``, ``door``, ``target`` (the guarded name that was reached) and
    ``call`` (the qualified name of what the agent called, when it could be resolved)."""

    code = "NONDETERMINISM_DETECTED"

    def __init__(self, rule: Rule, target: Target, subject: str, *, call: str | None = None) -> None:
        details = {"rule": rule.id, "target": target.name, "door": rule.door}
        if call is not None:
            details["call"] = call
        super().__init__(f"[{rule.id}] {rule.message(subject)} (strict mode)", details=details)
        self.rule_id = rule.id
        self.door = rule.door


def active() -> bool:
    """True while the current thread runs agent code in strict mode."""
    return _ACTIVE.get() is not None


class _AgentCode(contextlib.AbstractContextManager[None]):
    def __enter__(self) -> None:
        # The frame running the ``with`` statement bounds every stack walk of this run.
        self._token = _ACTIVE.set(sys._getframe(1))

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._token)


def agent_code() -> contextlib.AbstractContextManager[None]:
    """Mark the agent function's execution (the runtime wraps the agent call in it)."""
    return _AgentCode()


@contextlib.contextmanager
def runtime_code() -> Iterator[None]:
    """Mark the runtime's own work inside a door (guards pass everything through)."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def door(method: F) -> F:
    """Decorate a ctx door: whatever it does runs as runtime code."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.get() is None:
            return method(*args, **kwargs)
        with runtime_code():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _given(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return sum(1 for value in args if value is not None) + sum(1 for value in kwargs.values() if value is not None)


#: Tests of objects whose methods are doors (a captured HTTP client): what library code
#: does inside such a method, with no agent frame below it, is the door's work.
_DOOR_RECEIVERS: list[Callable[[Any], bool]] = []


def door_receiver(predicate: Callable[[Any], bool]) -> None:
    """Register ``predicate``: a method of an object it accepts is a door (the HTTP capture
    registers "a client all of whose transports capture")."""
    if predicate not in _DOOR_RECEIVERS:
        _DOOR_RECEIVERS.append(predicate)


def _is_door(receiver: Any) -> bool:
    return any(predicate(receiver) for predicate in _DOOR_RECEIVERS)


def _guard_call(original: Callable[..., Any], rule: Rule, target: Target, name: str, *, method: bool) -> Callable[..., Any]:
    def guard(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.get() is not None:
            given = _given(args[1:] if method else args, kwargs)
            if not target.is_safe_call(given):
                _judge(rule, target, sys._getframe(1))
        return original(*args, **kwargs)

    return _as_guard(guard, original)


def _allow_call(original: Callable[..., Any], rule: Rule, target: Target, name: str, *, method: bool) -> Callable[..., Any]:
    """Wrap a pure helper a rule excludes: it is never judged, and neither is what it calls
    inside its own library (``httpx.Request()`` builds an ``httpx.ByteStream``, which the
    module-wide guard of ``httpx`` would otherwise refuse)."""

    def allowed(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    return _as_guard(allowed, original)


def _as_guard(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    _GUARD_CODES.add(wrapper.__code__)
    functools.update_wrapper(wrapper, original)
    wrapper.__tracelock_guard__ = original  # type: ignore[attr-defined]
    return wrapper


_GUARD_CODES: set[CodeType] = set()
_Wrap = Callable[..., Callable[..., Any]]
_RUNTIME = "tracelock.runtime."

# Frames of these modules make the guarded calls under them observability or import-time
# work, never a decision of the run.
_PASS_THROUGH = ("logging", "importlib", "_frozen_importlib", "_frozen_importlib_external", "zipimport")


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The standard library's and the installed packages' directories."""
    paths = sysconfig.get_paths()
    found = (paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    return tuple(sorted({os.path.join(os.path.realpath(path), "") for path in found if path}))


_LIBRARY: dict[str, bool] = {}

#: Libraries whose own calls of some rules are not the agent's (see allow_library).
_ALLOWED_LIBRARY_RULES: dict[str, tuple[str, ...]] = {}


def allow_library(package: str, rule_prefixes: tuple[str, ...]) -> None:
    """Let calls that ``package``'s own code makes (no agent frame below them) through for
    the rules whose id starts with one of ``rule_prefixes``. The HTTP capture registers an
    LLM SDK this way for its ids, clocks and retry jitter, which reach neither the recorded
    request nor a decision; its network access still has to go through the capture."""
    _ALLOWED_LIBRARY_RULES[package] = tuple(sorted(set(_ALLOWED_LIBRARY_RULES.get(package, ())) | set(rule_prefixes)))


def _allowed_library_frame(frame: FrameType, module: object, rule_id: str) -> bool:
    """A library's own frame that is let through: the library is allowed the rule, or the
    frame is a method of a door (a captured HTTP client)."""
    if _library_allows(module, rule_id):
        return True
    return bool(_DOOR_RECEIVERS) and _is_door(frame.f_locals.get("self"))


def _library_allows(module: object, rule_id: str) -> bool:
    if not isinstance(module, str) or not _ALLOWED_LIBRARY_RULES:
        return False
    prefixes = _ALLOWED_LIBRARY_RULES.get(module.partition(".")[0])
    return prefixes is not None and rule_id.startswith(prefixes)


def _passes_through(module: object) -> bool:
    if not isinstance(module, str):
        return False
    top = module.partition(".")[0]
    return top in _PASS_THROUGH


def _is_library(filename: str) -> bool:
    """Whether code from ``filename`` is the standard library or an installed package."""
    known = _LIBRARY.get(filename)
    if known is None:
        if filename.startswith("<frozen "):
            known = True
        elif filename.startswith("<"):
            known = False
        else:
            known = os.path.realpath(filename).startswith(_library_dirs())
        _LIBRARY[filename] = known
    return known


def _judge(rule: Rule, target: Target, caller: FrameType | None) -> None:
    """Raise for a guarded call that ``caller`` made in agent code, unless it passes through."""
    boundary = _ACTIVE.get()
    # Judging reads paths and source files: strict mode's own work, never agent code.
    with runtime_code():
        error = _verdict(rule, target, caller, boundary)
    if error is None:
        return
    try:
        raise error
    finally:
        # Break the cycle error -> traceback -> this frame -> error, so that what the refused
        # call had made (a half-constructed instance) is freed now, not at a later collection.
        del error, caller


def _verdict(
    rule: Rule, target: Target, caller: FrameType | None, boundary: FrameType | None
) -> NondeterminismError | None:
    agent_frames: list[FrameType] = []
    callee: FrameType | None = None
    frame = caller
    while frame is not None and frame is not boundary:
        code = frame.f_code
        module = frame.f_globals.get("__name__")
        if code in _GUARD_CODES:
            if not agent_frames:
                return None  # the implementation of a guarded call judged already and allowed
            # Agent code called back from inside an allowed guarded call (a seed's encode())
            # is judged as such.
        elif isinstance(module, str) and module.startswith(_RUNTIME):
            # The runtime called the agent from here (a callback the agent scheduled on the
            # event loop has the runtime below it, not the frame that entered agent code).
            break
        elif _passes_through(module) or (not agent_frames and _allowed_library_frame(frame, module, rule.id)):
            return None
        elif not _is_library(code.co_filename):
            agent_frames.append(frame)
        elif not agent_frames:
            callee = frame
        frame = frame.f_back
    error = _attributed(rule, target, agent_frames[0] if agent_frames else None, callee)
    if RULES_BY_ID[error.rule_id].log_exempt and any(source.log_argument(f) for f in agent_frames):
        return None  # a value computed only for a log line, which the static scan exempts too
    return error


def _attributed(rule: Rule, target: Target, agent: FrameType | None, callee: FrameType | None) -> NondeterminismError:
    """The error for ``target`` reached from ``agent`` (which called ``callee``, a library frame)."""
    reached = target.name if target.kind is TargetKind.READ else f"{target.name}()"
    node = source.expression(agent) if agent is not None else None
    written: str | None = None
    if isinstance(node, ast.Call):
        written = f"{ast.unparse(node.func)}()"
    elif isinstance(node, ast.Subscript):
        written = ast.unparse(node.value)
    elif isinstance(node, (ast.Name, ast.Attribute)):
        written = ast.unparse(node)
    call: str | None = None
    direct = False
    if callee is not None:
        call = source.frame_qualname(callee)
    elif agent is not None and isinstance(node, ast.Call):
        value = source.lookup(agent, node.func)
        direct = _is_guard(value)
        call = None if value is None else source.qualname(value)
    hit = match(call) if call is not None else None
    if hit is not None and hit[0].patchable:
        rule = hit[0]
        written = written or f"{call}()"
    elif written is not None and not direct and written != reached:
        written = f"{written} (via {reached})"
    return NondeterminismError(rule, target, written or reached, call=call)


def _is_guard(value: Any) -> bool:
    if inspect.isclass(value):
        value = value.__dict__.get("__init__")
    return getattr(value, "__tracelock_guard__", None) is not None


class _GuardedEnviron(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` that refuses reads from agent code (writes stay allowed)."""

    _rule: Rule
    _target: Target

    def __getitem__(self, key: Any) -> Any:
        if _ACTIVE.get() is not None:
            _judge(self._rule, self._target, sys._getframe(1))
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[Any]:
        if _ACTIVE.get() is not None:
            _judge(self._rule, self._target, sys._getframe(1))
        iterator: Iterator[Any] = super().__iter__()
        return iterator

    def __contains__(self, key: Any) -> bool:
        if _ACTIVE.get() is not None:
            _judge(self._rule, self._target, sys._getframe(1))
        return bool(super().__contains__(key))


# ``key in os.environ`` judged and allowed (a library's own read) reads ``self[key]`` inside:
# that inner read is the implementation of a guarded call, not a new one.
_GUARD_CODES.update(method.__code__ for method in (_GuardedEnviron.__getitem__, _GuardedEnviron.__iter__, _GuardedEnviron.__contains__))


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


def _install_call(rule: Rule, target: Target, name: str, wrap: _Wrap = _guard_call) -> None:
    found = _resolve(name)
    if found is None:
        _UNGUARDED[name] = "module not imported"
        return
    owner, attribute, value = found
    if getattr(value, "__tracelock_guard__", None) is not None:
        return
    try:
        if inspect.isclass(value):
            # A subclass gets a guard of its own: it may not share its base's safe arguments
            # (random.SystemRandom(42) is not seeded, random.Random(42) is).
            if getattr(value.__dict__.get("__init__"), "__tracelock_guard__", None) is not None:
                return
            setattr(value, "__init__", wrap(value.__init__, rule, target, name, method=True))  # noqa: B010
            return
        raw = inspect.getattr_static(owner, attribute) if inspect.isclass(owner) else None
        # A method keeps its kind: a classmethod guarded as a plain function would receive
        # the instance as an argument when called on one (``Path(".").cwd()``).
        if isinstance(raw, classmethod):
            setattr(owner, attribute, classmethod(wrap(raw.__func__, rule, target, name, method=True)))
        elif isinstance(raw, staticmethod):
            setattr(owner, attribute, staticmethod(wrap(raw.__func__, rule, target, name, method=False)))
        elif inspect.isfunction(raw):
            setattr(owner, attribute, wrap(raw, rule, target, name, method=True))
        else:
            setattr(owner, attribute, wrap(value, rule, target, name, method=False))
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
        if attribute.startswith("_"):
            continue
        if f"{target.name}.{attribute}" in rule.excludes:
            _install_call(rule, Target(f"{target.name}.{attribute}"), f"{target.name}.{attribute}", _allow_call)
            continue
        value = getattr(module, attribute, None)
        # What the module or its own submodules define (``requests.get`` is
        # ``requests.api.get``) or what it exports (``socket`` exports functions of
        # ``_socket``), not what it merely imported.
        defined_in = getattr(value, "__module__", None)
        own = isinstance(defined_in, str) and (defined_in + ".").startswith(module.__name__ + ".")
        if value is None or (attribute not in exported and not own):
            continue
        if inspect.isclass(value) and issubclass(value, (BaseException, enum.Enum)):
            continue  # errors and enumerations of constants are not effects
        if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.isclass(value):
            _install_call(rule, Target(f"{target.name}.{attribute}"), f"{target.name}.{attribute}")


def install() -> None:
    """Install every guard that can be installed now (cheap when nothing is new)."""
    # The runtime calls this before every strict run: after the first pass, only the modules
    # whose targets are still waiting need a look.
    if _WAITING and not any(name in sys.modules for name in _WAITING[0]):
        return
    with _LOCK:
        waiting: set[str] = set()
        for rule, target in patchable_targets():
            key = f"{rule.id}:{target.name}"
            if key in _DONE:
                continue
            module_name = target.name if target.kind is TargetKind.MODULE else target.name.rsplit(".", 1)[0]
            top = module_name.split(".")[0]
            if module_name not in sys.modules and module_name not in _STDLIB and top not in sys.modules:
                waiting.update((module_name, top))
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
        _WAITING[:] = [tuple(sorted(waiting))]


def unguarded_targets() -> dict[str, str]:
    """Catalogue targets strict mode could not guard in this process, and why."""
    return dict(_UNGUARDED)
