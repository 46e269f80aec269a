"""The runtime's import graph: no circles, counting every import statement (those under
``if TYPE_CHECKING`` and inside functions too)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tracelock.runtime

ROOT = Path(tracelock.runtime.__file__).parent
PACKAGE = "tracelock.runtime"


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def runtime_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The modules ``path`` imports (resolved: ``from a import b`` is ``a.b`` when that is a
    module), inside or outside the runtime."""
    targets: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else base)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = runtime_modules()
    return {
        name: {target for target in imported(path, name, modules) if target in modules and target != name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target):], target]
            if target not in state:
                found = visit(target)
                if found is not None:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def test_the_cycle_finder_finds_a_type_only_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_type_checking_and_function_level_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tracelock.runtime.x import Y\n"
        "def f():\n    import tracelock.runtime.z\n",
        encoding="utf-8",
    )
    modules = {"tracelock.runtime.x": source, "tracelock.runtime.z": source}
    assert {"tracelock.runtime.x", "tracelock.runtime.z"} <= imported(source, "tracelock.runtime.m", modules)


def test_the_runtime_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 20
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def parts_table() -> dict[str, tuple[list[str], set[str] | None, list[str]]]:
    """The table of docs/architecture.md's "The runtime's parts": by part, where it lives,
    the parts it may import (None: every part) and the modules outside the runtime it may."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## The runtime's parts", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| part")]
    table: dict[str, tuple[list[str], set[str] | None, list[str]]] = {}
    for row in rows:
        part, where, _, may = (cell.strip() for cell in row.strip("|").split("|"))
        places = re.findall(r"`([^`]+)`", where)
        outside = re.findall(r"`([^`]+)`", may)
        inside = re.sub(r"`[^`]+`", "", may).replace(";", ",")
        names = {name.strip() for name in inside.split(",") if name.strip()}
        table[part] = (places, None if names == {"every part"} else names, outside)
    return table


def part_of(module: str, table: dict[str, tuple[list[str], set[str] | None, list[str]]]) -> str:
    first = module.removeprefix(PACKAGE).lstrip(".").split(".")[0] or "__init__"
    for part, (places, _, _) in table.items():
        if f"{first}/" in places or f"{first}.py" in places:
            return part
    raise AssertionError(f"{module} belongs to no part of docs/architecture.md")


def test_every_runtime_import_follows_the_parts_table() -> None:
    table = parts_table()
    assert {"pipeline", "doors", "facade"} <= set(table)
    assert "provenance" in table  # what produced a run (issue 25)
    assert "queue" in table  # the run queue and its workers (issue 23)
    modules = runtime_modules()
    wrong = []
    for name, path in modules.items():
        part = part_of(name, table)
        _, allowed, outside = table[part]
        for target in imported(path, name, modules):
            if target in modules:
                other = part_of(target, table)
                if other != part and allowed is not None and other not in allowed:
                    wrong.append(f"{name} ({part}) imports {target} ({other})")
            elif (
                target.startswith("tracelock.")
                and allowed is not None
                and not any(target == prefix or target.startswith(prefix + ".") for prefix in outside)
            ):
                wrong.append(f"{name} ({part}) imports {target}")
    assert not wrong, "\n".join(wrong)


PACKAGE_ROOT = ROOT.parent
#: The layers that may import ``tracelock.integrations`` (docs/architecture.md, the layer
#: table), and what integrations may import.
MAY_IMPORT_INTEGRATIONS = ("tracelock.integrations", "tracelock.cli", "tracelock.web")
INTEGRATIONS_MAY_IMPORT = ("tracelock.integrations", "tracelock.runtime", "tracelock.storage", "tracelock.core", "tracelock.errors")


def package_imports() -> dict[str, set[str]]:
    """Every module of the package and the ``tracelock`` modules it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        parts = ["tracelock", *path.relative_to(PACKAGE_ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        found[name] = {target for target in imported(path, name, {}) if target.startswith("tracelock")}
    return found


def test_integrations_sit_above_the_runtime() -> None:
    graph = package_imports()
    assert any(name.startswith("tracelock.integrations.") for name in graph)
    wrong = []
    for name, targets in graph.items():
        inside = name.startswith("tracelock.integrations")
        for target in targets:
            facade = name == "tracelock"  # re-exports the public API
            if target.startswith("tracelock.integrations") and not (facade or name.startswith(MAY_IMPORT_INTEGRATIONS)):
                wrong.append(f"{name} imports {target}")
            if inside and not target.startswith(INTEGRATIONS_MAY_IMPORT):
                wrong.append(f"{name} (integrations) imports {target}")
    assert not wrong, "\n".join(wrong)


def reached(start: str, graph: dict[str, set[str]]) -> set[str]:
    """Every ``tracelock`` module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, set()))
    return seen - {start}


def test_the_folds_the_pipeline_consults_reach_no_store() -> None:
    """Emergency stops and daily budgets each live in one package: a pure fold the pipeline
    decides with (``board``, ``ledger``) and the journal that keeps its entries in the store.
    The fold reaches no storage module and no journal, however indirectly."""
    graph = package_imports()
    for fold, journal in (
        ("tracelock.runtime.stops.board", "tracelock.runtime.stops.journal"),
        ("tracelock.runtime.daily.ledger", "tracelock.runtime.daily.journal"),
    ):
        assert fold in graph and journal in graph
        assert fold in graph[journal]  # the journal folds into it
        found = reached(fold, graph)
        assert "tracelock.runtime.outcomes" in found  # its step codes
        impure = sorted(name for name in found if name.startswith("tracelock.storage") or name.endswith(("journal", "admin_feed")))
        assert not impure, f"{fold} reaches {impure}"
