"""The ``tracelock`` command: a click group assembling the commands of every ``cmd_*`` module."""

from __future__ import annotations

import importlib

import click

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
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracelock")
def cli() -> None:
    """tracelock: provably deterministic execution for AI agents."""


for _name in _COMMAND_MODULES:
    for _command in importlib.import_module(_name).COMMANDS:
        cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli()
