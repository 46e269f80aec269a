"""Entropy analysis: the static nondeterminism scan (``tracelock scan``) and its rule catalogue.

The catalogue (:mod:`tracelock.analysis.rules`) is plain data with no dependency on the
scanner, so the runtime strict mode can share rule ids, covered names and suggested doors.

Python API::

    from tracelock.analysis import scan_paths

    report = scan_paths(["src/"], config="tracelock-scan.toml")
    for finding in report.findings:
        print(finding.path, finding.line, finding.rule_id, finding.message)
    raise SystemExit(0 if report.ok() else 1)
"""

from __future__ import annotations

from tracelock.analysis.config import AllowEntry, ScanConfig, ScanConfigError, load_config
from tracelock.analysis.loader import ScanPathError
from tracelock.analysis.model import Finding, Frame, ScanReport, ScanStats, Suppression
from tracelock.analysis.reporters import render, to_json, to_sarif, to_text
from tracelock.analysis.rules import RULES, RULES_BY_ID, Rule, Severity, Target, get_rule, match
from tracelock.analysis.scanner import scan_paths

__all__ = [
    "scan_paths",
    "ScanReport",
    "Finding",
    "Frame",
    "Suppression",
    "ScanStats",
    "ScanConfig",
    "AllowEntry",
    "load_config",
    "ScanConfigError",
    "ScanPathError",
    "Rule",
    "Target",
    "Severity",
    "RULES",
    "RULES_BY_ID",
    "get_rule",
    "match",
    "render",
    "to_text",
    "to_json",
    "to_sarif",
]
