"""Shared helpers of the scan tests: the corpus location, its markers, small trees on disk."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

from tracelock.analysis import ScanConfig, ScanReport, scan_paths

CORPUS = Path(__file__).resolve().parent / "corpus"
_MARKER = re.compile(r"#\s*(expect|expect-entry):\s*(?P<ids>(?:TL-[A-Z]+-\d{3}\s*)+)$")


def expected(kind: str = "expect") -> list[tuple[str, str, int]]:
    """``(rule, path, line)`` for every marker of ``kind`` in the corpus, sorted."""
    out: list[tuple[str, str, int]] = []
    for file in sorted(CORPUS.rglob("*.py")):
        rel = file.relative_to(CORPUS).as_posix()
        for number, line in enumerate(file.read_text(encoding="utf-8").split("\n"), start=1):
            found = _MARKER.search(line)
            if found and found.group(1) == kind:
                out.extend((rule, rel, number) for rule in found.group("ids").split())
    return sorted(out)


def source(text: str) -> str:
    """A test snippet as written to disk: dedented, leading newline dropped."""
    return textwrap.dedent(text).lstrip("\n")


_INLINE = re.compile(r"#\s*!(?P<ids>(?:TL-[A-Z]+-\d{3}[ ,]*)+)")


def marks(text: str) -> list[tuple[str, int]]:
    """``(rule, line)`` for every ``# !TL-XXX-000`` marker of a snippet, sorted."""
    out: list[tuple[str, int]] = []
    for number, line in enumerate(source(text).split("\n"), start=1):
        found = _INLINE.search(line)
        if found:
            out.extend((rule, number) for rule in re.findall(r"TL-[A-Z]+-\d{3}", found["ids"]))
    return sorted(out)


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``{relative path: source}`` under ``root`` (sources are dedented)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source(text), encoding="utf-8")
    return root


def scan_tree(
    root: Path, files: Mapping[str, str], config: ScanConfig | None = None
) -> ScanReport:
    """Write the files and scan them, paths reported relative to ``root``."""
    write_tree(root, files)
    return scan_paths([root], config, base=root)


def found(report: ScanReport) -> list[tuple[str, str, int]]:
    """``(rule, path, line)`` of every reported finding, sorted."""
    return sorted((f.rule_id, f.path, f.line) for f in report.findings)


def rules_at(report: ScanReport, path: str) -> list[tuple[str, int]]:
    return sorted((f.rule_id, f.line) for f in report.findings if f.path == path)


def assert_marked(report: ScanReport, files: Mapping[str, str]) -> None:
    """Every file reports exactly the findings its ``# !RULE`` markers announce."""
    for rel, text in files.items():
        assert rules_at(report, rel) == marks(text), rel
