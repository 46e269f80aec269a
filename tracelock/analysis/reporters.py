"""Scan reports as text (for people), JSON (``tracelock.scan/1``) and SARIF 2.1.0 (for CI).

The JSON and SARIF layouts are documented in ``docs/scan.md``. Both are deterministic for a
given tree: findings are sorted by path, line, column and rule.
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any
from urllib.parse import quote

from tracelock.analysis.model import JSON_SCHEMA_ID, Finding, Frame, ScanReport, Suppression
from tracelock.analysis.rules import RULES, Rule, Severity
from tracelock.core.hashing import sha256_hex

__all__ = [
    "FORMATS",
    "JSON_REPORT_SCHEMA",
    "SARIF_SCHEMA",
    "SARIF_VERSION",
    "render",
    "to_text",
    "to_json",
    "to_sarif",
]

FORMATS = ("text", "json", "sarif")
SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
TOOL_NAME = "tracelock-scan"
SRCROOT = "%SRCROOT%"


def _version() -> str:
    try:
        return metadata.version("tracelock")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


def _fail_on(report: ScanReport) -> str:
    return report.fail_on.value if report.fail_on is not None else "none"


def render(report: ScanReport, fmt: str) -> str:
    """The report in ``fmt`` (``text``, ``json`` or ``sarif``) as a string."""
    if fmt == "text":
        return to_text(report)
    if fmt == "json":
        return json.dumps(to_json(report), indent=2, sort_keys=True, ensure_ascii=False)
    if fmt == "sarif":
        return json.dumps(to_sarif(report), indent=2, ensure_ascii=False)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")


# --------------------------------------------------------------------------- text


def _frame_text(frame: Frame) -> str:
    return f"{frame.function} ({frame.path}:{frame.line})"


def _finding_text(finding: Finding) -> list[str]:
    lines = [
        f"{finding.path}:{finding.line}:{finding.column}: {finding.severity.value} "
        f"{finding.rule_id} {finding.message}"
    ]
    if finding.call_path:
        lines.append("    via " + " -> ".join(_frame_text(f) for f in finding.call_path))
    return lines


def to_text(report: ScanReport, *, show_suppressed: bool = False) -> str:
    """Human-readable report: one block per finding, then a summary line."""
    out: list[str] = []
    for finding in report.findings:
        out.extend(_finding_text(finding))
    if show_suppressed:
        for suppression in report.suppressed:
            finding = suppression.finding
            out.append(
                f"{finding.path}:{finding.line}:{finding.column}: allowed {finding.rule_id} "
                f"({suppression.kind}: {suppression.reason})"
            )
    for pattern in report.unmatched_entry_points:
        if not any(f.rule_id == "TL-CONF-001" and repr(pattern) in f.message
                   for f in report.findings):
            out.append(f"warning: entry point {pattern!r} matches no function")
    counts = report.counts()
    stats = report.stats
    total = len(report.findings)
    if total:
        detail = ", ".join(f"{counts[s.value]} {s.value}" for s in reversed(Severity))
        head = f"{total} finding{'s' if total != 1 else ''} ({detail})"
    else:
        head = "no findings"
    if report.suppressed:
        head += f", {len(report.suppressed)} allowed"
    failing = len(report.failing())
    verdict = (
        f"FAIL: {failing} at or above {_fail_on(report)}" if failing
        else f"ok (fail-on {_fail_on(report)})"
    )
    out.append(
        f"{head}; {stats.files} files, {stats.lines} lines, {stats.entry_points} entry points, "
        f"{stats.reachable_functions} reachable functions; {verdict}"
    )
    return "\n".join(out)


# --------------------------------------------------------------------------- JSON

_POSITIVE = {"type": "integer", "minimum": 1}
_FRAME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["function", "path", "line", "column"],
    "additionalProperties": False,
    "properties": {
        "function": {"type": "string"},
        "path": {"type": "string"},
        "line": _POSITIVE,
        "column": _POSITIVE,
    },
}
_FINDING_PROPERTIES: dict[str, Any] = {
    "rule": {"type": "string", "pattern": "^TL-[A-Z]+-[0-9]{3}$"},
    "severity": {"enum": ["error", "warning", "note"]},
    "message": {"type": "string"},
    "path": {"type": "string"},
    "line": _POSITIVE,
    "column": _POSITIVE,
    "end_line": _POSITIVE,
    "end_column": _POSITIVE,
    "function": {"type": "string"},
    "entry_point": {"type": "string"},
    "door": {"type": "string"},
    "call_path": {"type": "array", "items": _FRAME_SCHEMA},
}
_FINDING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": sorted(_FINDING_PROPERTIES),
    "additionalProperties": False,
    "properties": _FINDING_PROPERTIES,
}
_COUNT = {"type": "integer", "minimum": 0}

JSON_REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tracelock scan report (tracelock.scan/1)",
    "type": "object",
    "required": ["schema", "ok", "fail_on", "summary", "entry_points",
                 "unmatched_entry_points", "findings", "suppressed"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": JSON_SCHEMA_ID},
        "ok": {"type": "boolean"},
        "fail_on": {"enum": ["error", "warning", "note", "none"]},
        "summary": {
            "type": "object",
            "required": ["files", "lines", "functions", "entry_points", "reachable_functions",
                         "findings", "failing", "suppressed", "by_severity", "by_rule"],
            "additionalProperties": False,
            "properties": {
                **dict.fromkeys(("files", "lines", "functions", "entry_points",
                                 "reachable_functions", "findings", "failing", "suppressed"),
                                _COUNT),
                "by_severity": {
                    "type": "object",
                    "required": ["error", "warning", "note"],
                    "additionalProperties": False,
                    "properties": {"error": _COUNT, "warning": _COUNT, "note": _COUNT},
                },
                "by_rule": {"type": "object", "additionalProperties": _COUNT},
            },
        },
        "entry_points": {"type": "array", "items": {"type": "string"}},
        "unmatched_entry_points": {"type": "array", "items": {"type": "string"}},
        "findings": {"type": "array", "items": _FINDING_SCHEMA},
        "suppressed": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [*sorted(_FINDING_PROPERTIES), "allowed_by"],
                "additionalProperties": False,
                "properties": {
                    **_FINDING_PROPERTIES,
                    "allowed_by": {
                        "type": "object",
                        "required": ["kind", "reason", "path", "line"],
                        "additionalProperties": False,
                        "properties": {
                            "kind": {"enum": ["inline", "config"]},
                            "reason": {"type": "string", "minLength": 1},
                            "path": {"type": "string"},
                            "line": _COUNT,
                        },
                    },
                },
            },
        },
    },
}
"""A JSON Schema of the ``tracelock.scan/1`` document (``--format json``)."""


def to_json(report: ScanReport) -> dict[str, Any]:
    """The ``tracelock.scan/1`` document (see ``docs/scan.md``)."""
    summary: dict[str, Any] = dict(report.stats.to_dict())
    summary.update(
        findings=len(report.findings),
        failing=len(report.failing()),
        suppressed=len(report.suppressed),
        by_severity=report.counts(),
        by_rule=report.by_rule(),
    )
    return {
        "schema": JSON_SCHEMA_ID,
        "ok": report.ok(),
        "fail_on": _fail_on(report),
        "summary": summary,
        "entry_points": list(report.entry_points),
        "unmatched_entry_points": list(report.unmatched_entry_points),
        "findings": [f.to_dict() for f in report.findings],
        "suppressed": [s.to_dict() for s in report.suppressed],
    }


# --------------------------------------------------------------------------- SARIF


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or (len(path) > 2 and path[1] == ":" and path[2] == "/")


def _artifact(path: str) -> dict[str, Any]:
    if _is_absolute(path):
        prefix = "file://" if path.startswith("/") else "file:///"
        return {"uri": prefix + quote(path, safe="/:")}
    return {"uri": quote(path, safe="/"), "uriBaseId": SRCROOT}


def _region(line: int, column: int, end_line: int | None = None,
            end_column: int | None = None) -> dict[str, int]:
    region = {"startLine": max(line, 1), "startColumn": max(column, 1)}
    if end_line is not None and end_column is not None and (end_line, end_column) > (
        line, column
    ):
        region["endLine"] = end_line
        region["endColumn"] = end_column
    return region


def _location(path: str, region: dict[str, int], message: str | None = None) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {"artifactLocation": _artifact(path), "region": region}
    }
    if message is not None:
        location["message"] = {"text": message}
    return location


def _rule_descriptor(rule: Rule) -> dict[str, Any]:
    help_text = rule.summary if not rule.door else f"{rule.summary} Use {rule.door} instead."
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": help_text},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": rule.severity.value},
        "properties": {"tags": ["determinism", rule.category]},
    }


def _code_flow(finding: Finding) -> dict[str, Any]:
    steps = []
    for depth, frame in enumerate(finding.call_path):
        last = depth == len(finding.call_path) - 1
        text = f"{'finding' if last else 'calls'} in {frame.function}"
        steps.append({
            "location": _location(frame.path, _region(frame.line, frame.column), text),
            "nestingLevel": depth,
        })
    entry = finding.call_path[0].function
    return {
        "message": {"text": f"reached from {entry}"},
        "threadFlows": [{"locations": steps}],
    }


def _result(
    finding: Finding,
    rule_index: dict[str, int],
    occurrences: dict[str, int],
    suppression: Suppression | None = None,
) -> dict[str, Any]:
    region = _region(finding.line, finding.column, finding.end_line, finding.end_column)
    key = "|".join((finding.rule_id, finding.path, finding.function, finding.subject))
    occurrences[key] = occurrences.get(key, 0) + 1
    result: dict[str, Any] = {
        "ruleId": finding.rule_id,
        "ruleIndex": rule_index[finding.rule_id],
        "level": finding.severity.value,
        "message": {"text": finding.message},
        "locations": [_location(finding.path, region)],
        "partialFingerprints": {
            "tracelockFinding/v1": sha256_hex(f"{key}|{occurrences[key]}".encode())
        },
    }
    if finding.call_path:
        result["codeFlows"] = [_code_flow(finding)]
        if len(finding.call_path) > 1:
            result["relatedLocations"] = [
                {"id": n, **_location(f.path, _region(f.line, f.column), f"in {f.function}")}
                for n, f in enumerate(finding.call_path[:-1], start=1)
            ]
        result["properties"] = {"entryPoint": finding.entry_point, "function": finding.function}
    if suppression is not None:
        result["suppressions"] = [{
            "kind": "inSource" if suppression.kind == "inline" else "external",
            "justification": suppression.reason,
        }]
    return result


def to_sarif(report: ScanReport) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run, accepted by GitHub code scanning.

    Every catalogue rule is listed in ``tool.driver.rules`` (stable ``ruleIndex``); allowed
    findings are included with a ``suppressions`` entry carrying the allowlist reason.
    """
    rule_index = {rule.id: n for n, rule in enumerate(RULES)}
    occurrences: dict[str, int] = {}
    results = [_result(f, rule_index, occurrences) for f in report.findings]
    results.extend(_result(s.finding, rule_index, occurrences, s) for s in report.suppressed)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "version": _version(),
                        "rules": [_rule_descriptor(rule) for rule in RULES],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "invocations": [{"executionSuccessful": True}],
                "results": results,
            }
        ],
    }
