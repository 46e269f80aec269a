"""``tracelock scan`` through click's CliRunner: formats, thresholds and exit codes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from scan_helpers import CORPUS, expected, write_tree

from tracelock.cli.cmd_scan import COMMANDS, scan

CLEAN = {"agent.py": "@agent\ndef run(ctx):\n    return ctx.now()\n"}
WARN_ONLY = {"agent.py": "import time\n@agent\ndef run(ctx):\n    time.sleep(1)\n"}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(scan, list(args), catch_exceptions=False)


def test_registered_in_the_cli() -> None:
    assert [scan] == COMMANDS
    main = Path(__file__).resolve().parents[2] / "tracelock" / "cli" / "main.py"
    tree = ast.parse(main.read_text(encoding="utf-8"))
    modules = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert "tracelock.cli.cmd_scan" in modules


def test_findings_exit_1_with_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    result = invoke("agentpkg")
    assert result.exit_code == 1
    assert "agentpkg/agents.py:22:15: error TL-CLOCK-001" in result.stdout
    assert result.stdout.rstrip().endswith("FAIL: 50 at or above error")


def test_clean_tree_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, CLEAN)
    monkeypatch.chdir(tmp_path)
    result = invoke(".")
    assert result.exit_code == 0
    assert result.stdout.startswith("no findings;")


def test_fail_on_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, WARN_ONLY)
    monkeypatch.chdir(tmp_path)
    assert invoke(".").exit_code == 0
    assert invoke(".", "--fail-on", "warning").exit_code == 1
    assert invoke(".", "--fail-on", "note").exit_code == 1
    (tmp_path / "scan.toml").write_text('[scan]\nfail_on = "warning"\n', encoding="utf-8")
    assert invoke(".", "--config", "scan.toml").exit_code == 1
    assert invoke(".", "--config", "scan.toml", "--fail-on", "error").exit_code == 0
    assert invoke(".", "--config", "scan.toml", "--fail-on", "none").exit_code == 0


def test_json_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    for args in (["--json"], ["--format", "json"], ["--json", "--format", "json"]):
        result = invoke(".", *args)
        assert result.exit_code == 1
        document = json.loads(result.stdout)
        assert document["schema"] == "tracelock.scan/1"
        got = sorted((f["rule"], f["path"], f["line"]) for f in document["findings"])
        assert got == expected()


def test_sarif_output_and_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(CORPUS)
    result = invoke("agentpkg", "--format", "sarif")
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0"
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"][
        "artifactLocation"
    ]["uri"].startswith("agentpkg/")
    out = tmp_path / "scan.sarif"
    result = invoke("agentpkg", "--format", "sarif", "--output", str(out))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "53 findings" in result.stderr
    assert json.loads(out.read_text(encoding="utf-8")) == log


def test_entry_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    result = invoke(".", "--json", "--entry", "agentpkg.jobs:nightly*")
    paths = {f["path"] for f in json.loads(result.stdout)["findings"]}
    assert "agentpkg/jobs.py" in paths
    result = invoke(".", "--entry", "no-colon")
    assert result.exit_code == 2


def test_syntax_error_is_a_failing_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {**CLEAN, "broken.py": "def f(:\n"})
    monkeypatch.chdir(tmp_path)
    result = invoke(".")
    assert result.exit_code == 1
    assert "broken.py:1:7: error TL-SCAN-001 syntax error" in result.stdout


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--format", "json"], ["--format", "sarif"]])
def test_missing_path_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              fmt: list[str]) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    result = invoke("nowhere", *fmt)
    assert result.exit_code == 2
    if fmt and fmt[-1].endswith("json"):
        error = json.loads(result.stdout)
        assert error["ok"] is False
        assert error["error"]["code"] == "ANALYSIS_PATH_UNREADABLE"
    else:
        assert "error [ANALYSIS_PATH_UNREADABLE]: cannot scan nowhere" in result.stderr


def test_bad_config_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, CLEAN)
    (tmp_path / "bad.toml").write_text("[scan]\nfail_on = 3\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = invoke(".", "--config", "bad.toml")
    assert result.exit_code == 2
    assert "ANALYSIS_CONFIG_INVALID" in result.stderr
    assert invoke(".", "--config", "missing.toml").exit_code == 2


def test_usage_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, CLEAN)
    monkeypatch.chdir(tmp_path)
    result = invoke(".", "--json", "--format", "sarif")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "USAGE_ERROR"
    assert invoke().exit_code == 2
    assert invoke(".", "--format", "xml").exit_code == 2
    assert invoke(".", "--fail-on", "fatal").exit_code == 2
    result = invoke(".", "--output", str(tmp_path / "no" / "dir" / "x.sarif"))
    assert result.exit_code == 2


def test_show_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"agent.py": (
        "import time\n@agent\ndef run(ctx):\n"
        "    return time.time()  # tracelock: allow TL-CLOCK-001 -- log stamp\n"
    )})  # fmt: skip
    monkeypatch.chdir(tmp_path)
    result = invoke(".", "--show-allowed")
    assert result.exit_code == 0
    assert "allowed TL-CLOCK-001 (inline: log stamp)" in result.stdout
