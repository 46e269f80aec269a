"""The checks run over one function body: call edges to scanned functions, and raw findings.

One :class:`FunctionChecker` pass over a function produces

- **edges**: calls (and references passed as arguments, e.g. ``Thread(target=work)``) to
  functions of the scanned code, each marked when it sits inside a logging call's arguments;
- **raw findings**: catalogue targets called or read, calls on unseeded generator instances
  made outside the function, set iteration whose order can leak, ``hash()`` and ``id()``.

Nested functions are separate functions, reached by an implicit edge from their ``def``.
Two more implicit edges: from a function to the functions its decorators define (the
wrapper that runs in its place), and from a read of a module-level value to that value's
module-level assignments (a *value* function, see :meth:`Project.value_func`). Default
arguments of top-level functions and methods are checked in the function's own pass, since
their value, computed at import, reaches every call that leaves them out.

A value function runs at import, not in the run: it makes no call edges, its lambdas are not
walked (their bodies run when called), and it reports only the rules of values
(:data:`IMPORT_TIME_RULES`), not effects; a generator or pool it creates is reported where it
is used, as before.

Logging exemption: arguments of a logging call (``logger.debug(...)``, ``logging.info(...)``,
``self.log.warning(...)``: a method named like a log level on ``logging.*`` or on a receiver
named ``log``/``logger``/``*_log``/``*_logger``) only reach a log line. Findings of
*log-exempt* rules (clock, environment, process state, uuid, hash, id, set order) inside them
are dropped, and the edges they make are marked so that the scanner can tell functions
reached only from log arguments.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from tracelock.analysis.rules import RULES, RULES_BY_ID, TargetKind
from tracelock.analysis.symbols import (
    Cls,
    Ext,
    ExtObj,
    Fn,
    FuncInfo,
    FuncScope,
    Mod,
    Obj,
    Project,
    Ref,
    Scope,
    count_given_args,
    is_file_open,
    match_ext,
    opens_for_reading,
)

__all__ = ["Edge", "RawFinding", "FunctionAnalysis", "FunctionChecker", "analyse_function"]

ORDER_RULE = "TL-ORDER-001"
HASH_RULE = "TL-HASH-001"
ID_RULE = "TL-ID-001"
SLEEP_RULE = "TL-CLOCK-002"

# Rules reported in a module-level value computed at import: the value itself is an input.
# Effects at import (network, processes, threads, sleeps) are not values the run reads.
IMPORT_TIME_RULES = frozenset(
    r.id for r in RULES
    if not r.meta and r.id not in {
        "TL-NET-001", "TL-PROC-001", "TL-CONC-001", "TL-CONC-002", SLEEP_RULE,
    }
)
# Generators and pools: made at import, each use is reported (calls on an instance created
# outside the function), so their construction is not reported a second time.
INSTANCE_MAKERS = frozenset(
    {"random.Random", "random.SystemRandom", "secrets.SystemRandom", "numpy.random.default_rng",
     "numpy.random.RandomState"}
    | set(RULES_BY_ID["TL-CONC-001"].names())
)

LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"}
)
_LOGGER_NAME = re.compile(r"^(?:.*_)?(?:log|logger)$", re.IGNORECASE)

# Consumers whose result does not depend on the iteration order of their argument.
ORDER_FREE = frozenset({
    "builtins.sorted", "builtins.set", "builtins.frozenset", "builtins.len", "builtins.sum",
    "builtins.min", "builtins.max", "builtins.any", "builtins.all", "builtins.isinstance",
})
# Consumers that turn iteration order into an ordered value.
ORDER_SINKS = frozenset({
    "builtins.list", "builtins.tuple", "builtins.enumerate", "builtins.iter", "builtins.zip",
    "builtins.map", "builtins.filter", "builtins.dict.fromkeys", "collections.deque",
    "collections.OrderedDict.fromkeys",
})
_ORDER_METHODS = frozenset({"join", "extend", "writelines", "fromkeys"})
_SET_TYPES = frozenset({"set", "frozenset", "Set", "FrozenSet", "AbstractSet", "MutableSet"})
_SET_RETURNING = frozenset(
    {"union", "intersection", "difference", "symmetric_difference", "copy"}
)
_SET_MUTATORS = frozenset({
    "add", "discard", "remove", "update", "difference_update", "intersection_update",
    "symmetric_difference_update",
})
_ID_SAFE_METHODS = frozenset(
    {"add", "discard", "remove", "get", "setdefault", "pop", "__contains__", "__getitem__"}
)
_SET_OPS = (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)


@dataclass(frozen=True)
class Edge:
    """A call (or callable reference) from one scanned function to another."""

    callee: FuncInfo
    line: int
    col: int
    in_log: bool


@dataclass(frozen=True)
class RawFinding:
    """A finding inside one function, with ``ast`` positions (0-based byte columns)."""

    rule_id: str
    subject: str
    line: int
    col: int
    end_line: int
    end_col: int
    stmt_line: int
    """First and last line of the enclosing statement (the header of a compound statement):
    where an inline allow comment applies."""
    stmt_end: int


@dataclass
class FunctionAnalysis:
    edges: list[Edge] = field(default_factory=list)
    findings: list[RawFinding] = field(default_factory=list)


def analyse_function(project: Project, func: FuncInfo) -> FunctionAnalysis:
    """Run every check over ``func``'s body."""
    return FunctionChecker(project, func).run()


def _short(name: str) -> str:
    return name[len("builtins."):] if name.startswith("builtins.") else name


def _is_set_annotation(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        head = annotation.value.split("[", 1)[0].strip().rsplit(".", 1)[-1]
        return head in _SET_TYPES
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    if isinstance(annotation, ast.Name):
        return annotation.id in _SET_TYPES
    if isinstance(annotation, ast.Attribute):
        return annotation.attr in _SET_TYPES
    return False


def _statement_span(stmt: ast.stmt) -> tuple[int, int]:
    """The lines of a simple statement, or of the header of a compound one."""
    end = stmt.end_lineno if stmt.end_lineno is not None else stmt.lineno
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        end = max(stmt.lineno, body[0].lineno - 1)
    return stmt.lineno, end


def _is_zero(expr: ast.expr) -> bool:
    return (
        isinstance(expr, ast.Constant)
        and isinstance(expr.value, int | float)
        and not isinstance(expr.value, bool)
        and expr.value == 0
    )


def _names_in(target: ast.expr) -> list[ast.Name]:
    return [n for n in ast.walk(target) if isinstance(n, ast.Name)]


def _order_insensitive(body: list[ast.stmt]) -> bool:
    """Whether a loop body cannot depend on the order it sees elements in.

    Accepted: ``pass``, ``continue``, counters (``n += 1`` on a plain name), assignments of
    constants (flags), set mutations (``seen.add(x)``), and ``if`` statements made of those.
    """
    for stmt in body:
        if isinstance(stmt, (ast.Pass, ast.Continue)):
            continue
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            continue
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Constant)
            and all(isinstance(t, ast.Name) for t in stmt.targets)
        ):
            continue
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr in _SET_MUTATORS
        ):
            continue
        if isinstance(stmt, ast.If) and _order_insensitive(stmt.body) and _order_insensitive(
            stmt.orelse
        ):
            continue
        return False
    return True


class FunctionChecker(ast.NodeVisitor):
    """One pass over a function body (see the module docstring)."""

    def __init__(self, project: Project, func: FuncInfo) -> None:
        self.project = project
        self.func = func
        self.scope = project.scope_of(func)
        self.result = FunctionAnalysis()
        self.in_log = 0
        self.order_safe: set[int] = set()
        self.id_safe: set[int] = set()
        self.read_skip: set[int] = set()
        self._cache: dict[int, Ref | None] = {}
        self._names: dict[str, Ref | None] = {}
        self._shadow: dict[str, int] = {}
        self._stmt_span = (0, 0)
        self._nested = {id(f.node): f for f in self.scope.nested}
        self.value_mode = func.kind == "value"
        self._suffix = ""
        self._name_sites: dict[str, FuncInfo | None] = {}
        self._member_sites: dict[tuple[int, str], FuncInfo | None] = {}
        self._value_edges: set[tuple[int, bool]] = set()
        self._instances: set[int] = set()

    def run(self) -> FunctionAnalysis:
        if self.value_mode:
            for stmt in self.func.node.body:
                value = getattr(stmt, "value", None)
                if isinstance(value, ast.expr):
                    made = self.resolve(value)
                    if isinstance(made, ExtObj) and made.made_by in INSTANCE_MAKERS:
                        self._instances.add(id(value))
        elif self.func.kind == "def":
            self._decorator_wrappers()
            if self.func.parent is None:  # a nested def's defaults are visited by its parent
                self._defaults()
        for stmt in self.func.node.body:
            self.visit(stmt)
        return self.result

    def _decorator_wrappers(self) -> None:
        """Edges to the functions a decorator defines: ``@timed`` returns its ``wrapper``,
        which runs in place of this function; ``@retry(3)`` one level deeper. The
        decorator's own body runs at import and is not followed."""
        func = self.func
        outer: Scope = self.project.scope_of(func.parent) if func.parent is not None else (
            func.module
        )
        for decorator in func.node.decorator_list:
            target, depth = (
                (decorator.func, 2) if isinstance(decorator, ast.Call) else (decorator, 1)
            )
            ref = self.project.resolve_expr(target, outer)
            if not isinstance(ref, Fn):
                continue
            defined = [ref.func]
            for _ in range(depth):
                defined = [n for f in defined for n in self.project.scope_of(f).nested]
            for wrapper in defined:
                self.edge(wrapper, decorator)

    def _defaults(self) -> None:
        args = self.func.node.args
        self._suffix = " in a default argument (evaluated once, at import)"
        try:
            for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
                self.visit(default)
        finally:
            self._suffix = ""

    # ----------------------------------------------------------------- helpers

    # Dispatch without NodeVisitor's per-node getattr and iter_fields (a large share of the
    # scan time on big trees).
    _dispatch: ClassVar[dict[type[ast.AST], Callable[[FunctionChecker, Any], None]]] = {}

    def visit(self, node: ast.AST) -> None:
        kind = type(node)
        method = self._dispatch.get(kind)
        if method is None:
            method = cast(
                "Callable[[FunctionChecker, Any], None]",
                getattr(type(self), "visit_" + kind.__name__, FunctionChecker.generic_visit),
            )
            self._dispatch[kind] = method
        if isinstance(node, ast.stmt):
            outer = self._stmt_span
            self._stmt_span = _statement_span(node)
            method(self, node)
            self._stmt_span = outer
        else:
            method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def visit_Constant(self, node: ast.Constant) -> None:
        return None

    def resolve(self, expr: ast.expr) -> Ref | None:
        """``Project.resolve_expr`` with per-function caches (resolution is flow-insensitive,
        so a name, or a chain of attributes on it, means the same thing all through)."""
        key = id(expr)
        if key in self._cache:
            return self._cache[key]
        ref: Ref | None
        if isinstance(expr, ast.Name):
            if expr.id in self._shadow:
                ref = None  # a comprehension or lambda variable
            elif expr.id in self._names:
                ref = self._names[expr.id]
            else:
                ref = self.project.lookup(expr.id, self.scope)
                self._names[expr.id] = ref
        elif isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            ref = self.project.member(base, expr.attr) if base is not None else None
        elif isinstance(expr, ast.Call):
            ref = self.project.call_result(self.resolve(expr.func), expr, self.scope)
        elif isinstance(expr, ast.BinOp):
            ref = self.project.binop_result(self.resolve(expr.left), expr)
        else:
            ref = None
        self._cache[key] = ref
        return ref

    def add(self, rule_id: str, node: ast.expr | ast.stmt, subject: str) -> None:
        if self.in_log and RULES_BY_ID[rule_id].log_exempt:
            return
        if self.value_mode and (rule_id not in IMPORT_TIME_RULES or id(node) in self._instances):
            return
        subject += self._suffix
        line = node.lineno
        col = node.col_offset
        end_line = node.end_lineno if node.end_lineno is not None else line
        end_col = node.end_col_offset if node.end_col_offset is not None else col
        stmt_line, stmt_end = self._stmt_span if self._stmt_span[0] else (line, end_line)
        self.result.findings.append(RawFinding(
            rule_id, subject, line, col, end_line, end_col, stmt_line, max(stmt_end, end_line)
        ))

    def edge(self, callee: FuncInfo, node: ast.expr | ast.stmt) -> None:
        if self.value_mode and callee.kind != "value":
            return  # calls made at import are not part of the run
        self.result.edges.append(Edge(callee, node.lineno, node.col_offset, self.in_log > 0))

    def _value_edge(self, site: FuncInfo | None, node: ast.expr) -> None:
        if site is None or site is self.func:
            return
        key = (id(site), self.in_log > 0)
        if key not in self._value_edges:
            self._value_edges.add(key)
            self.edge(site, node)

    def _made_here(self, expr: ast.expr) -> bool:
        """Whether ``expr`` is a local name bound only to calls made in this function (a
        generator or pool constructed here, whose construction is reported itself)."""
        if not isinstance(expr, ast.Name) or expr.id in self._shadow:
            return False
        values = self.scope.values.get(expr.id) or []
        return bool(values) and all(isinstance(v, ast.Call) for v in values)

    def _is_log_call(self, func: ast.expr, ref: Ref | None) -> bool:
        if isinstance(func, ast.Attribute):
            if func.attr not in LOG_METHODS:
                return False
            if isinstance(ref, Ext) and ref.name.startswith("logging."):
                return True
            receiver = func.value
            last = (
                receiver.id if isinstance(receiver, ast.Name)
                else receiver.attr if isinstance(receiver, ast.Attribute)
                else None
            )
            return last is not None and _LOGGER_NAME.match(last) is not None
        if isinstance(func, ast.Name) and func.id in LOG_METHODS:
            return isinstance(ref, Ext) and ref.name.startswith("logging.")
        return False

    def is_set(self, expr: ast.expr, scope: Scope | None = None, depth: int = 0) -> bool:
        """Whether ``expr`` evaluates to a set or frozenset (as far as can be told)."""
        if depth > 6:
            return False
        scope = self.scope if scope is None else scope
        if isinstance(expr, (ast.Set, ast.SetComp)):
            return True
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, _SET_OPS):
            return self.is_set(expr.left, scope, depth + 1) or self.is_set(
                expr.right, scope, depth + 1
            )
        if isinstance(expr, ast.Call):
            func = expr.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in _SET_RETURNING
                and self.is_set(func.value, scope, depth + 1)
            ):
                return True
            callee = (
                self.resolve(func) if scope is self.scope
                else self.project.resolve_expr(func, scope)
            )
            if isinstance(callee, Ext):
                return callee.name in ("builtins.set", "builtins.frozenset")
            if isinstance(callee, Fn) and callee.func.node.returns is not None:
                return _is_set_annotation(callee.func.node.returns)
            return False
        if isinstance(expr, ast.Name):
            return self._name_is_set(expr.id, scope, depth)
        if isinstance(expr, ast.Attribute):
            base = self.project.resolve_expr(expr.value, scope)
            if isinstance(base, Mod):
                values = base.module.values.get(expr.attr)
                if values and base.module.first_kind.get(expr.attr) == "value":
                    return self._all_sets(values, base.module, depth)
        return False

    def _all_sets(self, values: list[ast.expr | None], scope: Scope, depth: int) -> bool:
        return bool(values) and all(
            v is not None and self.is_set(v, scope, depth + 1) for v in values
        )

    def _name_is_set(self, name: str, scope: Scope, depth: int) -> bool:
        current: Scope = scope
        while isinstance(current, FuncScope):
            if name in current.global_names:
                current = current.module
                break
            if current.binds(name) or name in current.annotations:
                if name in current.annotations:
                    return _is_set_annotation(current.annotations[name])
                annotation = current.params.get(name)
                if name in current.params and name not in current.values:
                    return annotation is not None and _is_set_annotation(annotation)
                values = current.values.get(name)
                return values is not None and self._all_sets(values, current, depth)
            current = current.parent if current.parent is not None else current.module
        if current.first_kind.get(name) == "value":
            return self._all_sets(current.values[name], current, depth)
        return False

    def _mark_identity_safe(self, expr: ast.expr) -> None:
        """``id(x)``/``hash(x)`` used only for identity (compared, or as a set/dict key)."""
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id in ("id", "hash")
        ):
            self.id_safe.add(id(expr))

    # ----------------------------------------------------------------- visitors

    def _visit_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        nested = self._nested.get(id(node))
        if nested is not None:
            self.edge(nested, node)
        for decorator in node.decorator_list:
            self.visit(decorator)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_def(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_def(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in node.decorator_list + node.bases:
            self.visit(expr)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        ref = self.resolve(func)
        handled = False
        if isinstance(func, ast.Attribute):
            receiver = self.resolve(func.value)
            if (
                isinstance(receiver, ExtObj)
                and receiver.flag is not None
                and isinstance(func.value, (ast.Name, ast.Attribute))
            ):
                # A generator (or executor...) made elsewhere: its construction is outside
                # this run, so each use is reported. One made here was reported when made.
                handled = True
                if not self._made_here(func.value):
                    self.add(receiver.flag, node, f"{func.attr}() on a {receiver.made_by}() "
                             "instance created outside this function")
            self._method_checks(node, func)
        if isinstance(ref, Ext):
            if not handled:
                self._check_target(node, ref)
            if ref.name in ORDER_FREE:
                self.order_safe.update(id(a) for a in node.args)
            elif ref.name in ORDER_SINKS and id(node) not in self.order_safe:
                for arg in node.args:
                    if not isinstance(arg, ast.Starred) and self.is_set(arg):
                        self.add(ORDER_RULE, arg, f"{_short(ref.name)}()")
        elif isinstance(ref, Fn):
            self.edge(ref.func, node)
        elif isinstance(ref, Cls):
            for name in ("__new__", "__init__", "__post_init__"):
                method = self.project.find_method(ref.cls, name)
                if method is not None:
                    self.edge(method, node)
        elif isinstance(ref, Obj):
            method = self.project.find_method(ref.cls, "__call__")
            if method is not None:
                self.edge(method, node)

        log = self._is_log_call(func, ref)
        self.visit(func)
        if log:
            self.in_log += 1
        partial = isinstance(ref, Ext) and ref.name == "functools.partial"
        for index, arg in enumerate(node.args):
            # functools.partial(f, *bound): calling the partial gives f these arguments.
            self._reference(arg, len(node.args) - 1 if partial and index == 0 else 0)
            self.visit(arg)
        for keyword in node.keywords:
            self._reference(keyword.value)
            self.visit(keyword.value)
        if log:
            self.in_log -= 1

    def _check_target(self, node: ast.Call, ref: Ext) -> None:
        hit = match_ext(ref)
        if hit is None:
            return
        name = ref.name
        rule, target = hit
        if target.kind is TargetKind.READ or target.is_safe_call(count_given_args(node)):
            return
        if is_file_open(rule.id, target.name) and not opens_for_reading(target.name, node):
            return
        if rule.id == HASH_RULE and self.func.node.name == "__hash__":
            return
        if rule.id == SLEEP_RULE and node.args and _is_zero(node.args[0]):
            return  # sleep(0) only yields to the event loop / scheduler
        if rule.id in (ID_RULE, HASH_RULE) and id(node) in self.id_safe:
            return
        self.add(rule.id, node, f"{_short(name)}()")

    def _method_checks(self, node: ast.Call, func: ast.Attribute) -> None:
        attr = func.attr
        if attr in _ID_SAFE_METHODS:
            for arg in node.args:
                self._mark_identity_safe(arg)
        if id(node) in self.order_safe:
            return
        if attr in _ORDER_METHODS and node.args and self.is_set(node.args[0]):
            self.add(ORDER_RULE, node.args[0], f".{attr}()")
        elif attr == "pop" and not node.args and self.is_set(func.value):
            self.add(ORDER_RULE, node, ".pop()")

    def _reference(self, arg: ast.expr, bound: int = 0) -> None:
        """A callable passed as an argument will be called: follow it / report it. ``bound``
        arguments come with it (``functools.partial(random.Random, 7)`` is seeded)."""
        target = arg.value if isinstance(arg, ast.Starred) else arg
        if not isinstance(target, (ast.Name, ast.Attribute)):
            return
        ref = self.resolve(target)
        if isinstance(ref, Fn):
            self.edge(ref.func, target)
        elif isinstance(ref, Ext):
            hit = match_ext(ref)
            # Exact call targets only: a module target would also cover constants
            # (socket.AF_UNIX), which are not called.
            if (
                hit is not None
                and hit[1].kind is TargetKind.CALL
                and hit[1].name == ref.name
                and not hit[1].is_safe_call(bound)
            ):
                self.add(hit[0].id, target, f"{_short(ref.name)} (passed as a callable)")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            if id(node) not in self.read_skip:
                self._check_read(node)
            if node.id not in self._shadow:
                name = node.id
                if name in self._name_sites:
                    site = self._name_sites[name]
                else:
                    site = self._name_sites[name] = self.project.value_site(name, self.scope)
                self._value_edge(site, node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            if id(node) not in self.read_skip:
                ref = self._check_read(node)
                if isinstance(ref, Fn) and ref.func.is_property:
                    receiver = self.resolve(node.value)
                    if isinstance(receiver, Obj):
                        self.edge(ref.func, node)
            base = self.resolve(node.value)
            if isinstance(base, Mod):
                key = (id(base.module), node.attr)
                if key in self._member_sites:
                    site = self._member_sites[key]
                else:
                    site = self._member_sites[key] = self.project.module_value(
                        base.module, node.attr, 0
                    )
                self._value_edge(site, node)
        self.visit(node.value)

    def _check_read(self, node: ast.Name | ast.Attribute) -> Ref | None:
        ref = self.resolve(node)
        if isinstance(ref, Ext):
            hit = match_ext(ref)
            if hit is not None and hit[1].kind is TargetKind.READ:
                self.add(hit[0].id, node, ref.name)
        return ref

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.read_skip.add(id(node.value))
        self._mark_identity_safe(node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for expr in [node.left, *node.comparators]:
            self._mark_identity_safe(expr)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._check_loop(node)
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._check_loop(node)
        self.generic_visit(node)

    def _check_loop(self, node: ast.For | ast.AsyncFor) -> None:
        if self.is_set(node.iter) and not _order_insensitive(node.body):
            self.add(ORDER_RULE, node.iter, "this for loop")

    def _check_comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.DictComp) -> None:
        if id(node) in self.order_safe:
            return
        for generator in node.generators:
            if self.is_set(generator.iter):
                self.add(ORDER_RULE, generator.iter, "this comprehension")
                return

    def _scoped_visit(self, node: ast.AST, names: list[str]) -> None:
        """Visit ``node`` with ``names`` bound locally (comprehension or lambda variables)."""
        for name in names:
            self._shadow[name] = self._shadow.get(name, 0) + 1
        try:
            self.generic_visit(node)
        finally:
            for name in names:
                left = self._shadow[name] - 1
                if left:
                    self._shadow[name] = left
                else:
                    del self._shadow[name]

    def _comprehension_names(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp
    ) -> list[str]:
        return [n.id for g in node.generators for n in _names_in(g.target)]

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._check_comprehension(node)
        self._scoped_visit(node, self._comprehension_names(node))

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self._check_comprehension(node)
        self._scoped_visit(node, self._comprehension_names(node))

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._check_comprehension(node)
        self._mark_identity_safe(node.key)
        self._scoped_visit(node, self._comprehension_names(node))

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._mark_identity_safe(node.elt)
        self._scoped_visit(node, self._comprehension_names(node))

    def visit_Set(self, node: ast.Set) -> None:
        for elt in node.elts:
            self._mark_identity_safe(elt)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key in node.keys:
            if key is not None:
                self._mark_identity_safe(key)
        self.generic_visit(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        if self.value_mode:
            return  # its body runs when called, reached through the lambda's own function
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        names.extend(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        self._scoped_visit(node, names)

    def visit_Starred(self, node: ast.Starred) -> None:
        if (
            isinstance(node.ctx, ast.Load)
            and id(node) not in self.order_safe
            and self.is_set(node.value)
        ):
            self.add(ORDER_RULE, node, "* unpacking")
        self.generic_visit(node)

