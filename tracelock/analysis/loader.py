"""Find the Python files to scan, name their modules, parse them, read inline allow comments.

Module names follow the package layout on disk: a file's module name is its path from the
first ancestor directory that has no ``__init__.py`` (``src/app/agents.py`` with
``src/app/__init__.py`` is ``app.agents``). Directories are walked recursively in sorted
order; hidden directories, ``__pycache__``, ``node_modules`` and virtual environments (a
directory holding ``pyvenv.cfg``) are skipped, as are paths matching an ``exclude`` glob.
A file named explicitly is always scanned.

A file that cannot be decoded or parsed is kept with its error (reported as TL-SCAN-001);
a path that does not exist or cannot be read is a :class:`ScanPathError`.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import os
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.util import decode_source
from pathlib import Path
from typing import ClassVar

from tracelock.analysis.rules import RULES_BY_ID
from tracelock.errors import AnalysisError

__all__ = ["ScanPathError", "InlineAllow", "BadComment", "SourceFile", "discover", "load_file"]

_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
_DIRECTIVE = re.compile(r"#\s*tracelock\s*:\s*(?P<rest>.*)$")
_ALLOW = re.compile(
    r"^allow\s+(?P<ids>[A-Za-z0-9_\-]+(?:\s*,\s*[A-Za-z0-9_\-]+)*)\s*"
    r"(?:--\s*(?P<reason>.*)|#.*)?$"
)
_RULE_ID = re.compile(r"^TL-[A-Z]+-[0-9]{3}$")


class ScanPathError(AnalysisError):
    """A path given to the scan does not exist or cannot be read."""

    code: ClassVar[str] = "ANALYSIS_PATH_UNREADABLE"


@dataclass(frozen=True)
class InlineAllow:
    """``# tracelock: allow TL-XXX-000[, ...] -- reason`` found in a file.

    It applies to findings whose span covers ``line``; a comment alone on its line also
    applies to findings starting on ``next_line`` (the next line holding code).
    """

    line: int
    column: int
    rule_ids: tuple[str, ...]
    reason: str
    next_line: int | None = None


@dataclass(frozen=True)
class BadComment:
    """A ``# tracelock:`` comment that is not a valid allow (no reason, unknown rule)."""

    line: int
    column: int
    message: str


@dataclass(eq=False)
class SourceFile:
    """One scanned file: its module name, text and tree (``None`` when unparsable)."""

    path: Path
    display: str
    module: str
    is_package: bool
    text: str = ""
    tree: ast.Module | None = None
    error: tuple[str, int, int] | None = None
    allows: list[InlineAllow] = field(default_factory=list)
    bad_comments: list[BadComment] = field(default_factory=list)
    _lines: list[str] | None = None

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    @property
    def line_count(self) -> int:
        if not self.text:
            return 0
        return self.text.count("\n") + (0 if self.text.endswith("\n") else 1)

    def column(self, line: int, byte_offset: int) -> int:
        """A 1-based column in characters from ``ast``'s 0-based UTF-8 byte offset."""
        lines = self.lines
        if not 1 <= line <= len(lines):
            return byte_offset + 1
        text = lines[line - 1]
        if text.isascii():
            return byte_offset + 1
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", "ignore")) + 1

    def source_line(self, line: int) -> str:
        lines = self.lines
        return lines[line - 1] if 1 <= line <= len(lines) else ""


def display_path(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` with forward slashes, or absolute when outside it."""
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def _excluded(display: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(display, p) for p in patterns)


def discover(paths: Iterable[str | Path], base: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """The Python files under ``paths`` (absolute, deduplicated, in a stable order).

    Relative ``paths`` are taken from the current directory; ``base`` only serves to match
    the ``exclude`` globs against reported (relative) paths.
    """
    found: list[Path] = []
    seen: set[Path] = set()

    def add(file: Path) -> None:
        if file not in seen:
            seen.add(file)
            found.append(file)

    for given in paths:
        absolute = Path(os.path.abspath(given))
        if absolute.is_file():
            add(absolute)
            continue
        if not absolute.is_dir():
            raise ScanPathError(f"cannot scan {given}: no such file or directory",
                                details={"path": str(given)})
        if not os.access(absolute, os.R_OK | os.X_OK):
            raise ScanPathError(f"cannot scan {given}: directory is not readable",
                                details={"path": str(given)})
        for root, dirs, files in os.walk(absolute):
            root_path = Path(root)
            kept = []
            for name in sorted(dirs):
                if name.startswith(".") or name in _SKIP_DIRS:
                    continue
                sub = root_path / name
                if (sub / "pyvenv.cfg").exists():
                    continue
                if exclude and _excluded(display_path(sub, base) + "/", exclude):
                    continue
                kept.append(name)
            dirs[:] = kept
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                file = root_path / name
                if exclude and _excluded(display_path(file, base), exclude):
                    continue
                add(file)
    return found


class _PackageCache:
    def __init__(self) -> None:
        self._is_pkg: dict[Path, bool] = {}

    def is_package_dir(self, directory: Path) -> bool:
        hit = self._is_pkg.get(directory)
        if hit is None:
            hit = (directory / "__init__.py").is_file()
            self._is_pkg[directory] = hit
        return hit

    def module_name(self, file: Path) -> tuple[str, bool]:
        is_package = file.name == "__init__.py"
        parts = [] if is_package else [file.stem]
        directory = file.parent
        while self.is_package_dir(directory):
            parts.append(directory.name)
            parent = directory.parent
            if parent == directory:
                break
            directory = parent
        return ".".join(reversed(parts)) or file.stem, is_package


def load_files(files: Sequence[Path], base: Path) -> list[SourceFile]:
    cache = _PackageCache()
    return [load_file(file, base, cache) for file in files]


def load_file(file: Path, base: Path, cache: _PackageCache | None = None) -> SourceFile:
    """Read, decode and parse one file (errors are kept on the result, not raised)."""
    module, is_package = (cache or _PackageCache()).module_name(file)
    source = SourceFile(path=file, display=display_path(file, base), module=module,
                        is_package=is_package)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ScanPathError(f"cannot read {source.display}: {exc.strerror or exc}",
                            details={"path": source.display}) from exc
    try:
        source.text = decode_source(raw)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        source.error = (f"cannot decode the file: {exc}", 1, 1)
        return source
    try:
        source.tree = ast.parse(source.text, filename=source.display, type_comments=False)
    except SyntaxError as exc:
        line = exc.lineno or 1
        column = exc.offset or 1
        source.error = (f"syntax error, file not analysed: {exc.msg}", line, max(column, 1))
        return source
    except ValueError as exc:  # source with NUL bytes
        source.error = (f"cannot parse the file: {exc}", 1, 1)
        return source
    except (RecursionError, MemoryError):
        source.error = ("the file is nested too deeply to parse; not analysed", 1, 1)
        return source
    if "tracelock" in source.text:
        _read_comments(source)
    return source


def _read_comments(source: SourceFile) -> None:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source.text).readline))
    except (tokenize.TokenError, SyntaxError):  # pragma: no cover - ast.parse succeeded
        return
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        match = _DIRECTIVE.match(tok.string)
        if match is None:
            continue
        line, column = tok.start[0], tok.start[1] + 1  # tokenize counts characters
        rest = match.group("rest").strip()
        allow = _ALLOW.match(rest)
        if allow is None:
            source.bad_comments.append(BadComment(line, column, (
                f"unrecognised tracelock comment {tok.string.strip()!r}; write "
                "'# tracelock: allow TL-XXX-000 -- reason'"
            )))
            continue
        ids = tuple(part.strip() for part in allow.group("ids").split(","))
        unknown = [i for i in ids if not _RULE_ID.match(i) or i not in RULES_BY_ID]
        meta = [i for i in ids if i in RULES_BY_ID and RULES_BY_ID[i].meta]
        # A further comment after two spaces and a hash is not part of the reason.
        reason = (allow.group("reason") or "").split("  #", 1)[0].strip()
        if reason.startswith("#"):
            reason = ""
        if unknown:
            source.bad_comments.append(BadComment(
                line, column, f"allow comment names unknown rule id(s) {', '.join(unknown)}"
            ))
            continue
        if meta:
            source.bad_comments.append(BadComment(
                line, column, f"rule(s) {', '.join(meta)} are about the scan itself and "
                "cannot be allowed"
            ))
            continue
        if not reason:
            source.bad_comments.append(BadComment(
                line, column, f"allow comment for {', '.join(ids)} has no reason; write "
                f"'# tracelock: allow {', '.join(ids)} -- why this is safe'"
            ))
            continue
        standalone = tok.line[: tok.start[1]].strip() == ""
        next_line = _next_code_line(source, line) if standalone else None
        source.allows.append(InlineAllow(line, column, ids, reason, next_line))


def _next_code_line(source: SourceFile, line: int) -> int | None:
    lines = source.lines
    for number in range(line + 1, len(lines) + 1):
        stripped = lines[number - 1].strip()
        if stripped and not stripped.startswith("#"):
            return number
    return None
