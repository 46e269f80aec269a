"""The scan: find entry points, follow calls through the scanned modules, report findings.

1. Load every Python file under the given paths and build the symbol tables.
2. Entry points are the functions decorated with a decorator whose last name is in
   ``decorators`` (default ``agent`` and ``tool``: ``@rt.agent``, ``@runtime.tool(...)``),
   every method of a class so decorated, the functions registered by calling such a
   decorator at module level (``kit.agent("a")(handle)``, ``rt.agent(handle)``), and the
   functions matching a configured ``module:function`` pattern. Each is an agent or a tool:
   a tool when only ``tool_decorators`` or ``tool_entry_points`` mark it. Agent-only rules
   (``TL-FS-001``: a tool is itself the door) are reported only in what agents reach.
3. A breadth-first walk from the entry points, in a stable order, analyses each function it
   reaches once and keeps, for each, the first (shortest) call path that reaches it. Calls
   made only inside logging arguments are followed last, so that a function reached only
   through them is known as *log-only*: findings of log-exempt rules there are not reported.
4. Findings in reached functions are matched against inline allow comments, then config
   allow entries; the rest are reported. Unused allow entries, malformed allow comments and
   unparsable files are findings of their own (meta rules, never allowlisted).
"""

from __future__ import annotations

import ast
import fnmatch
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from tracelock.analysis.checks import Edge, FunctionAnalysis, RawFinding, analyse_function
from tracelock.analysis.config import AllowEntry, ScanConfig, load_config
from tracelock.analysis.loader import InlineAllow, SourceFile, discover, display_path, load_files
from tracelock.analysis.model import (
    Finding,
    Frame,
    ScanReport,
    ScanStats,
    Suppression,
    parse_fail_on,
)
from tracelock.analysis.rules import RULES_BY_ID
from tracelock.analysis.symbols import (
    FILE_READ_RULE,
    Fn,
    FuncInfo,
    ModuleInfo,
    Project,
    decorator_name,
    iter_statements,
)

__all__ = ["scan_paths", "Scanner", "with_fail_on"]

_MAX_SPAN = 200

AGENT_ONLY_RULES = frozenset({FILE_READ_RULE})


def scan_paths(
    paths: str | Path | Iterable[str | Path],
    config: ScanConfig | str | Path | None = None,
    *,
    base: str | Path | None = None,
) -> ScanReport:
    """Scan files and directories for nondeterminism reachable from agents and tools.

    ``config`` is a :class:`ScanConfig`, a path to a TOML configuration, or ``None`` for the
    defaults. Reported paths are relative to ``base`` (default: the current directory) with
    forward slashes. Raises :class:`~tracelock.analysis.loader.ScanPathError` for a path that
    does not exist and :class:`~tracelock.analysis.config.ScanConfigError` for a bad config.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if config is None:
        config = ScanConfig()
    elif not isinstance(config, ScanConfig):
        config = load_config(config)
    base_dir = Path(base).absolute() if base is not None else Path.cwd()
    return Scanner(config, base_dir).scan(list(paths))


class Scanner:
    """One scan run (holds the per-run caches)."""

    def __init__(self, config: ScanConfig, base: Path) -> None:
        self.config = config
        self.base = base
        self.project: Project | None = None
        self.analyses: dict[FuncInfo, FunctionAnalysis] = {}
        self.parent: dict[FuncInfo, tuple[FuncInfo, Edge] | None] = {}
        self.order: list[FuncInfo] = []
        self._frames: dict[FuncInfo, tuple[Frame, ...]] = {}
        self._agent_frames: dict[FuncInfo, tuple[Frame, ...]] = {}
        self.too_deep: list[FuncInfo] = []
        self.tools: set[FuncInfo] = set()
        self.agent_parent: dict[FuncInfo, tuple[FuncInfo, Edge] | None] = {}

    # ----------------------------------------------------------------- phases

    def scan(self, paths: list[str | Path]) -> ScanReport:
        files = discover(paths, self.base, self.config.exclude)
        sources = load_files(files, self.base)
        project = Project(sources)
        self.project = project

        entries, unmatched = self.entry_points(project)
        for entry in entries:
            self.parent[entry] = None
            self.order.append(entry)
        self._walk(list(entries), follow_log=False)
        effective = set(self.parent)
        self._walk(list(self.order), follow_log=True)
        self._agent_reach([e for e in entries if e not in self.tools])

        findings = self._findings(effective)
        reported, suppressed, meta = self._apply_allowlists(findings, sources)
        meta.extend(self._source_findings(sources))
        for func in self.too_deep:
            source = func.module.source
            meta.append(self._meta(
                "TL-SCAN-001", source.display, func.node.lineno,
                source.column(func.node.lineno, func.node.col_offset),
                f"{func.display} is nested too deeply to analyse; not analysed",
            ))
        meta.extend(self._entry_findings(unmatched))
        all_findings = sorted(reported + meta, key=Finding.sort_key)
        stats = ScanStats(
            files=len(sources),
            lines=sum(s.line_count for s in sources),
            functions=sum(len(m.functions) for m in project.all_modules),
            entry_points=len(entries),
            reachable_functions=sum(1 for f in self.order if f.kind != "value"),
        )
        return ScanReport(
            findings=tuple(all_findings),
            suppressed=tuple(sorted(suppressed, key=lambda s: s.finding.sort_key())),
            stats=stats,
            fail_on=self.config.fail_on,
            entry_points=tuple(e.display for e in entries),
            unmatched_entry_points=tuple(unmatched),
        )

    def entry_points(self, project: Project) -> tuple[list[FuncInfo], list[str]]:
        """The entry points in a stable order, and the configured patterns matching none.
        Tool entry points are also recorded in :attr:`tools`."""
        decorators = set(self.config.decorators)
        tool_names = set(self.config.tool_decorators)
        patterns: list[tuple[str, bool, str, str]] = []
        for is_tool, group in ((False, self.config.all_entry_points()),
                               (True, self.config.tool_entry_points)):
            for pattern in group:
                module_glob, func_glob = pattern.split(":", 1)
                patterns.append((pattern, is_tool, module_glob, func_glob))
        matched: set[str] = set()
        # For each entry point: whether something marks it as an agent, as a tool.
        marks: dict[FuncInfo, list[bool]] = {}

        def mark(func: FuncInfo, names: Iterable[str]) -> None:
            for name in names:
                if name in decorators:
                    marks.setdefault(func, [False, False])[name in tool_names] = True

        for module in project.all_modules:
            class_marks = {id(c): c.decorators for c in module.classes}
            for func in module.functions:
                if func.cls is not None:
                    mark(func, class_marks.get(id(func.cls), ()))
                mark(func, func.decorators)
                for pattern, is_tool, module_glob, func_glob in patterns:
                    if fnmatch.fnmatchcase(module.name, module_glob) and fnmatch.fnmatchcase(
                        func.qualname, func_glob
                    ):
                        matched.add(pattern)
                        marks.setdefault(func, [False, False])[is_tool] = True
            for func, name in self._registrations(project, module, decorators):
                mark(func, (name,))
        entries = sorted(marks, key=lambda f: (f.module.source.display, f.node.lineno,
                                               f.qualname))
        self.tools = {f for f, (agent, tool) in marks.items() if tool and not agent}
        unmatched = [p for p, _, _, _ in patterns if p not in matched]
        return entries, unmatched

    @staticmethod
    def _registrations(
        project: Project, module: ModuleInfo, decorators: set[str]
    ) -> Iterator[tuple[FuncInfo, str]]:
        """Functions registered at module level without decorator syntax: a call of a
        registration decorator given the function, ``kit.agent("a")(handle)`` or
        ``rt.agent(handle)``; with the decorator's last name."""
        tree = module.source.tree
        if tree is None:
            return
        for stmt in iter_statements(tree.body):
            if not isinstance(stmt, ast.Expr | ast.Assign | ast.AnnAssign):
                continue
            if stmt.value is None:
                continue
            for node in ast.walk(stmt.value):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                name = decorator_name(node.func)
                if name not in decorators:
                    continue
                for arg in node.args:
                    ref = project.resolve_expr(arg, module)
                    if isinstance(ref, Fn) and ref.func.kind == "def":
                        yield ref.func, name

    def analysis(self, func: FuncInfo) -> FunctionAnalysis:
        found = self.analyses.get(func)
        if found is None:
            assert self.project is not None
            try:
                found = analyse_function(self.project, func)
            except RecursionError:  # an expression nested hundreds of levels deep
                found = FunctionAnalysis()
                self.too_deep.append(func)
            self.analyses[func] = found
        return found

    def _agent_reach(self, agents: list[FuncInfo]) -> None:
        """What agents reach (log arguments included), with a shortest path from an agent:
        where agent-only rules apply. Without tool entry points, that is everything."""
        if not self.tools:
            self.agent_parent = self.parent
            self._agent_frames = self._frames
            return
        parent: dict[FuncInfo, tuple[FuncInfo, Edge] | None] = dict.fromkeys(agents)
        queue = deque(agents)
        while queue:
            func = queue.popleft()
            for edge in self.analysis(func).edges:
                if edge.callee not in parent:
                    parent[edge.callee] = (func, edge)
                    queue.append(edge.callee)
        self.agent_parent = parent

    def _walk(self, start: list[FuncInfo], *, follow_log: bool) -> None:
        queue = deque(start)
        while queue:
            func = queue.popleft()
            for edge in self.analysis(func).edges:
                if edge.in_log and not follow_log:
                    continue
                if edge.callee in self.parent:
                    continue
                self.parent[edge.callee] = (func, edge)
                self.order.append(edge.callee)
                queue.append(edge.callee)

    # ----------------------------------------------------------------- findings

    def frames_to(self, func: FuncInfo, *, agents_only: bool = False) -> tuple[Frame, ...]:
        """The call frames from an entry point (an agent, with ``agents_only``) down to (not
        including) ``func``."""
        cache = self._agent_frames if agents_only else self._frames
        parent = self.agent_parent if agents_only else self.parent
        cached = cache.get(func)
        if cached is not None:
            return cached
        chain: list[Frame] = []
        current = func
        seen: set[FuncInfo] = set()
        while True:
            link = parent.get(current)
            if link is None or current in seen:
                break
            seen.add(current)
            caller, edge = link
            source = caller.module.source
            chain.append(Frame(caller.display, source.display, edge.line,
                               source.column(edge.line, edge.col)))
            current = caller
        result = tuple(reversed(chain))
        cache[func] = result
        return result

    def _finding(self, func: FuncInfo, raw: RawFinding) -> Finding:
        rule = RULES_BY_ID[raw.rule_id]
        source = func.module.source
        column = source.column(raw.line, raw.col)
        here = Frame(func.display, source.display, raw.line, column)
        return Finding(
            rule_id=rule.id,
            severity=rule.severity,
            message=rule.message(raw.subject),
            path=source.display,
            line=raw.line,
            column=column,
            end_line=raw.end_line,
            end_column=source.column(raw.end_line, raw.end_col),
            function=func.display,
            call_path=self.frames_to(func, agents_only=raw.rule_id in AGENT_ONLY_RULES)
            + (here,),
            subject=raw.subject,
        )

    def _findings(
        self, effective: set[FuncInfo]
    ) -> list[tuple[Finding, SourceFile, tuple[int, int]]]:
        out: list[tuple[Finding, SourceFile, tuple[int, int]]] = []
        seen: set[tuple[str, str, int, int]] = set()
        for func in self.order:
            for raw in self.analysis(func).findings:
                if RULES_BY_ID[raw.rule_id].log_exempt and func not in effective:
                    continue  # only reached from logging arguments
                if raw.rule_id in AGENT_ONLY_RULES and func not in self.agent_parent:
                    continue  # only tools reach it: a tool is the door
                finding = self._finding(func, raw)
                key = (finding.rule_id, finding.path, finding.line, finding.column)
                if key not in seen:
                    seen.add(key)
                    out.append((finding, func.module.source, (raw.stmt_line, raw.stmt_end)))
        return out

    def _apply_allowlists(
        self,
        findings: list[tuple[Finding, SourceFile, tuple[int, int]]],
        sources: list[SourceFile],
    ) -> tuple[list[Finding], list[Suppression], list[Finding]]:
        same_line: dict[int, dict[int, list[InlineAllow]]] = {}
        next_line: dict[int, dict[int, list[InlineAllow]]] = {}
        for source in sources:
            for allow in source.allows:
                same_line.setdefault(id(source), {}).setdefault(allow.line, []).append(allow)
                if allow.next_line is not None:
                    next_line.setdefault(id(source), {}).setdefault(allow.next_line, []).append(
                        allow
                    )
        used_inline: set[tuple[int, int, str]] = set()
        used_config: set[int] = set()
        reported: list[Finding] = []
        suppressed: list[Suppression] = []
        config_path = self._config_display()

        for finding, source, (first, last) in findings:
            # An inline allow applies to its statement: a comment on any of its lines, or
            # alone on the line just above it (or above the finding's own line).
            candidates: list[InlineAllow] = []
            by_line = same_line.get(id(source), {})
            for number in range(first, min(last, first + _MAX_SPAN) + 1):
                candidates.extend(by_line.get(number, ()))
            above = next_line.get(id(source), {})
            candidates.extend(above.get(first, ()))
            if finding.line != first:
                candidates.extend(above.get(finding.line, ()))
            matching = [a for a in candidates if finding.rule_id in a.rule_ids]
            if matching:
                for allow in matching:
                    used_inline.add((id(source), allow.line, finding.rule_id))
                chosen = matching[0]
                suppressed.append(Suppression(finding, "inline", chosen.reason, source.display,
                                              chosen.line))
                continue
            entries = [
                (index, entry)
                for index, entry in enumerate(self.config.allow)
                if entry.matches(finding.rule_id, finding.path, finding.function)
            ]
            if entries:
                used_config.update(index for index, _ in entries)
                entry = entries[0][1]
                suppressed.append(Suppression(finding, "config", entry.reason, config_path,
                                              entry.line))
                continue
            reported.append(finding)

        meta: list[Finding] = []
        for source in sources:
            for allow in source.allows:
                for rule_id in allow.rule_ids:
                    if (id(source), allow.line, rule_id) not in used_inline:
                        meta.append(self._meta(
                            "TL-ALLOW-002", source.display, allow.line, allow.column,
                            f"inline allow for {rule_id} suppresses nothing here "
                            f"(reason given: {allow.reason!r}); remove it",
                        ))
        for index, entry in enumerate(self.config.allow):
            if index not in used_config:
                meta.append(self._unused_entry(entry, config_path))
        return reported, suppressed, meta

    def _config_display(self) -> str:
        if self.config.source_path is not None:
            return display_path(self.config.source_path.absolute(), self.base)
        return self.config.source or "<config>"

    def _unused_entry(self, entry: AllowEntry, config_path: str) -> Finding:
        return self._meta(
            "TL-ALLOW-002", config_path, entry.line or 1, 1,
            f"allowlist entry ({entry.describe()}) suppresses nothing; remove it",
        )

    @staticmethod
    def _meta(rule_id: str, path: str, line: int, column: int, message: str) -> Finding:
        rule = RULES_BY_ID[rule_id]
        return Finding(
            rule_id=rule_id,
            severity=rule.severity,
            message=rule.message(message),
            path=path,
            line=line,
            column=column,
            end_line=line,
            end_column=column,
            subject=message,
        )

    def _source_findings(self, sources: list[SourceFile]) -> list[Finding]:
        out: list[Finding] = []
        for source in sources:
            if source.error is not None:
                message, line, column = source.error
                out.append(self._meta("TL-SCAN-001", source.display, line, column, message))
            for bad in source.bad_comments:
                out.append(self._meta("TL-ALLOW-001", source.display, bad.line, bad.column,
                                      bad.message))
        return out

    def _entry_findings(self, unmatched: list[str]) -> list[Finding]:
        from_file = set(self.config.entry_points) | set(self.config.tool_entry_points)
        out: list[Finding] = []
        lines: list[str] = []
        if self.config.source_path is not None:
            try:
                lines = self.config.source_path.read_text(encoding="utf-8").split("\n")
            except OSError:
                lines = []
        for pattern in unmatched:
            if pattern not in from_file:
                continue
            line = next(
                (n for n, text in enumerate(lines, start=1) if f'"{pattern}"' in text
                 or f"'{pattern}'" in text),
                1,
            )
            out.append(self._meta("TL-CONF-001", self._config_display(), line, 1,
                                  f"entry point {pattern!r} matches no function"))
        return out


def with_fail_on(config: ScanConfig, fail_on: str | None) -> ScanConfig:
    """``config`` with its threshold replaced (``fail_on`` as on the command line)."""
    if fail_on is None:
        return config
    return replace(config, fail_on=parse_fail_on(fail_on))
