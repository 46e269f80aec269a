"""A run's provenance document, and how two of them differ.

The ``provenance`` member of a ``run.start`` payload (docs/spec.md, section 3.6)::

    {"engine": {"tracelock", "python", "implementation", "platform", "distributions"},
     "code":   {"digest", "modules": {module name: sha256 of its source file}},
     "tools":  {tool name: H(the tool's definition)}}

It is outside the fingerprint (section 5.1 takes only ``agent``, ``input`` and ``policy``
from the start): a run recorded under another engine, or with other code, that takes the
same path has the same fingerprint. ``replay`` and ``diff`` compare it (:func:`differences`)
and report what changed as information.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from tracelock.core.fingerprint import value_hash
from tracelock.runtime.provenance.code import code_identity, module_differences
from tracelock.runtime.provenance.identity import current_engine, engine_differences
from tracelock.runtime.tools.toolkit import Toolkit

__all__ = ["Provenance", "NO_PROVENANCE", "differences", "unchanged", "describe_differences"]


def _module_of(func: Callable[..., Any]) -> str | None:
    name = getattr(func, "__module__", None)
    if not isinstance(name, str):
        name = getattr(type(func), "__module__", None)
    return name if isinstance(name, str) else None


class Provenance:
    """Where a runtime takes the provenance of its runs from.

    ``engine`` is the engine identity to record (default: this process's, read once); a
    test passes another one to simulate an upgrade. ``record=False`` records no provenance
    at all (the golden vectors are recorded so, to stay independent of the interpreter).

    The document of an agent is computed once per (agent module, toolkit revision) and
    reused by every later run: a run's hot path pays a dictionary lookup.
    """

    def __init__(self, engine: Mapping[str, str] | None = None, *, record: bool = True) -> None:
        self._engine = dict(engine) if engine is not None else None
        self.record = record
        self._lock = threading.Lock()
        self._cache: weakref.WeakKeyDictionary[Toolkit, dict[tuple[Any, ...], tuple[str, dict[str, Any]]]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def engine(self) -> dict[str, str]:
        return self._engine if self._engine is not None else current_engine()

    def document(self, func: Callable[..., Any], toolkit: Toolkit) -> dict[str, Any] | None:
        """The provenance of a run of ``func`` with ``toolkit``'s tools (None when this
        source records none)."""
        reference = self.reference(func, toolkit)
        return None if reference is None else reference[1]

    def reference(self, func: Callable[..., Any], toolkit: Toolkit) -> tuple[str, dict[str, Any]] | None:
        """``(H(document), document)`` for a run of ``func``: a run's start names the hash,
        and the store keeps the document once (``provenance.register``)."""
        if not self.record:
            return None
        module = _module_of(func)
        # A reloaded module is another object: its code is identified again.
        loaded = id(sys.modules.get(module or ""))  # tracelock: allow TL-ID-001 -- a cache key (is the module still the one identified?), recorded nowhere
        key = (module, loaded, toolkit.revision)
        with self._lock:
            known = self._cache.get(toolkit, {}).get(key)
        if known is not None:
            return known
        roots = {module} if module is not None else set()
        roots.update(name for tool in toolkit.tools.values() if (name := _module_of(tool.func)) is not None)
        document = {
            "engine": self.engine,
            "code": code_identity(roots),
            "tools": {name: toolkit.tools[name].definition_digest for name in sorted(toolkit.tools)},
        }
        reference = (value_hash(document), document)
        with self._lock:
            self._cache.setdefault(toolkit, {})[key] = reference
        return reference


NO_PROVENANCE = Provenance(record=False)


def differences(recorded: Any, current: Any) -> dict[str, Any]:
    """What differs between a recorded provenance and the current one: ``engine`` (the
    members that differ), ``modules`` and ``tools`` (by name: changed, added, removed).
    ``recorded`` is None when the run recorded no provenance."""
    was = recorded if isinstance(recorded, dict) else {}
    now = current if isinstance(current, dict) else {}
    return {
        "recorded": isinstance(recorded, dict),
        "engine": engine_differences(was.get("engine"), now.get("engine")) if was else [],
        "modules": module_differences((was.get("code") or {}).get("modules"), (now.get("code") or {}).get("modules")),
        "tools": module_differences(was.get("tools"), now.get("tools")),
    }


def unchanged() -> dict[str, Any]:
    """What :func:`differences` finds between a recorded provenance and the current one when
    both are the same document (known by their equal hashes, without reading either)."""
    return {"recorded": True, "engine": [], "modules": [], "tools": []}


def _short(value: Any) -> str:
    """A digest cut to 12 digits for people; any other value as it is."""
    text = str(value)
    return text[:12] if len(text) == 64 and all(char in "0123456789abcdef" for char in text) else text


def describe_differences(found: Mapping[str, Any], *, now: str = "replayed", then: str = "recorded") -> list[str]:
    """One line per difference, for people ("replayed under tracelock 0.3.0, recorded
    under 0.2.1")."""
    if not found.get("recorded"):
        return [f"the run recorded no provenance: the engine and code it was {then} with are unknown"]
    lines = [
        f"{now} under {item['field']} {_short(item['current'])}, {then} under {_short(item['recorded'])}"
        for item in found.get("engine", [])
    ]
    for what in ("modules", "tools"):
        changes = found.get(what, [])
        if changes:
            named = ", ".join(f"{item['name']} ({item['change']})" for item in changes)
            label = "modules" if what == "modules" else "tool definitions"
            lines.append(f"{label} changed since the run was {then}: {named}")
    return lines
