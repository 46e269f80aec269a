"""The ``tracelock`` command: a click group assembling the commands of every ``cmd_*`` module."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from tracelock.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, print_json
from tracelock.errors import UsageError

# Each module exposes COMMANDS: a list of click commands to register.
_COMMAND_MODULES = [
    "tracelock.cli.cmd_store",
    "tracelock.cli.cmd_run",
    "tracelock.cli.cmd_demo",
    "tracelock.cli.cmd_replay",
    "tracelock.cli.cmd_recover",
    "tracelock.cli.cmd_scan",
    "tracelock.cli.cmd_keys",
    "tracelock.cli.cmd_evidence",
    "tracelock.cli.cmd_stop",
    "tracelock.cli.cmd_ui",
    "tracelock.cli.cmd_mcp",
    "tracelock.cli.cmd_worker",
]


class _Group(click.Group):
    """The command group; click's own usage errors (a missing argument, an unknown option,
    a bad value) honour ``--json`` as every other error does, and exit 2."""

    def main(self, args: Sequence[str] | None = None, *pos: Any, **kwargs: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv or kwargs.get("standalone_mode") is False:
            return super().main(argv, *pos, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(argv, *pos, **kwargs)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as exc:
            print_json({"ok": False, "error": {"code": UsageError.code, "message": exc.format_message(), "details": {}}})
            sys.exit(EXIT_USAGE)
        if isinstance(code, int) and code != 0:
            sys.exit(code)
        return code


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracelock")
def cli() -> None:
    """tracelock: provably deterministic execution for AI agents."""


for _name in _COMMAND_MODULES:
    for _command in importlib.import_module(_name).COMMANDS:
        cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli()
