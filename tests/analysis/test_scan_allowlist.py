"""Allowlisting: inline comments, config entries, unused entries, and config validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from scan_helpers import assert_marked, scan_tree, source, write_tree

from tracelock.analysis import ScanConfig, ScanConfigError, load_config, scan_paths
from tracelock.analysis.config import parse_config
from tracelock.analysis.rules import Severity

AGENT = "agent.py"


def test_inline_allow_same_line_line_above_and_multiline_span(tmp_path: Path) -> None:
    files = {AGENT: """
        import os
        import time

        @agent
        def run(ctx):
            a = time.time()  # tracelock: allow TL-CLOCK-001 -- telemetry only
            # tracelock: allow TL-ENV-002 -- the pid only names a scratch file
            b = os.getpid()
            c = max(
                time.monotonic(),
                0,
            )  # tracelock: allow TL-CLOCK-001 -- compared, never stored
            d = os.getenv("X"), time.time()  # tracelock: allow TL-ENV-001, TL-CLOCK-001 -- ok
            return a, b, c, d
    """}
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    assert [(s.finding.rule_id, s.finding.line, s.kind, s.line) for s in report.suppressed] == [
        ("TL-CLOCK-001", 6, "inline", 6),
        ("TL-ENV-002", 8, "inline", 7),
        ("TL-CLOCK-001", 10, "inline", 12),
        ("TL-ENV-001", 13, "inline", 13),
        ("TL-CLOCK-001", 13, "inline", 13),
    ]
    assert report.suppressed[0].reason == "telemetry only"
    assert report.ok()


def test_allow_without_reason_is_a_finding_and_does_not_allow(tmp_path: Path) -> None:
    files = {AGENT: """
        import time

        @agent
        def run(ctx):
            a = time.time()  # tracelock: allow TL-CLOCK-001  # !TL-CLOCK-001, TL-ALLOW-001
            b = time.time()  # tracelock: allow TL-CLOCK-001 --  # !TL-CLOCK-001, TL-ALLOW-001
            return a, b
    """}
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    bad = [f for f in report.findings if f.rule_id == "TL-ALLOW-001"]
    assert all("no reason" in f.message for f in bad)
    assert bad[0].column == source(files[AGENT]).split("\n")[4].index("# tracelock") + 1


def test_malformed_allow_comments(tmp_path: Path) -> None:
    files = {AGENT: """
        import time

        @agent
        def run(ctx):
            a = time.time()  # tracelock: allow TL-NOPE-001 -- x  # !TL-CLOCK-001, TL-ALLOW-001
            b = time.time()  # tracelock: ignore TL-CLOCK-001  # !TL-CLOCK-001, TL-ALLOW-001
            c = 1  # tracelock: allow TL-ALLOW-002 -- meta rules stay  # !TL-ALLOW-001
            d = "# tracelock: allow TL-CLOCK-001"
            return a, b, c, d
    """}
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    messages = sorted(f.message for f in report.findings if f.rule_id == "TL-ALLOW-001")
    assert "unknown rule id(s) TL-NOPE-001" in messages[0]
    assert "cannot be allowed" in messages[1]
    assert "unrecognised" in messages[2]


def test_unused_and_mismatched_inline_allows(tmp_path: Path) -> None:
    files = {AGENT: """
        import time

        @agent
        def run(ctx):
            a = 1  # tracelock: allow TL-CLOCK-001 -- stale  # !TL-ALLOW-002
            b = time.time()  # tracelock: allow TL-ENV-001 -- wrong  # !TL-CLOCK-001, TL-ALLOW-002
            return a, b

        def unreachable():
            return time.time()  # tracelock: allow TL-CLOCK-001 -- not run  # !TL-ALLOW-002
    """}
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    unused = [f for f in report.findings if f.rule_id == "TL-ALLOW-002"]
    assert all(f.severity is Severity.WARNING for f in unused)
    assert "'stale'" in unused[0].message


CLOCKY = {
    "app/__init__.py": "",
    "app/telemetry.py": """
        import time

        def stamp():
            return time.time()

        def pid():
            import os
            return os.getpid()
    """,
    "app/agent.py": """
        import time

        from app.telemetry import pid, stamp

        @agent
        def run(ctx):
            return stamp(), pid(), time.time()
    """,
}


def write_config(tmp_path: Path, text: str, name: str = "scan.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_config_allow_entries(tmp_path: Path) -> None:
    write_tree(tmp_path, CLOCKY)
    config = write_config(tmp_path, """
[scan]
fail_on = "warning"

[[scan.allow]]
rule = "TL-CLOCK-*"
path = "app/telemetry.py"
reason = "telemetry timestamps never reach the run"

[[scan.allow]]
rule = "TL-ENV-002"
function = "app.telemetry:p*"
reason = "pid only names a scratch file"

[[scan.allow]]
rule = "TL-ENV-001"
path = "app/*.py"
function = "app.agent:*"
reason = "unused on purpose"
""")
    report = scan_paths([tmp_path], config, base=tmp_path)
    assert [(f.rule_id, f.path) for f in report.findings] == [
        ("TL-CLOCK-001", "app/agent.py"),
        ("TL-ALLOW-002", "scan.toml"),
    ]
    unused = report.findings[1]
    assert unused.line == 15
    assert "rule=TL-ENV-001 path=app/*.py function=app.agent:*" in unused.message
    assert [(s.finding.path, s.kind, s.reason, s.line) for s in report.suppressed] == [
        ("app/telemetry.py", "config", "telemetry timestamps never reach the run", 5),
        ("app/telemetry.py", "config", "pid only names a scratch file", 10),
    ]
    assert report.fail_on is Severity.WARNING
    assert not report.ok()


def test_path_and_function_must_both_match(tmp_path: Path) -> None:
    write_tree(tmp_path, CLOCKY)
    config = parse_config({"scan": {"allow": [{
        "rule": "TL-CLOCK-001", "path": "app/telemetry.py", "function": "app.agent:*",
        "reason": "mismatch",
    }]}})  # fmt: skip
    report = scan_paths([tmp_path], config, base=tmp_path)
    assert sorted(f.rule_id for f in report.findings) == [
        "TL-ALLOW-002", "TL-CLOCK-001", "TL-CLOCK-001", "TL-ENV-002",
    ]  # fmt: skip


def test_pyproject_table(tmp_path: Path) -> None:
    path = write_config(tmp_path, """
[project]
name = "x"

[tool.tracelock.scan]
entry_points = ["app.jobs:*"]
fail_on = "none"
decorators = ["step"]
exclude = ["build/*"]
""", "pyproject.toml")
    config = load_config(path)
    assert config.entry_points == ("app.jobs:*",)
    assert config.fail_on is None
    assert config.decorators == ("step",)
    assert config.exclude == ("build/*",)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[scan]\nbogus = 1\n", "unknown scan setting"),
        ("[other]\nx = 1\n", "no [scan]"),
        ("[scan\n", "not valid TOML"),
        ('[scan]\nfail_on = "fatal"\n', "fail_on"),
        ('[scan]\nentry_points = "app:run"\n', "entry_points must be an array"),
        ('[scan]\nentry_points = ["app.run"]\n', "module:function"),
        ('[scan]\ndecorators = ["rt.agent"]\n', "not an identifier"),
        ('[[scan.allow]]\nrule = "TL-CLOCK-001"\npath = "x"\n', "reason"),
        ('[[scan.allow]]\nrule = "TL-CLOCK-001"\npath = "x"\nreason = "  "\n', "reason"),
        ('[[scan.allow]]\nrule = "TL-CLOCK-001"\nreason = "r"\n', "path' and/or 'function"),
        ('[[scan.allow]]\nrule = "TL-NOPE-*"\npath = "x"\nreason = "r"\n', "no known rule"),
        ('[[scan.allow]]\nrule = "TL-SCAN-001"\npath = "x"\nreason = "r"\n', "no known rule"),
        ('[[scan.allow]]\npath = "x"\nreason = "r"\n', "'rule'"),
        ('[[scan.allow]]\nrule = "TL-ID-001"\npath = "x"\nreason = "r"\nwhy = 1\n', "unknown key"),
        ('[scan]\nallow = {rule = "x"}\n', "array of tables"),
    ],
)
def test_bad_configs_are_rejected(tmp_path: Path, text: str, needle: str) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ScanConfigError) as info:
        load_config(path)
    assert info.value.code == "ANALYSIS_CONFIG_INVALID"
    assert needle in info.value.message


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(ScanConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_unmatched_configured_entry_point_is_a_warning(tmp_path: Path) -> None:
    write_tree(tmp_path, CLOCKY)
    path = write_config(tmp_path, '[scan]\nentry_points = [\n  "app.nothing:*",\n]\n')
    report = scan_paths([tmp_path], path, base=tmp_path)
    (conf,) = [f for f in report.findings if f.rule_id == "TL-CONF-001"]
    assert (conf.path, conf.line, conf.severity) == ("scan.toml", 3, Severity.WARNING)
    assert report.unmatched_entry_points == ("app.nothing:*",)


def test_with_entry_points_validates(tmp_path: Path) -> None:
    with pytest.raises(ScanConfigError):
        ScanConfig().with_entry_points(["no-colon"])
    config = ScanConfig(entry_points=("a:b",)).with_entry_points(["c:d"])
    assert config.all_entry_points() == ("a:b", "c:d")
