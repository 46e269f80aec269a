"""Text, JSON and SARIF reports.

The SARIF checks use a schema written here from the SARIF 2.1.0 specification (the properties
GitHub code scanning requires and the ones the scan emits); there is no network access to
fetch the official schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest
from scan_helpers import CORPUS, scan_tree

from tracelock.analysis import RULES, ScanReport, render, scan_paths, to_json, to_sarif, to_text
from tracelock.analysis.reporters import JSON_REPORT_SCHEMA

_TEXT = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}
_REGION = {
    "type": "object",
    "required": ["startLine", "startColumn"],
    "properties": {
        "startLine": {"type": "integer", "minimum": 1},
        "startColumn": {"type": "integer", "minimum": 1},
        "endLine": {"type": "integer", "minimum": 1},
        "endColumn": {"type": "integer", "minimum": 1},
    },
}
_PHYSICAL = {
    "type": "object",
    "required": ["artifactLocation", "region"],
    "properties": {
        "artifactLocation": {
            "type": "object",
            "required": ["uri"],
            "properties": {"uri": {"type": "string", "minLength": 1},
                           "uriBaseId": {"type": "string"}},
        },
        "region": _REGION,
    },
}  # fmt: skip
_LOCATION = {
    "type": "object",
    "required": ["physicalLocation"],
    "properties": {"physicalLocation": _PHYSICAL, "message": _TEXT,
                   "id": {"type": "integer", "minimum": 0}},
}  # fmt: skip
_LEVEL = {"enum": ["none", "note", "warning", "error"]}
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "$schema", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string", "pattern": "sarif-schema-2\\.1\\.0\\.json$"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "rules"],
                                "properties": {
                                    "name": {"type": "string", "minLength": 1},
                                    "version": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id", "shortDescription",
                                                         "defaultConfiguration"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": _TEXT,
                                                "fullDescription": _TEXT,
                                                "help": _TEXT,
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "required": ["level"],
                                                    "properties": {"level": _LEVEL},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "columnKind": {"enum": ["utf16CodeUnits", "unicodeCodePoints"]},
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["ruleId", "level", "message", "locations"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": 0},
                                "level": _LEVEL,
                                "message": _TEXT,
                                "locations": {"type": "array", "minItems": 1, "maxItems": 1,
                                              "items": _LOCATION},
                                "relatedLocations": {"type": "array", "items": _LOCATION},
                                "partialFingerprints": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string"},
                                },
                                "codeFlows": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["threadFlows"],
                                        "properties": {
                                            "message": _TEXT,
                                            "threadFlows": {
                                                "type": "array",
                                                "minItems": 1,
                                                "items": {
                                                    "type": "object",
                                                    "required": ["locations"],
                                                    "properties": {"locations": {
                                                        "type": "array",
                                                        "minItems": 1,
                                                        "items": {
                                                            "type": "object",
                                                            "required": ["location"],
                                                            "properties": {
                                                                "location": _LOCATION,
                                                                "nestingLevel": {
                                                                    "type": "integer",
                                                                    "minimum": 0,
                                                                },
                                                            },
                                                        },
                                                    }},
                                                },
                                            },
                                        },
                                    },
                                },
                                "suppressions": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["kind"],
                                        "properties": {
                                            "kind": {"enum": ["inSource", "external"]},
                                            "justification": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}  # fmt: skip

validate_sarif = fastjsonschema.compile(SARIF_SUBSET)
validate_json = fastjsonschema.compile(JSON_REPORT_SCHEMA)


@pytest.fixture(scope="module")
def corpus_report() -> ScanReport:
    return scan_paths([CORPUS], base=CORPUS)


ALLOWED = {
    "agent.py": """
        import time

        @agent
        def run(ctx):
            a = time.time()  # tracelock: allow TL-CLOCK-001 -- for the log line
            return a, time.monotonic()
    """,
}


def test_json_document_matches_its_schema(corpus_report: ScanReport, tmp_path: Path) -> None:
    document = to_json(corpus_report)
    validate_json(document)
    assert document["schema"] == "tracelock.scan/1"
    assert document["ok"] is False
    assert document["summary"]["findings"] == len(corpus_report.findings)
    assert document["summary"]["by_severity"]["warning"] == 3
    first = document["findings"][0]
    assert first["call_path"][-1]["line"] == first["line"]
    assert first["entry_point"] == first["call_path"][0]["function"]
    allowed = to_json(scan_tree(tmp_path, ALLOWED))
    validate_json(allowed)
    assert allowed["suppressed"][0]["allowed_by"] == {
        "kind": "inline", "reason": "for the log line", "path": "agent.py", "line": 5,
    }  # fmt: skip
    assert json.loads(render(corpus_report, "json")) == document


def test_sarif_log_structure(corpus_report: ScanReport) -> None:
    log = to_sarif(corpus_report)
    validate_sarif(log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.id for r in RULES]
    assert run["columnKind"] == "unicodeCodePoints"
    assert len(run["results"]) == len(corpus_report.findings)
    for result, finding in zip(run["results"], corpus_report.findings, strict=True):
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == finding.rule_id
        assert result["level"] == finding.severity.value
        physical = result["locations"][0]["physicalLocation"]
        uri = physical["artifactLocation"]["uri"]
        assert uri == finding.path and not uri.startswith("/") and "\\" not in uri
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert physical["region"]["startLine"] == finding.line
        assert physical["region"]["startColumn"] == finding.column
        flow = result["codeFlows"][0]["threadFlows"][0]["locations"]
        assert len(flow) == len(finding.call_path)
        assert [step["nestingLevel"] for step in flow] == list(range(len(flow)))
        assert len(result.get("relatedLocations", [])) == len(finding.call_path) - 1
    fingerprints = [r["partialFingerprints"]["tracelockFinding/v1"] for r in run["results"]]
    assert len(set(fingerprints)) == len(fingerprints)
    assert json.loads(render(corpus_report, "sarif")) == log


def test_sarif_suppressions_and_meta_findings(tmp_path: Path) -> None:
    files = dict(ALLOWED)
    files["broken.py"] = "def (:\n"
    log = to_sarif(scan_tree(tmp_path, files))
    validate_sarif(log)
    results = log["runs"][0]["results"]
    by_rule = {r["ruleId"]: r for r in results if "suppressions" not in r}
    assert set(by_rule) == {"TL-CLOCK-001", "TL-SCAN-001"}
    assert "codeFlows" not in by_rule["TL-SCAN-001"]
    (suppressed,) = [r for r in results if "suppressions" in r]
    assert suppressed["suppressions"] == [
        {"kind": "inSource", "justification": "for the log line"}
    ]


def test_sarif_absolute_paths_become_file_uris(tmp_path: Path) -> None:
    (tmp_path / "my agent.py").write_text(
        "import time\n@agent\ndef run(ctx):\n    return time.time()\n", encoding="utf-8"
    )
    report = scan_paths([tmp_path], base=tmp_path / "elsewhere")
    log = to_sarif(report)
    validate_sarif(log)
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    uri = location["artifactLocation"]["uri"]
    assert uri.startswith("file:///") and uri.endswith("/my%20agent.py")
    assert "uriBaseId" not in location["artifactLocation"]


def test_text_report(corpus_report: ScanReport, tmp_path: Path) -> None:
    text = to_text(corpus_report)
    lines = text.split("\n")
    assert lines[0].startswith("agentpkg/agents.py:")
    assert " error TL-CLOCK-001 time.time() reads the real clock; use ctx.now() instead" in text
    assert (
        "    via agentpkg.agents:planner (agentpkg/agents.py:"
        in text
    )
    assert " -> agentpkg.clients:Clock.read (agentpkg/clients.py:" in text
    assert lines[-1].startswith("53 findings (50 error, 3 warning, 0 note); 12 files,")
    assert lines[-1].endswith("FAIL: 50 at or above error")
    clean = scan_tree(tmp_path, ALLOWED | {"agent.py": ALLOWED["agent.py"].replace(
        "time.monotonic()", "ctx.now()")})  # fmt: skip
    assert to_text(clean).startswith("no findings, 1 allowed;")
    shown = to_text(clean, show_suppressed=True)
    assert "agent.py:5:9: allowed TL-CLOCK-001 (inline: for the log line)" in shown


def test_unmatched_extra_entry_points_are_mentioned(tmp_path: Path) -> None:
    from tracelock.analysis import ScanConfig

    report = scan_tree(tmp_path, ALLOWED, ScanConfig(extra_entry_points=("x:y",)))
    assert "warning: entry point 'x:y' matches no function" in to_text(report)


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown report format"):
        render(ScanReport(findings=()), "xml")


def _walk(value: Any) -> list[Any]:
    out = [value]
    if isinstance(value, dict):
        for item in value.values():
            out.extend(_walk(item))
    elif isinstance(value, list):
        for item in value:
            out.extend(_walk(item))
    return out


def test_sarif_has_no_empty_messages(corpus_report: ScanReport) -> None:
    for node in _walk(to_sarif(corpus_report)):
        if isinstance(node, dict) and "text" in node:
            assert node["text"].strip()
