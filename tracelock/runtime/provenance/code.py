"""Code identity: a digest of the source of the modules that make up an agent.

The roots are the agent's module and the modules of the tools it may call; from each
root, every module it imports (``import`` and ``from ... import`` statements anywhere in
its source, resolved against the modules actually loaded) is followed, as long as it is a
*project* module: loaded from a ``.py`` file outside the standard library and the
installed packages (site-packages), and not part of tracelock itself (the engine's
identity covers that). The result is a map from module name to the SHA-256 of its file's
bytes, and the hash of that map.

A file is read and parsed once per process for each (path, mtime, size): an agent's code
identity costs its first run a few milliseconds, and every later run a dictionary lookup.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tracelock.core.fingerprint import value_hash

__all__ = ["code_identity", "module_differences", "project_module"]

_lock = threading.Lock()
#: (path, mtime_ns, size) -> (sha256 of the bytes, names the source imports).
_files: dict[tuple[str, int, int], tuple[str, tuple[str, ...]]] = {}


def _excluded_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    found.update(path for path in sys.path if path.endswith(("site-packages", "dist-packages")))
    return tuple(sorted(os.path.realpath(path) + os.sep for path in found))


_EXCLUDED = _excluded_dirs()


def project_module(module: types.ModuleType | None) -> str | None:
    """The real path of ``module``'s source file when it is a project module, else None."""
    if module is None:
        return None
    name = getattr(module, "__name__", "")
    if name == "tracelock" or name.startswith("tracelock."):
        return None
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return None
    path = os.path.realpath(file)
    if path.startswith(_EXCLUDED):
        return None
    return path


def _read(path: str, name: str, package: str | None) -> tuple[str, tuple[str, ...]] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    key = (path, info.st_mtime_ns, info.st_size)
    with _lock:
        known = _files.get(key)
    if known is not None:
        return known
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    found = (hashlib.sha256(data).hexdigest(), tuple(sorted(_imports(data, name, package, path))))
    with _lock:
        _files[key] = found
    return found


def _imports(data: bytes, name: str, package: str | None, path: str) -> set[str]:
    """The module names an import statement of the source names (each candidate: the
    caller keeps those that are loaded)."""
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names.update(".".join(parts[: index + 1]) for index in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (package if package is not None else name.rpartition(".")[0]).split(".")
                anchor = anchor[: len(anchor) - node.level + 1] if node.level > 1 else anchor
                base = ".".join(part for part in [*anchor, base] if part)
            if not base:
                continue
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def code_identity(roots: Iterable[str]) -> dict[str, Any]:
    """``{"digest": H(modules), "modules": {name: sha256 of its file}}`` of the project
    modules reachable from the modules named by ``roots`` (those not loaded, or not project
    modules, are left out)."""
    modules: dict[str, str] = {}
    pending = sorted(set(roots))
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        module = sys.modules.get(name)
        path = project_module(module)
        if path is None:
            continue
        package = getattr(module, "__package__", None)
        read = _read(path, name, package if isinstance(package, str) else None)
        if read is None:
            continue
        digest, imported = read
        modules[name] = digest
        pending.extend(other for other in imported if other not in seen and other in sys.modules)
    ordered = {name: modules[name] for name in sorted(modules)}
    return {"digest": value_hash(ordered), "modules": ordered}


def module_differences(recorded: Any, current: Any) -> list[dict[str, Any]]:
    """The modules (or tools) of two ``{name: digest}`` maps that changed, were added or
    were removed, by name."""
    if not isinstance(recorded, dict) or not isinstance(current, dict):
        return []
    changes = []
    for name in sorted(set(recorded) | set(current)):
        before, after = recorded.get(name), current.get(name)
        if before == after:
            continue
        change = "added" if before is None else "removed" if after is None else "changed"
        changes.append({"name": name, "change": change, "recorded": before, "current": after})
    return changes
