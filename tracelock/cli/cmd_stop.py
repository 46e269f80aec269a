"""The emergency stop: ``stop`` (and ``stop --lift``, ``stop --list``)."""

from __future__ import annotations

from pathlib import Path

import click

from tracelock.cli.cmd_run import runtime_for
from tracelock.cli.common import emit, json_option, reports_errors, store_option
from tracelock.cli.describe import table
from tracelock.errors import UsageError


@click.command("stop")
@click.argument("tool", required=False)
@click.option("--irreversible", is_flag=True, help="Stop every irreversible tool instead of one tool.")
@click.option("--lift", is_flag=True, help="Lift the stop on TOOL (or, with --irreversible, on every irreversible tool).")
@click.option("--list", "listing", is_flag=True, help="List the stops in force.")
@click.option("--by", default=None, help="Who stops or lifts (recorded; required unless --list).")
@click.option("--reason", default=None, help="Why (recorded; required unless --list).")
@store_option
@json_option
@reports_errors
def stop_command(
    tool: str | None,
    irreversible: bool,
    lift: bool,
    listing: bool,
    by: str | None,
    reason: str | None,
    store_path: Path,
    as_json: bool,
) -> None:
    """Prohibit TOOL (or, with --irreversible, every irreversible tool) in every run of the
    store, runs under way included: a step that reaches it ends DENIED [TOOL_STOPPED] at
    AUTHORIZE. The stop is a durable entry of the store's admin chain; --lift removes it
    (also journaled). A run waiting for approval of a stopped tool is denied when it resumes."""
    if listing:
        if tool is not None or irreversible or lift:
            raise UsageError("--list takes no TOOL, --irreversible or --lift")
        with runtime_for(store_path) as runtime:
            stops = runtime.stops.stops()
        document = {"ok": True, "stops": [stop.to_dict() for stop in stops]}

        def listed() -> str:
            if not stops:
                return "no stops in force"
            rows = [[stop.target, stop.by, str(stop.seq), stop.reason] for stop in stops]
            return "\n".join(table(["STOPPED", "BY", "SEQ", "REASON"], rows))

        emit(as_json, document, listed)
        return
    if (tool is None) == (not irreversible):
        raise UsageError("give a TOOL or --irreversible (one of them)")
    if not by or not reason:
        raise UsageError("a stop and its lifting are journaled: give --by and --reason")
    side_effect = "irreversible" if irreversible else None
    with runtime_for(store_path) as runtime:
        if lift:
            stop = runtime.lift_stop(tool, side_effect=side_effect, by=by, reason=reason)
        else:
            stop = runtime.stop_tool(tool, side_effect=side_effect, by=by, reason=reason)
    action = "lifted" if lift else "stopped"
    emit(
        as_json,
        {"ok": True, "action": action, "stop": stop.to_dict()},
        f"{stop.target}: {action} by {by} ({reason})"
        + ("" if lift else "; every run that reaches it is DENIED [TOOL_STOPPED]"),
    )


COMMANDS = [stop_command]
