"""``tracelock scan``: the static nondeterminism scan of agent and tool code.

Exit codes: 0 no finding at or above the threshold, 1 findings at or above it, 2 usage or
input error (missing path, bad configuration, bad flag combination).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracelock.analysis.config import ScanConfig, load_config
from tracelock.analysis.model import FAIL_ON_CHOICES
from tracelock.analysis.reporters import FORMATS, render, to_text
from tracelock.analysis.scanner import scan_paths, with_fail_on
from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    json_option,
    print_json,
    reports_errors,
)
from tracelock.errors import TracelockError, UsageError


@click.command("scan")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Report format (default: text; --json is --format json).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="TOML configuration ([scan] or [tool.tracelock.scan] table).",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON_CHOICES),
    default=None,
    help="Exit 1 when findings at or above this severity remain (default: the config's "
    "fail_on, else error; 'none' never fails).",
)
@click.option(
    "--entry",
    "entries",
    multiple=True,
    metavar="MODULE:FUNCTION",
    help="Extra entry point (fnmatch globs on both sides; '*:*' scans every function).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the report to this file; a one-line summary goes to stderr.",
)
@click.option("--show-allowed", is_flag=True, help="Text format: also list allowed findings.")
@json_option
@reports_errors
def scan(
    paths: tuple[Path, ...],
    fmt: str | None,
    config_path: Path | None,
    fail_on: str | None,
    entries: tuple[str, ...],
    output: Path | None,
    show_allowed: bool,
    as_json: bool,
) -> None:
    """Find nondeterminism reachable from agents and tools in PATH... (files or directories).

    Entry points are functions decorated with @...agent or @...tool, plus configured
    'module:function' patterns. Calls are followed into the scanned modules; each finding
    shows the call path from its entry point.
    """
    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json conflicts with --format {fmt}")
    chosen = "json" if as_json else (fmt or "text")
    try:
        config = load_config(config_path) if config_path is not None else ScanConfig()
        if entries:
            config = config.with_entry_points(entries)
        config = with_fail_on(config, fail_on)
        report = scan_paths(list(paths), config)
    except TracelockError as exc:
        if chosen == "json" and not as_json:  # --json itself is handled by reports_errors
            print_json({"ok": False, "error": exc.to_dict()})
            sys.exit(EXIT_USAGE)
        raise

    if chosen == "text":
        document = to_text(report, show_suppressed=show_allowed)
    else:
        document = render(report, chosen)
    if output is not None:
        try:
            output.write_text(document + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the report to {output}: {exc.strerror or exc}",
                                 details={"path": str(output)}) from exc
        click.echo(to_text(report).rsplit("\n", 1)[-1], err=True)
    else:
        click.echo(document)
    sys.exit(EXIT_CHECK_FAILED if report.failing() else EXIT_OK)


COMMANDS = [scan]
