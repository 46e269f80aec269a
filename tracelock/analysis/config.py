"""Scan configuration: entry points, excluded paths, allowlist entries, failure threshold.

The configuration is TOML. Settings live in a ``[scan]`` table, or in
``[tool.tracelock.scan]`` when the file is a ``pyproject.toml``::

    [scan]
    entry_points = ["myapp.jobs:run_*", "myapp.workers.*:main"]
    tool_entry_points = ["myapp.tools.*:*"]
    decorators = ["agent", "tool"]
    tool_decorators = ["tool"]
    exclude = ["tests/*", "*/migrations/*"]
    fail_on = "error"

    [[scan.allow]]
    rule = "TL-CLOCK-001"
    path = "myapp/telemetry/*.py"
    function = "myapp.telemetry.*:*"
    reason = "telemetry timestamps never reach the run"

Unknown keys, wrong types and allow entries without a reason are rejected whole
(:class:`ScanConfigError`, exit 2 on the CLI).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tracelock.analysis.model import FAIL_ON_CHOICES, parse_fail_on
from tracelock.analysis.rules import RULES, Severity
from tracelock.errors import AnalysisError

__all__ = ["ScanConfigError", "AllowEntry", "ScanConfig", "load_config", "parse_config"]

DEFAULT_DECORATORS = ("agent", "tool")
DEFAULT_TOOL_DECORATORS = ("tool",)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ALLOW_HEADER = re.compile(r"^\s*\[\[\s*(?:tool\s*\.\s*tracelock\s*\.\s*)?scan\s*\.\s*allow\s*\]\]")
_TOP_KEYS = frozenset({
    "entry_points", "tool_entry_points", "decorators", "tool_decorators", "exclude", "fail_on",
    "allow",
})
_ALLOW_KEYS = frozenset({"rule", "reason", "path", "function"})


class ScanConfigError(AnalysisError):
    """The scan configuration file is unreadable, not TOML, or not a valid configuration."""

    code: ClassVar[str] = "ANALYSIS_CONFIG_INVALID"


@dataclass(frozen=True)
class AllowEntry:
    """One allowlist entry: a rule id (or glob) plus a path glob and/or a function glob.

    ``path`` is matched with :func:`fnmatch.fnmatchcase` against the finding's reported path
    (relative, forward slashes; ``*`` also matches ``/``). ``function`` is matched against
    the finding's function as ``module:qualname``. Both given: both must match.
    """

    rule: str
    reason: str
    path: str | None = None
    function: str | None = None
    line: int = 0

    def matches(self, rule_id: str, path: str, function: str) -> bool:
        if not fnmatch.fnmatchcase(rule_id, self.rule):
            return False
        if self.path is not None and not fnmatch.fnmatchcase(path, self.path):
            return False
        return self.function is None or fnmatch.fnmatchcase(function, self.function)

    def describe(self) -> str:
        parts = [f"rule={self.rule}"]
        if self.path is not None:
            parts.append(f"path={self.path}")
        if self.function is not None:
            parts.append(f"function={self.function}")
        return " ".join(parts)


@dataclass(frozen=True)
class ScanConfig:
    """Settings of a scan. ``ScanConfig()`` is the default: decorators only, fail on errors."""

    entry_points: tuple[str, ...] = ()
    """``module:function`` patterns (``fnmatch`` globs on both sides) from the config file."""
    extra_entry_points: tuple[str, ...] = ()
    """Patterns given outside the file (``--entry`` on the command line, the Python API)."""
    decorators: tuple[str, ...] = DEFAULT_DECORATORS
    tool_entry_points: tuple[str, ...] = ()
    """``module:function`` patterns of tool code: entry points where agent-only rules
    (``TL-FS-001``) do not apply, because a tool is itself the door."""
    tool_decorators: tuple[str, ...] = DEFAULT_TOOL_DECORATORS
    """Entry-point decorators that mark a tool rather than an agent."""
    exclude: tuple[str, ...] = ()
    allow: tuple[AllowEntry, ...] = ()
    fail_on: Severity | None = Severity.ERROR
    source: str | None = None
    """The configuration file as given, for locating unused-allow findings."""
    source_path: Path | None = field(default=None, compare=False)

    def all_entry_points(self) -> tuple[str, ...]:
        return self.entry_points + self.extra_entry_points

    def with_entry_points(self, extra: Sequence[str]) -> ScanConfig:
        """A copy with more entry-point patterns (validated like the file's)."""
        for pattern in extra:
            _check_entry_pattern(pattern, "--entry")
        return ScanConfig(
            entry_points=self.entry_points,
            extra_entry_points=self.extra_entry_points + tuple(extra),
            decorators=self.decorators,
            tool_entry_points=self.tool_entry_points,
            tool_decorators=self.tool_decorators,
            exclude=self.exclude,
            allow=self.allow,
            fail_on=self.fail_on,
            source=self.source,
            source_path=self.source_path,
        )


def load_config(path: str | Path) -> ScanConfig:
    """Read and validate a configuration file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScanConfigError(f"cannot read scan config {file}: {exc}",
                              details={"path": str(file)}) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScanConfigError(f"scan config {file} is not valid TOML: {exc}",
                              details={"path": str(file)}) from exc
    return parse_config(data, source=str(file), text=text, source_path=file)


def parse_config(
    data: Mapping[str, Any],
    *,
    source: str | None = None,
    text: str | None = None,
    source_path: Path | None = None,
) -> ScanConfig:
    """Validate an already-parsed TOML document (see the module docstring for the layout)."""
    where = source or "scan config"
    table: Any
    tool = data.get("tool")
    if isinstance(tool, Mapping) and isinstance(tool.get("tracelock"), Mapping) and (
        "scan" in tool["tracelock"]
    ):
        table = tool["tracelock"]["scan"]
    elif "scan" in data:
        table = data["scan"]
    else:
        raise ScanConfigError(f"{where}: no [scan] or [tool.tracelock.scan] table")
    if not isinstance(table, Mapping):
        raise ScanConfigError(f"{where}: the scan settings must be a table")
    unknown = sorted(set(table) - _TOP_KEYS)
    if unknown:
        raise ScanConfigError(f"{where}: unknown scan setting(s) {', '.join(unknown)}",
                              details={"unknown": unknown})

    entry_points = _strings(table, "entry_points", where)
    tool_entry_points = _strings(table, "tool_entry_points", where)
    for pattern in entry_points + tool_entry_points:
        _check_entry_pattern(pattern, where)
    decorators = _strings(table, "decorators", where) if "decorators" in table else (
        DEFAULT_DECORATORS
    )
    tool_decorators = (
        _strings(table, "tool_decorators", where) if "tool_decorators" in table
        else DEFAULT_TOOL_DECORATORS
    )
    for name in decorators + tool_decorators:
        if not _IDENT.match(name):
            raise ScanConfigError(f"{where}: decorator {name!r} is not an identifier")
    exclude = _strings(table, "exclude", where)

    fail_on: Severity | None = Severity.ERROR
    if "fail_on" in table:
        value = table["fail_on"]
        if value not in FAIL_ON_CHOICES:
            raise ScanConfigError(
                f"{where}: fail_on must be one of {', '.join(FAIL_ON_CHOICES)}, got {value!r}"
            )
        fail_on = parse_fail_on(value)

    raw_allow = table.get("allow", [])
    if not isinstance(raw_allow, list):
        raise ScanConfigError(f"{where}: allow must be an array of tables ([[scan.allow]])")
    lines = _allow_lines(text, len(raw_allow))
    allow = tuple(
        _allow_entry(item, index, lines[index], where) for index, item in enumerate(raw_allow)
    )
    return ScanConfig(
        entry_points=entry_points,
        decorators=decorators,
        tool_entry_points=tool_entry_points,
        tool_decorators=tool_decorators,
        exclude=exclude,
        allow=allow,
        fail_on=fail_on,
        source=source,
        source_path=source_path,
    )


def _strings(table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ScanConfigError(f"{where}: {key} must be an array of non-empty strings")
    return tuple(value)


def _check_entry_pattern(pattern: str, where: str) -> None:
    if pattern.count(":") != 1 or not all(pattern.split(":")):
        raise ScanConfigError(
            f"{where}: entry point {pattern!r} must be 'module:function' (globs allowed)"
        )


_RULE_IDS = tuple(r.id for r in RULES if not r.meta)


def _allow_entry(item: Any, index: int, line: int, where: str) -> AllowEntry:
    label = f"{where}: allow entry #{index + 1}"
    if not isinstance(item, Mapping):
        raise ScanConfigError(f"{label} must be a table")
    unknown = sorted(set(item) - _ALLOW_KEYS)
    if unknown:
        raise ScanConfigError(f"{label}: unknown key(s) {', '.join(unknown)}")
    rule = item.get("rule")
    if not isinstance(rule, str) or not rule:
        raise ScanConfigError(f"{label}: 'rule' (a rule id such as TL-CLOCK-001) is required")
    if not any(fnmatch.fnmatchcase(rid, rule) for rid in _RULE_IDS):
        raise ScanConfigError(f"{label}: rule {rule!r} matches no known rule id")
    reason = item.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ScanConfigError(f"{label}: a non-empty 'reason' is required")
    path = item.get("path")
    function = item.get("function")
    for key, value in (("path", path), ("function", function)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ScanConfigError(f"{label}: {key!r} must be a non-empty string")
    if path is None and function is None:
        raise ScanConfigError(f"{label}: give 'path' and/or 'function' to scope the entry")
    return AllowEntry(rule=rule, reason=reason.strip(), path=path, function=function, line=line)


def _allow_lines(text: str | None, count: int) -> list[int]:
    """Line numbers of the ``[[scan.allow]]`` headers, when they can be told apart (else 0)."""
    if text is None:
        return [0] * count
    found = [n for n, line in enumerate(text.split("\n"), start=1) if _ALLOW_HEADER.match(line)]
    if len(found) != count:
        return [0] * count
    return found
