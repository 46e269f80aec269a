"""Symbol tables of the scanned modules and name resolution across them.

Every module gets a namespace built from its top-level statements (imports, ``def``,
``class``, assignments, including those under ``if``/``try``/``with``). Functions get a
scope built lazily from their own statements (parameters, local imports, assignments,
nested ``def``). :class:`Project` resolves an expression to a :data:`Ref`:

- :class:`Ext`: a fully qualified name outside the scanned code (``time.time``);
- :class:`ExtObj`: a value made by calling an outside callable (``random.Random(42)``);
- :class:`Mod`, :class:`Fn`, :class:`Cls`, :class:`Obj`: a scanned module, function,
  class, or an instance of a scanned class.

Resolution is flow-insensitive: a name bound several times resolves only when every
binding resolves to the same thing (``None`` placeholders are ignored). Anything it cannot
tell (parameters without annotations, subscripts, call results without a return annotation)
resolves to ``None`` and is left alone: the scan prefers missing a finding to inventing one.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tracelock.analysis.loader import SourceFile
from tracelock.analysis.rules import Rule, Target, TargetKind, match

__all__ = [
    "Ref",
    "Ext",
    "ExtObj",
    "Mod",
    "Fn",
    "Cls",
    "Obj",
    "FuncInfo",
    "ClassInfo",
    "ModuleInfo",
    "FuncScope",
    "Scope",
    "Project",
    "iter_statements",
    "decorator_name",
    "count_given_args",
    "match_ext",
    "opens_for_reading",
    "is_file_open",
    "FILE_READ_RULE",
]

BUILTIN_NAMES = frozenset(dir(builtins))

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def decorator_name(expr: ast.expr) -> str | None:
    """The last name of a decorator: ``agent`` for ``@rt.agent``, ``tool`` for ``@x.tool(...)``."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def count_given_args(call: ast.Call) -> int:
    """How many arguments a call gives, not counting literal ``None``."""
    given = 0
    for arg in call.args:
        if not (isinstance(arg, ast.Constant) and arg.value is None):
            given += 1
    for kw in call.keywords:
        if not (isinstance(kw.value, ast.Constant) and kw.value.value is None):
            given += 1
    return given


def iter_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body``, through compound statements but not into nested
    ``def``/``class`` bodies (those are yielded themselves)."""
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        yield stmt
        children: list[ast.stmt] = []
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While)):
            children = stmt.body + stmt.orelse
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            children = stmt.body
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            children = list(stmt.body)
            for handler in stmt.handlers:
                children.extend(handler.body)
            children.extend(stmt.orelse)
            children.extend(stmt.finalbody)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                children.extend(case.body)
        stack.extend(reversed(children))


# --------------------------------------------------------------------------- references


@dataclass(frozen=True)
class Ext:
    name: str
    on_result: bool = False
    """Reached through the value a call returned (``requests.get(u).json``): a method of a
    result, not a member of the module, so module targets do not cover it."""


@dataclass(frozen=True)
class ExtObj:
    made_by: str
    flag: str | None = None
    """The rule its construction breaks (``random.Random()`` unseeded), if any."""
    annotated: bool = False
    """Known from a type annotation, not from a call seen in the code."""


_OPEN_MODE_INDEX = {"builtins.open": 1, "io.open": 1}


FILE_READ_RULE = "TL-FS-001"


def is_file_open(rule_id: str, name: str) -> bool:
    """Whether ``name`` is one of the file-read rule's ``open`` callables (mode matters)."""
    return rule_id == FILE_READ_RULE and name.rsplit(".", 1)[-1] == "open"


def opens_for_reading(name: str, call: ast.Call) -> bool:
    """Whether a call of the file-opening callable ``name`` may read: its ``mode`` is absent
    (``"r"``) or a literal with ``r`` or ``+``. A mode that is not a literal cannot be told
    and counts as not reading (the scan prefers missing a finding to inventing one)."""
    index = _OPEN_MODE_INDEX.get(name, 0)
    mode: ast.expr | None = None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None and len(call.args) > index:
        mode = call.args[index]
    if mode is None:
        return True
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return "r" in mode.value or "+" in mode.value
    return False


def match_ext(ref: Ext) -> tuple[Rule, Target] | None:
    """The catalogue entry covering ``ref``. A module target does not cover a member of a
    call's result: ``resp.json()`` after ``resp = requests.get(url)`` is not a second network
    call (one call, one finding)."""
    hit = match(ref.name)
    if hit is not None and ref.on_result and hit[1].kind is TargetKind.MODULE:
        return None
    return hit


@dataclass(frozen=True)
class Mod:
    module: ModuleInfo


@dataclass(frozen=True)
class Fn:
    func: FuncInfo


@dataclass(frozen=True)
class Cls:
    cls: ClassInfo


@dataclass(frozen=True)
class Obj:
    cls: ClassInfo
    skip_self: bool = False
    """``super()``: look attributes up in the bases only."""


Ref = Ext | ExtObj | Mod | Fn | Cls | Obj


# --------------------------------------------------------------------------- tables


@dataclass(eq=False)
class FuncInfo:
    module: ModuleInfo
    node: FunctionNode
    qualname: str
    cls: ClassInfo | None = None
    parent: FuncInfo | None = None
    scope: FuncScope | None = None
    kind: Literal["def", "lambda", "value"] = "def"
    """``def``; ``lambda`` (a module-level lambda, as a function returning its body); or
    ``value`` (the module-level statements binding one name, run at import)."""

    @property
    def display(self) -> str:
        return f"{self.module.name}:{self.qualname}"

    @property
    def decorators(self) -> list[str]:
        return [n for n in (decorator_name(d) for d in self.node.decorator_list) if n]

    @property
    def is_property(self) -> bool:
        return any(n.endswith("property") for n in self.decorators)

    @property
    def is_staticmethod(self) -> bool:
        return "staticmethod" in self.decorators

    @property
    def is_classmethod(self) -> bool:
        return "classmethod" in self.decorators


@dataclass(eq=False)
class ClassInfo:
    module: ModuleInfo
    node: ast.ClassDef
    qualname: str
    methods: dict[str, FuncInfo] = field(default_factory=dict)
    attrs: dict[str, list[ast.expr | None]] = field(default_factory=dict)
    annotations: dict[str, ast.expr] = field(default_factory=dict)
    inst_attrs: dict[str, list[tuple[ast.expr | None, FuncInfo]]] | None = None
    inst_annotations: dict[str, tuple[ast.expr, FuncInfo]] = field(default_factory=dict)
    base_infos: list[ClassInfo] | None = None

    @property
    def decorators(self) -> list[str]:
        return [n for n in (decorator_name(d) for d in self.node.decorator_list) if n]


@dataclass(eq=False)
class ModuleInfo:
    source: SourceFile
    name: str
    package: str
    imports: dict[str, str] = field(default_factory=dict)
    defs: dict[str, FuncInfo | ClassInfo] = field(default_factory=dict)
    values: dict[str, list[ast.expr | None]] = field(default_factory=dict)
    first_kind: dict[str, str] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)
    functions: list[FuncInfo] = field(default_factory=list)
    classes: list[ClassInfo] = field(default_factory=list)
    value_stmts: dict[str, list[ast.Assign | ast.AnnAssign]] = field(default_factory=dict)


@dataclass(eq=False)
class FuncScope:
    func: FuncInfo
    parent: FuncScope | None
    params: dict[str, ast.expr | None] = field(default_factory=dict)
    values: dict[str, list[ast.expr | None]] = field(default_factory=dict)
    annotations: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    defs: dict[str, FuncInfo] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    global_names: set[str] = field(default_factory=set)
    self_name: str | None = None
    cls_name: str | None = None
    nested: list[FuncInfo] = field(default_factory=list)

    @property
    def module(self) -> ModuleInfo:
        return self.func.module

    def binds(self, name: str) -> bool:
        return (
            name in self.params
            or name in self.values
            or name in self.imports
            or name in self.defs
            or name in self.hidden
            or name in self.annotations
        )


Scope = FuncScope | ModuleInfo

_MISSING = object()


def _import_base(module: ModuleInfo, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.package.split(".") if module.package else []
    keep = len(parts) - (node.level - 1)
    base = ".".join(parts[: max(keep, 0)])
    if node.module:
        base = f"{base}.{node.module}" if base else node.module
    return base


def _bind_import(table: dict[str, str], module: ModuleInfo, stmt: ast.stmt) -> list[str]:
    bound: list[str] = []
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname:
                table[alias.asname] = alias.name
                bound.append(alias.asname)
            else:
                top = alias.name.split(".")[0]
                table.setdefault(top, top)
                bound.append(top)
    elif isinstance(stmt, ast.ImportFrom):
        base = _import_base(module, stmt)
        for alias in stmt.names:
            if alias.name == "*":
                continue
            local = alias.asname or alias.name
            table.setdefault(local, f"{base}.{alias.name}" if base else alias.name)
            bound.append(local)
    return bound


def _target_names(target: ast.expr) -> Iterator[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


# --------------------------------------------------------------------------- project


class Project:
    """All scanned modules, with name resolution across them."""

    def __init__(self, sources: Sequence[SourceFile]) -> None:
        self.modules: dict[str, ModuleInfo] = {}
        self.all_modules: list[ModuleInfo] = []
        for source in sources:
            if source.tree is None:
                continue
            package = source.module if source.is_package else source.module.rpartition(".")[0]
            info = ModuleInfo(source=source, name=source.module, package=package)
            self._collect_module(info, source.tree)
            self.all_modules.append(info)
            self.modules.setdefault(info.name, info)
        self._qualname_cache: dict[str, Ref | None] = {}
        self._value_cache: dict[tuple[int, str], Ref | None] = {}
        self._resolving: set[tuple[int, str]] = set()
        self._lambdas: dict[int, FuncInfo] = {}
        self._value_funcs: dict[tuple[int, str], FuncInfo | None] = {}

    # ----------------------------------------------------------------- collection

    def _collect_module(self, module: ModuleInfo, tree: ast.Module) -> None:
        self._collect_body(module, tree.body, None, "")

    def _note(self, module: ModuleInfo, name: str, kind: str) -> None:
        module.first_kind.setdefault(name, kind)

    def _collect_body(
        self, module: ModuleInfo, body: Sequence[ast.stmt], cls: ClassInfo | None, prefix: str
    ) -> None:
        for stmt in iter_statements(body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                func = FuncInfo(module=module, node=stmt, qualname=prefix + stmt.name, cls=cls)
                module.functions.append(func)
                table: dict[str, FuncInfo | ClassInfo] | dict[str, FuncInfo]
                table = module.defs if cls is None else cls.methods
                # The last definition wins (conditional definitions, an implementation after
                # its @overload stubs), except that a property's setter or deleter does not
                # replace its getter and an @overload stub replaces nothing.
                names = func.decorators
                keeps_first = "overload" in names or any(
                    n in ("setter", "deleter") for n in names
                )
                if stmt.name not in table or not keeps_first:
                    table[stmt.name] = func
                if cls is None:
                    self._note(module, stmt.name, "def")
            elif isinstance(stmt, ast.ClassDef):
                info = ClassInfo(module=module, node=stmt, qualname=prefix + stmt.name)
                module.classes.append(info)
                if cls is None:
                    module.defs.setdefault(stmt.name, info)
                    self._note(module, stmt.name, "def")
                else:
                    cls.attrs.setdefault(stmt.name, [])
                self._collect_body(module, stmt.body, info, info.qualname + ".")
            elif cls is None and isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                    module.stars.append(_import_base(module, stmt))
                for name in _bind_import(module.imports, module, stmt):
                    self._note(module, name, "import")
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For,
                                   ast.AsyncFor, ast.With, ast.AsyncWith)):
                values = module.values if cls is None else cls.attrs
                for name, value in _bindings(stmt):
                    values.setdefault(name, []).append(value)
                    if cls is None:
                        self._note(module, name, "value")
                        if isinstance(stmt, ast.Assign | ast.AnnAssign) and value is not None:
                            module.value_stmts.setdefault(name, []).append(stmt)
                if (
                    cls is not None
                    and isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                ):
                    cls.annotations[stmt.target.id] = stmt.annotation

    def scope_of(self, func: FuncInfo) -> FuncScope:
        """The (cached) local scope of ``func``."""
        if func.scope is not None:
            return func.scope
        parent = self.scope_of(func.parent) if func.parent is not None else None
        scope = FuncScope(func=func, parent=parent)
        args = func.node.args
        ordered = args.posonlyargs + args.args
        for arg in ordered + args.kwonlyargs:
            scope.params[arg.arg] = arg.annotation
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                scope.params[extra.arg] = None
        if func.cls is not None and ordered and not func.is_staticmethod:
            if func.is_classmethod:
                scope.cls_name = ordered[0].arg
            else:
                scope.self_name = ordered[0].arg
        module = func.module
        for stmt in iter_statements(func.node.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested = FuncInfo(
                    module=module,
                    node=stmt,
                    qualname=f"{func.qualname}.<locals>.{stmt.name}",
                    parent=func,
                )
                scope.defs.setdefault(stmt.name, nested)
                scope.nested.append(nested)
            elif isinstance(stmt, ast.ClassDef):
                scope.hidden.add(stmt.name)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                _bind_import(scope.imports, module, stmt)
            elif isinstance(stmt, (ast.Global, ast.Nonlocal)):
                if isinstance(stmt, ast.Global):
                    scope.global_names.update(stmt.names)
                else:
                    scope.hidden.difference_update(stmt.names)
            elif isinstance(stmt, ast.Try | ast.TryStar):
                for handler in stmt.handlers:
                    if handler.name:
                        scope.hidden.add(handler.name)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor,
                                 ast.With, ast.AsyncWith)):
                for name, value in _bindings(stmt):
                    scope.values.setdefault(name, []).append(value)
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    scope.annotations[stmt.target.id] = stmt.annotation
        for name in scope.global_names:
            scope.values.pop(name, None)
            scope.hidden.discard(name)
        func.scope = scope
        return scope

    # ----------------------------------------------------------------- resolution

    def resolve_qualname(self, qualname: str) -> Ref | None:
        """A dotted name (from an import) as a scanned object or an :class:`Ext`."""
        if qualname in self._qualname_cache:
            return self._qualname_cache[qualname]
        self._qualname_cache[qualname] = None  # cycle guard
        result: Ref | None
        if qualname in self.modules:
            result = Mod(self.modules[qualname])
        else:
            result = Ext(qualname)
            parts = qualname.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                prefix = ".".join(parts[:cut])
                if prefix in self.modules:
                    ref: Ref | None = Mod(self.modules[prefix])
                    for attr in parts[cut:]:
                        ref = self.member(ref, attr) if ref is not None else None
                    result = ref
                    break
        self._qualname_cache[qualname] = result
        return result

    def module_lookup(self, module: ModuleInfo, name: str) -> Ref | object | None:
        """``name`` in ``module``'s namespace; ``_MISSING`` when the module does not bind it."""
        kind = module.first_kind.get(name)
        if kind == "def":
            thing = module.defs[name]
            return Fn(thing) if isinstance(thing, FuncInfo) else Cls(thing)
        if kind == "import":
            return self.resolve_qualname(module.imports[name])
        if kind == "value":
            return self._resolve_values(module, name, module.values[name], module)
        sub = f"{module.name}.{name}"
        if sub in self.modules:
            return Mod(self.modules[sub])
        for star in module.stars:
            target = self.modules.get(star)
            if target is not None and target is not module:
                key = (id(target), "*" + name)
                if key in self._resolving:
                    continue
                self._resolving.add(key)
                try:
                    found = self.module_lookup(target, name)
                finally:
                    self._resolving.discard(key)
                if found is not _MISSING:
                    return found
            elif target is None and star:
                return Ext(f"{star}.{name}")
        return _MISSING

    def _resolve_values(
        self, owner: object, name: str, values: Sequence[ast.expr | None], scope: Scope
    ) -> Ref | None:
        key = (id(owner), name)
        if key in self._value_cache:
            return self._value_cache[key]
        if key in self._resolving:
            return None
        self._resolving.add(key)
        try:
            result = self._consistent(values, scope)
        finally:
            self._resolving.discard(key)
        self._value_cache[key] = result
        return result

    def _consistent(self, values: Sequence[ast.expr | None], scope: Scope) -> Ref | None:
        result: Ref | None = None
        for value in values:
            if value is None:
                return None
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            ref = self.resolve_expr(value, scope)
            if ref is None or (result is not None and ref != result):
                return None
            result = ref
        return result

    def lookup(self, name: str, scope: Scope) -> Ref | None:
        """A bare name as seen from ``scope`` (locals, enclosing functions, module, builtins)."""
        current: Scope = scope
        while isinstance(current, FuncScope):
            if name in current.global_names:
                current = current.module
                break
            if current.binds(name):
                return self._local(name, current)
            current = current.parent if current.parent is not None else current.module
        found = self.module_lookup(current, name)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        if name in BUILTIN_NAMES:
            return Ext(f"builtins.{name}")
        return None

    def _local(self, name: str, scope: FuncScope) -> Ref | None:
        if name in scope.defs:
            return Fn(scope.defs[name])
        if name in scope.imports:
            return self.resolve_qualname(scope.imports[name])
        if name in scope.annotations:
            typed = self.resolve_annotation(scope.annotations[name], scope)
            if typed is not None or name not in scope.values:
                return typed
        if name in scope.values:
            return self._resolve_values(scope, name, scope.values[name], scope)
        if name in scope.params:
            cls = scope.func.cls
            if cls is not None and name == scope.self_name:
                return Obj(cls)
            if cls is not None and name == scope.cls_name:
                return Cls(cls)
            annotation = scope.params[name]
            if annotation is not None:
                return self.resolve_annotation(annotation, scope.parent or scope.module)
        return None

    def resolve_annotation(self, annotation: ast.expr, scope: Scope) -> Ref | None:
        """The instance type an annotation names (``Client``, ``Client | None``, ``"Client"``)."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                parsed = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return None
            return self.resolve_annotation(parsed, scope)
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            for side in (annotation.left, annotation.right):
                if not (isinstance(side, ast.Constant) and side.value is None):
                    found = self.resolve_annotation(side, scope)
                    if found is not None:
                        return found
            return None
        if isinstance(annotation, ast.Subscript):
            outer = self.resolve_expr(annotation.value, scope)
            if isinstance(outer, Ext) and outer.name in (
                "typing.Optional", "typing.Annotated", "typing.Union"
            ):
                inner = annotation.slice
                if isinstance(inner, ast.Tuple) and inner.elts:
                    inner = inner.elts[0]
                return self.resolve_annotation(inner, scope)
            annotation = annotation.value
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            ref = self.resolve_expr(annotation, scope)
            if isinstance(ref, Cls):
                return Obj(ref.cls)
            if isinstance(ref, Ext):
                return ExtObj(ref.name, annotated=True)
        return None

    def resolve_expr(self, expr: ast.expr, scope: Scope) -> Ref | None:
        """What ``expr`` refers to, as far as static resolution can tell."""
        if isinstance(expr, ast.Name):
            return self.lookup(expr.id, scope)
        if isinstance(expr, ast.Attribute):
            base = self.resolve_expr(expr.value, scope)
            return self.member(base, expr.attr) if base is not None else None
        if isinstance(expr, ast.Call):
            return self.call_result(self.resolve_expr(expr.func, scope), expr, scope)
        if isinstance(expr, ast.Lambda) and isinstance(scope, ModuleInfo):
            return Fn(self.lambda_func(expr, scope))
        if isinstance(expr, ast.BinOp):
            return self.binop_result(self.resolve_expr(expr.left, scope), expr)
        return None

    @staticmethod
    def binop_result(left: Ref | None, expr: ast.BinOp) -> Ref | None:
        """``path / "name"`` is a path again; other operators are left alone."""
        if (
            isinstance(expr.op, ast.Div)
            and isinstance(left, ExtObj)
            and left.made_by.startswith("pathlib.")
        ):
            return ExtObj(left.made_by)
        return None

    def lambda_func(self, node: ast.Lambda, module: ModuleInfo) -> FuncInfo:
        """A module-level lambda as a function whose body returns the lambda's expression."""
        found = self._lambdas.get(id(node))
        if found is None:
            body = ast.copy_location(ast.Return(value=node.body), node.body)
            func_node = ast.copy_location(
                ast.FunctionDef(name="<lambda>", args=node.args, body=[body], decorator_list=[],
                                returns=None, type_comment=None),
                node,
            )
            found = FuncInfo(module=module, node=func_node, qualname="<lambda>", kind="lambda")
            self._lambdas[id(node)] = found
        return found

    def value_func(self, module: ModuleInfo, name: str) -> FuncInfo | None:
        """The module-level assignments of ``name`` as one function run at import (``None``
        when nothing assigns it a value there)."""
        key = (id(module), name)
        if key in self._value_funcs:
            return self._value_funcs[key]
        found: FuncInfo | None = None
        stmts = module.value_stmts.get(name)
        if stmts and module.first_kind.get(name) == "value":
            first = stmts[0]
            func_node = ast.copy_location(
                ast.FunctionDef(name=name, args=ast.arguments(
                    posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                    kwarg=None, defaults=[]), body=list(stmts), decorator_list=[], returns=None,
                    type_comment=None),
                first,
            )
            found = FuncInfo(module=module, node=func_node, qualname=f"<module>.{name}",
                             kind="value")
        self._value_funcs[key] = found
        return found

    def value_site(self, name: str, scope: Scope) -> FuncInfo | None:
        """The module-level value a bare name reads, as a :meth:`value_func` (``None`` when
        the name is local, a function, a class, a module or unknown)."""
        current: Scope = scope
        while isinstance(current, FuncScope):
            if name in current.global_names:
                current = current.module
                break
            if current.binds(name):
                if name in current.imports and name not in current.values:
                    return self.imported_value(current.imports[name], 0)
                return None
            current = current.parent if current.parent is not None else current.module
        return self.module_value(current, name, 0)

    def module_value(self, module: ModuleInfo, name: str, depth: int) -> FuncInfo | None:
        kind = module.first_kind.get(name)
        if kind == "value":
            return self.value_func(module, name)
        if kind == "import" and depth < 8:
            return self.imported_value(module.imports[name], depth + 1)
        return None

    def imported_value(self, qualname: str, depth: int) -> FuncInfo | None:
        module_name, _, attr = qualname.rpartition(".")
        module = self.modules.get(module_name)
        if module is None or not attr:
            return None
        return self.module_value(module, attr, depth)

    def call_result(self, callee: Ref | None, call: ast.Call, scope: Scope) -> Ref | None:
        """What calling ``callee`` returns (an instance for classes)."""
        if isinstance(callee, Cls):
            return Obj(callee.cls)
        if isinstance(callee, Ext):
            if callee.name == "builtins.super":
                if isinstance(scope, FuncScope) and scope.func.cls is not None:
                    return Obj(scope.func.cls, skip_self=True)
                return None
            if not callee.on_result:
                special = self._special_call(callee.name, call, scope)
                if special is not None:
                    return special
            return ExtObj(callee.name, self.constructor_flag(callee, call))
        if isinstance(callee, Fn) and callee.func.node.returns is not None:
            owner = callee.func.module
            return self.resolve_annotation(callee.func.node.returns, owner)
        return None

    def _special_call(self, name: str, call: ast.Call, scope: Scope) -> Ref | None:
        """Calls whose result is known statically: ``functools.partial(f, ...)`` calls ``f``;
        ``importlib.import_module("m")`` and ``__import__("m")`` with a literal name are the
        module."""
        if name == "functools.partial":
            if call.args and not isinstance(call.args[0], ast.Starred):
                inner = self.resolve_expr(call.args[0], scope)
                if isinstance(inner, Fn | Cls):
                    return inner
            return None
        if name not in ("importlib.import_module", "builtins.__import__") or not call.args:
            return None
        first = call.args[0]
        if not (
            isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value
            and not first.value.startswith(".")
        ):
            return None
        module = first.value
        if name == "builtins.__import__" and len(call.args) < 4 and not any(
            kw.arg == "fromlist" for kw in call.keywords
        ):
            module = module.split(".")[0]  # without a fromlist, the top-level package
        return self.resolve_qualname(module)

    @staticmethod
    def constructor_flag(callee: Ext, call: ast.Call) -> str | None:
        """The rule that a value made by calling ``callee`` breaks, if any: an unseeded
        generator, a pool, a client or result of a network or process call (whose methods,
        used where the value was made, are not reported a second time)."""
        hit = match_ext(callee)
        if hit is None:
            return None
        rule, target = hit
        if target.kind is TargetKind.READ or target.is_safe_call(count_given_args(call)):
            return None
        if is_file_open(rule.id, target.name) and not opens_for_reading(target.name, call):
            return None
        return rule.id

    def member(self, base: Ref | None, attr: str) -> Ref | None:
        """``base.attr``."""
        if base is None:
            return None
        if isinstance(base, Ext):
            return Ext(f"{base.name}.{attr}", base.on_result)
        if isinstance(base, ExtObj):
            return Ext(f"{base.made_by}.{attr}", not base.annotated)
        if isinstance(base, Mod):
            found = self.module_lookup(base.module, attr)
            return None if found is _MISSING else found  # type: ignore[return-value]
        if isinstance(base, Cls):
            return self.class_attr(base.cls, attr, set())
        if isinstance(base, Obj):
            if not base.skip_self:
                found_inst = self.instance_attr(base.cls, attr)
                if found_inst is not _MISSING:
                    return found_inst  # type: ignore[return-value]
                return self.class_attr(base.cls, attr, set())
            for parent in self.bases(base.cls):
                hit = self.class_attr(parent, attr, set())
                if hit is not None:
                    return hit
            return None
        return None

    def bases(self, cls: ClassInfo) -> list[ClassInfo]:
        """The scanned base classes of ``cls`` (others are ignored)."""
        if cls.base_infos is not None:
            return cls.base_infos
        cls.base_infos = []  # cycle guard
        out: list[ClassInfo] = []
        for base in cls.node.bases:
            ref = self.resolve_expr(base, cls.module)
            if isinstance(ref, Cls) and ref.cls is not cls:
                out.append(ref.cls)
        cls.base_infos = out
        return out

    def class_attr(self, cls: ClassInfo, attr: str, seen: set[int]) -> Ref | None:
        """``attr`` on a class or its scanned bases (depth-first, like a simple MRO)."""
        if id(cls) in seen:
            return None
        seen.add(id(cls))
        if attr in cls.methods:
            return Fn(cls.methods[attr])
        if attr in cls.annotations and not cls.attrs.get(attr):
            return self.resolve_annotation(cls.annotations[attr], cls.module)
        if attr in cls.attrs:
            for inner in cls.module.classes:
                if inner.qualname == f"{cls.qualname}.{attr}":
                    return Cls(inner)
            return self._resolve_values(cls, attr, cls.attrs[attr], cls.module)
        for parent in self.bases(cls):
            found = self.class_attr(parent, attr, seen)
            if found is not None:
                return found
        return None

    def find_method(self, cls: ClassInfo, name: str) -> FuncInfo | None:
        found = self.class_attr(cls, name, set())
        return found.func if isinstance(found, Fn) else None

    def instance_attr(self, cls: ClassInfo, attr: str) -> Ref | object | None:
        """``self.attr`` as assigned in the methods of ``cls`` (or ``_MISSING``)."""
        if cls.inst_attrs is None:
            self._collect_instance_attrs(cls)
        assert cls.inst_attrs is not None
        if attr in cls.inst_annotations:
            annotation, method = cls.inst_annotations[attr]
            typed = self.resolve_annotation(annotation, method.module)
            if typed is not None:
                return typed
        entries = cls.inst_attrs.get(attr)
        if not entries:
            for parent in self.bases(cls):
                found = self.instance_attr(parent, attr)
                if found is not _MISSING:
                    return found
            return _MISSING
        key = (id(cls), "self." + attr)
        if key in self._value_cache:
            return self._value_cache[key]
        if key in self._resolving:
            return None
        self._resolving.add(key)
        result: Ref | None = None
        try:
            for value, method in entries:
                if value is None:
                    result = None
                    break
                if isinstance(value, ast.Constant) and value.value is None:
                    continue
                ref = self.resolve_expr(value, self.scope_of(method))
                if ref is None or (result is not None and ref != result):
                    result = None
                    break
                result = ref
        finally:
            self._resolving.discard(key)
        self._value_cache[key] = result
        return result

    def _collect_instance_attrs(self, cls: ClassInfo) -> None:
        table: dict[str, list[tuple[ast.expr | None, FuncInfo]]] = {}
        for method in cls.methods.values():
            args = method.node.args.posonlyargs + method.node.args.args
            if not args or method.is_staticmethod or method.is_classmethod:
                continue
            self_name = args[0].arg
            for stmt in iter_statements(method.node.body):
                targets: list[ast.expr] = []
                value: ast.expr | None = None
                if isinstance(stmt, ast.Assign):
                    targets, value = stmt.targets, stmt.value
                    if len(targets) != 1 or isinstance(targets[0], (ast.Tuple, ast.List)):
                        value = None
                elif isinstance(stmt, ast.AnnAssign):
                    targets, value = [stmt.target], stmt.value
                elif isinstance(stmt, ast.AugAssign):
                    targets = [stmt.target]
                for target in targets:
                    for attr in _self_attrs(target, self_name):
                        table.setdefault(attr, []).append((value, method))
                        if isinstance(stmt, ast.AnnAssign):
                            cls.inst_annotations[attr] = (stmt.annotation, method)
        cls.inst_attrs = table


def _self_attrs(target: ast.expr, self_name: str) -> Iterator[str]:
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == self_name
    ):
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _self_attrs(elt, self_name)


def _bindings(stmt: ast.stmt) -> Iterator[tuple[str, ast.expr | None]]:
    """``(name, value)`` for each name a statement binds; value ``None`` when unknown."""
    if isinstance(stmt, ast.Assign):
        simple = len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        for target in stmt.targets:
            for name in _target_names(target):
                yield name.id, stmt.value if simple or isinstance(target, ast.Name) else None
    elif isinstance(stmt, ast.AnnAssign):
        if isinstance(stmt.target, ast.Name) and stmt.value is not None:
            yield stmt.target.id, stmt.value
    elif isinstance(stmt, ast.AugAssign):
        if isinstance(stmt.target, ast.Name) and not isinstance(
            stmt.op, (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)
        ):
            yield stmt.target.id, None
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        for name in _target_names(stmt.target):
            yield name.id, None
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        for item in stmt.items:
            if item.optional_vars is not None:
                for name in _target_names(item.optional_vars):
                    yield name.id, None
