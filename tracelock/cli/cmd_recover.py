"""Crash recovery commands: ``recover``, ``resolve``, ``abort``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tracelock.cli.cmd_run import runtime_for
from tracelock.cli.common import EXIT_CHECK_FAILED, emit, json_option, reports_errors, store_option
from tracelock.cli.describe import table
from tracelock.cli.loading import read_json_file, toolkits_for_runs
from tracelock.cli.progress import Progress
from tracelock.errors import UsageError


@click.command("recover")
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False), help="Policy for runs recorded without one in the store.")
@click.option("--sandbox", type=click.Path(path_type=Path, file_okay=False), help="Sandbox root.")
@click.option(
    "--force",
    is_flag=True,
    help="Also continue runs still `running` while another process runs agents on the store "
    "(by default they are left alone: that process may be executing them).",
)
@store_option
@json_option
@reports_errors
def recover_command(policy: Path | None, sandbox: Path | None, force: bool, store_path: Path, as_json: bool) -> None:
    """Continue every unfinished run from its journal.

    Recorded results are reused; unfinished read-only and idempotent effects are re-run (the
    latter with their first idempotency key); an unfinished irreversible effect blocks its
    run until `tracelock resolve`. Exit 1 if a run could not be continued (its code is gone
    or diverged); blocked and waiting runs are reported, not failures. An unfinished write
    the store cut when it opened is reported (offset, bytes, where the copy went); damage
    that is not one is refused (exit 2, JOURNAL_CORRUPT) and nothing is cut or re-run.
    While another process runs agents on the store, runs still `running` are left alone and
    reported (that process may be executing them), unless --force."""
    toolkits = toolkits_for_runs(store_path, None)
    with runtime_for(store_path, policy=policy, toolkits=toolkits, sandbox=sandbox) as runtime, Progress(
        "recover", "unfinished runs"
    ) as bar:
        report = runtime.recover(progress=lambda done, total: bar.update(done, total), force=force)
    document = {"ok": not report.errors} | report.to_dict()

    def text() -> str:
        lines = [
            f"repaired: cut {repair['length']} bytes at byte {repair['offset']} ({repair['what']}), "
            f"an unfinished write that was never acknowledged; the bytes are saved in {repair['saved_to']}"
            for repair in report.repairs
        ]
        if not report.runs:
            return "\n".join([*lines, "nothing to recover: every run has ended"])
        rows = []
        for row in report.runs:
            detail = row.get("outcome") or ""
            if row.get("code"):
                detail += f" [{row['code']}]"
            if row["to"] in ("blocked", "awaiting_approval"):
                detail = f"step {row.get('waiting_step')}: {row.get('reason')}"
            if row.get("error_kind"):
                detail = f"{row['error_kind']}: {row.get('reason')}"
            if not detail and row.get("reason"):
                detail = str(row["reason"])  # left alone: the queue's, or maybe a live process's
            rows.append([str(row["run"]), str(row["from"]), str(row["to"]), detail])
        lines.extend(table(["RUN", "FROM", "TO", "DETAIL"], rows))
        return "\n".join(lines)

    emit(as_json, document, text)
    if report.errors:
        sys.exit(EXIT_CHECK_FAILED)


@click.command("resolve")
@click.argument("run_id")
@click.argument("step", type=int)
@click.option("--result", "result_file", type=click.Path(path_type=Path, dir_okay=False), help="JSON file: what the effect really returned.")
@click.option("--failed", default=None, help="The effect really failed, with this message.")
@click.option("--retry", is_flag=True, help="Allow exactly one re-execution of the effect.")
@click.option("--by", required=True, help="Who resolves (recorded).")
@click.option("--reason", default="", help="Why (recorded).")
@store_option
@json_option
@reports_errors
def resolve_command(
    run_id: str,
    step: int,
    result_file: Path | None,
    failed: str | None,
    retry: bool,
    by: str,
    reason: str,
    store_path: Path,
    as_json: bool,
) -> None:
    """Say what really happened at the irreversible step a blocked run waits on, then
    `tracelock recover` continues it."""
    chosen = [result_file is not None, failed is not None, retry]
    if sum(chosen) != 1:
        raise UsageError("give exactly one of --result FILE, --failed MESSAGE, --retry")
    value: Any = read_json_file(result_file, "result") if result_file is not None else None
    with runtime_for(store_path) as runtime:
        runtime.resolve(run_id, step, by=by, reason=reason, result=value, failed=failed, retry=retry)
    action = "retry allowed" if retry else ("failure recorded" if failed is not None else "result recorded")
    emit(
        as_json,
        {"ok": True, "run_id": run_id, "step": step, "action": action, "by": by},
        f"run {run_id} step {step}: {action} by {by}; `tracelock recover` continues the run",
    )


@click.command("abort")
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded).")
@click.option("--by", default="operator", show_default=True, help="Who aborts (recorded).")
@store_option
@json_option
@reports_errors
def abort_command(run_id: str, reason: str, by: str, store_path: Path, as_json: bool) -> None:
    """End an unfinished run as aborted; nothing of it runs again."""
    with runtime_for(store_path) as runtime:
        runtime.abort(run_id, by=by, reason=reason)
    emit(as_json, {"ok": True, "run_id": run_id, "status": "aborted"}, f"run {run_id}: aborted ({reason})")


COMMANDS = [recover_command, resolve_command, abort_command]
