"""The rules catalogue: stable shape, lookup, independence from the scanner, documentation."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tracelock.analysis import rules
from tracelock.analysis.rules import (
    META_RULE_IDS,
    RULES,
    RULES_BY_ID,
    Severity,
    TargetKind,
    get_rule,
    match,
    patchable_targets,
    targets_by_name,
)

REPO = Path(__file__).resolve().parents[2]


def test_ids_are_unique_and_well_formed() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"TL-[A-Z]+-\d{3}", i) for i in ids)
    assert set(RULES_BY_ID) == set(ids)
    assert {"TL-SCAN-001", "TL-ALLOW-001", "TL-ALLOW-002", "TL-CONF-001"} == META_RULE_IDS


def test_every_rule_names_a_door_and_formats_its_message() -> None:
    for rule in RULES:
        message = rule.message("thing()")
        assert message.startswith("thing()")
        if not rule.meta:
            assert rule.door and rule.door in message, rule.id
            assert rule.summary.endswith(".")


def test_targets_are_listed_once() -> None:
    names = [(t.name, t.kind is TargetKind.MODULE) for r in RULES for t in r.targets]
    assert len(names) == len(set(names))
    assert len(targets_by_name()) == len(names)


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("time.time", "TL-CLOCK-001"),
        ("datetime.datetime.now", "TL-CLOCK-001"),
        ("datetime.date.today", "TL-CLOCK-001"),
        ("random.shuffle", "TL-RAND-001"),
        ("random.Random", "TL-RAND-002"),
        ("random.SystemRandom", "TL-RAND-002"),
        ("numpy.random.rand", "TL-RAND-003"),
        ("secrets.token_bytes", "TL-RAND-004"),
        ("os.urandom", "TL-RAND-004"),
        ("uuid.uuid4", "TL-UUID-001"),
        ("os.environ", "TL-ENV-001"),
        ("os.getpid", "TL-ENV-002"),
        ("socket.gethostname", "TL-ENV-002"),
        ("socket.create_connection", "TL-NET-001"),
        ("requests.Session.get", "TL-NET-001"),
        ("urllib.request.urlopen", "TL-NET-001"),
        ("subprocess.check_output", "TL-PROC-001"),
        ("os.system", "TL-PROC-001"),
        ("builtins.hash", "TL-HASH-001"),
        ("builtins.id", "TL-ID-001"),
        ("threading.Thread", "TL-CONC-001"),
        ("asyncio.gather", "TL-CONC-002"),
        ("time.sleep", "TL-CLOCK-002"),
        ("builtins.open", "TL-FS-001"),
        ("pathlib.Path.read_text", "TL-FS-001"),
        ("pathlib.PosixPath.read_bytes", "TL-FS-001"),
    ],
)
def test_match(name: str, rule: str) -> None:
    hit = match(name)
    assert hit is not None and hit[0].id == rule


@pytest.mark.parametrize(
    "name",
    ["random.Randomize", "datetime.datetime.fromtimestamp", "requests.HTTPError",
     "subprocess.CalledProcessError", "urllib.request.pathname2url", "uuid.uuid5",
     "time.strptime", "os.path.join", "requestsx.get", "pathlib.Path.write_text",
     "pathlib.Path.exists"],
)  # fmt: skip
def test_no_match(name: str) -> None:
    assert match(name) is None


def test_seeded_targets() -> None:
    hit = match("random.Random")
    assert hit is not None
    _, target = hit
    assert not target.is_safe_call(0)
    assert target.is_safe_call(1)
    assert match("time.time") is not None
    assert not match("time.time")[1].is_safe_call(5)  # type: ignore[index]


def test_severity_order() -> None:
    assert Severity.ERROR.at_least(Severity.WARNING)
    assert Severity.WARNING.at_least(Severity.WARNING)
    assert not Severity.NOTE.at_least(Severity.WARNING)
    assert get_rule("TL-ID-001").severity is Severity.WARNING


def test_patchable_targets_for_strict_mode() -> None:
    pairs = list(patchable_targets())
    names = {t.name for _, t in pairs}
    assert {"time.time", "random.random", "uuid.uuid4", "os.getenv", "os.environ"} <= names
    assert all(r.patchable and not r.meta for r, _ in pairs)
    assert "TL-ORDER-001" not in {r.id for r, _ in pairs}


def test_catalogue_module_has_no_scanner_dependencies() -> None:
    tree = ast.parse(Path(rules.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= {"__future__", "enum", "collections.abc", "dataclasses", "types"}


def test_docs_list_every_rule_and_error_code() -> None:
    scan_doc = (REPO / "docs" / "scan.md").read_text(encoding="utf-8")
    for rule in RULES:
        assert f"`{rule.id}`" in scan_doc, rule.id
    errors_doc = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    for code in ("ANALYSIS_CONFIG_INVALID", "ANALYSIS_PATH_UNREADABLE"):
        assert f"`{code}`" in errors_doc
