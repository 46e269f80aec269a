"""The ``tracelock`` command: a click group assembling the commands of every ``cmd_*`` module."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from tracelock.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, print_json
from tracelock.errors import UsageError

#: The module of each command; each module exposes COMMANDS, the click commands it defines.
#: A command's module is imported only when the command runs (or help lists them all), so
#: that a command loads only what it needs: ``tracelock verify BUNDLE`` loads no storage
#: backend and no runtime (tests/cli/test_verify_imports.py).
_COMMAND_MODULES = {
    "log": "tracelock.cli.cmd_store",
    "show": "tracelock.cli.cmd_store",
    "store": "tracelock.cli.cmd_store",
    "verify": "tracelock.cli.cmd_verify",
    "run": "tracelock.cli.cmd_run",
    "retrieve": "tracelock.cli.cmd_run",
    "approve": "tracelock.cli.cmd_run",
    "reject": "tracelock.cli.cmd_run",
    "resume": "tracelock.cli.cmd_run",
    "demo": "tracelock.cli.cmd_demo",
    "replay": "tracelock.cli.cmd_replay",
    "fork": "tracelock.cli.cmd_replay",
    "drift": "tracelock.cli.cmd_replay",
    "diff": "tracelock.cli.cmd_replay",
    "recover": "tracelock.cli.cmd_recover",
    "resolve": "tracelock.cli.cmd_recover",
    "abort": "tracelock.cli.cmd_recover",
    "scan": "tracelock.cli.cmd_scan",
    "keys": "tracelock.cli.cmd_keys",
    "checkpoint": "tracelock.cli.cmd_evidence",
    "prove": "tracelock.cli.cmd_evidence",
    "export": "tracelock.cli.cmd_evidence",
    "redact": "tracelock.cli.cmd_evidence",
    "stop": "tracelock.cli.cmd_stop",
    "ui": "tracelock.cli.cmd_ui",
    "mcp": "tracelock.cli.cmd_mcp",
    "worker": "tracelock.cli.cmd_worker",
    "submit": "tracelock.cli.cmd_worker",
    "queue": "tracelock.cli.cmd_worker",
}


class _Group(click.Group):
    """The command group; click's own usage errors (a missing argument, an unknown option,
    a bad value) honour ``--json`` as every other error does, and exit 2. Commands are
    loaded from their modules when asked for (:data:`_COMMAND_MODULES`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(_COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMAND_MODULES.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            for command in importlib.import_module(module).COMMANDS:
                self.add_command(command)
        return self.commands.get(cmd_name)

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


def main() -> None:
    """Console-script entry point."""
    cli()
