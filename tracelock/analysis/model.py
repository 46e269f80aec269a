"""What a scan produces: findings with their call paths, suppressions, and the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tracelock.analysis.rules import RULES_BY_ID, Rule, Severity

__all__ = [
    "Frame",
    "Finding",
    "Suppression",
    "ScanStats",
    "ScanReport",
    "FAIL_ON_CHOICES",
    "parse_fail_on",
    "JSON_SCHEMA_ID",
]

JSON_SCHEMA_ID = "tracelock.scan/1"

FAIL_ON_CHOICES = ("error", "warning", "note", "none")


def parse_fail_on(value: str) -> Severity | None:
    """``"error"|"warning"|"note"`` to a :class:`Severity`, ``"none"`` to ``None`` (never fail)."""
    if value == "none":
        return None
    return Severity(value)


@dataclass(frozen=True)
class Frame:
    """One step of a call path: inside ``function``, at ``path:line:column`` (1-based)."""

    function: str
    path: str
    line: int
    column: int

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "path": self.path, "line": self.line,
                "column": self.column}


@dataclass(frozen=True)
class Finding:
    """One place where nondeterminism can reach an agent or tool run.

    ``function`` is the containing function as ``module:qualname`` (empty for findings that
    are not inside a function: parse errors, allowlist hygiene). ``call_path`` starts at the
    agent or tool (the entry point) and ends at the finding itself; each frame is the call
    site inside that function that leads to the next one.
    """

    rule_id: str
    severity: Severity
    message: str
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    function: str = ""
    call_path: tuple[Frame, ...] = ()
    subject: str = ""

    @property
    def rule(self) -> Rule:
        return RULES_BY_ID[self.rule_id]

    @property
    def entry_point(self) -> str:
        return self.call_path[0].function if self.call_path else ""

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.path, self.line, self.column, self.rule_id, self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule_id,
            "severity": self.severity.value,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "function": self.function,
            "entry_point": self.entry_point,
            "door": self.rule.door,
            "call_path": [f.to_dict() for f in self.call_path],
        }


@dataclass(frozen=True)
class Suppression:
    """A finding that an allowlist entry accepted, with the entry's reason."""

    finding: Finding
    kind: Literal["inline", "config"]
    reason: str
    path: str
    line: int

    def to_dict(self) -> dict[str, Any]:
        data = self.finding.to_dict()
        data["allowed_by"] = {"kind": self.kind, "reason": self.reason, "path": self.path,
                              "line": self.line}
        return data


@dataclass(frozen=True)
class ScanStats:
    files: int = 0
    lines: int = 0
    functions: int = 0
    entry_points: int = 0
    reachable_functions: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "files": self.files,
            "lines": self.lines,
            "functions": self.functions,
            "entry_points": self.entry_points,
            "reachable_functions": self.reachable_functions,
        }


@dataclass(frozen=True)
class ScanReport:
    """The result of :func:`tracelock.analysis.scan_paths`.

    ``findings`` are the unsuppressed findings sorted by path, line, column and rule;
    ``suppressed`` those an allowlist accepted; ``fail_on`` the configured threshold
    (``None``: never fail).
    """

    findings: tuple[Finding, ...]
    suppressed: tuple[Suppression, ...] = ()
    stats: ScanStats = field(default_factory=ScanStats)
    fail_on: Severity | None = Severity.ERROR
    entry_points: tuple[str, ...] = ()
    unmatched_entry_points: tuple[str, ...] = ()

    def failing(self, fail_on: Severity | Literal["config"] | None = "config") -> list[Finding]:
        """Findings at or above the threshold (the report's own unless one is given)."""
        threshold = self.fail_on if fail_on == "config" else fail_on
        if threshold is None:
            return []
        return [f for f in self.findings if f.severity.at_least(threshold)]

    def ok(self, fail_on: Severity | Literal["config"] | None = "config") -> bool:
        return not self.failing(fail_on)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for f in self.findings:
            out[f.severity.value] += 1
        return out

    def by_rule(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.rule_id] = out.get(f.rule_id, 0) + 1
        return dict(sorted(out.items()))
