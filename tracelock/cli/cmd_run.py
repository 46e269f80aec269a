"""Commands that run and answer for runs: ``run``, ``retrieve``, ``approve``, ``reject``,
``resume``, ``replay``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_INTERRUPTED,
    emit,
    json_option,
    json_text,
    print_json,
    reports_errors,
    store_option,
)
from tracelock.cli.loading import build_runtime, import_agent, read_json_file
from tracelock.cli.workflow_run import agent_for_run
from tracelock.errors import TracelockError
from tracelock.runtime.errors import DivergenceError
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import RunResult, Runtime
from tracelock.runtime.tools.toolkit import Toolkit


@contextlib.contextmanager
def runtime_for(
    store_path: Path,
    *,
    policy: Path | None = None,
    toolkits: list[Toolkit] | None = None,
    sandbox: Path | None = None,
    create: bool = False,
    timeline: bool = False,
) -> Iterator[Runtime]:
    runtime = build_runtime(
        store_path, policy=policy, toolkits=toolkits or [], sandbox=sandbox, create=create, timeline=timeline
    )
    try:
        yield runtime
    finally:
        runtime.close()
        runtime.store.close()


def result_text(result: RunResult) -> str:
    lines = [f"run {result.run_id}: {result.status}"]
    if result.outcome is not None:
        lines.append(f"  outcome      {result.outcome}" + (f" [{result.code}]" if result.code else ""))
    if result.fingerprint:
        lines.append(f"  fingerprint  {result.fingerprint}")
    if result.waiting_step is not None:
        lines.append(f"  waiting on   step {result.waiting_step}: {result.error}")
    elif result.error:
        lines.append(f"  error        {result.error}")
    if result.output is not None:
        lines.append(f"  output       {json_text(result.output)}")
    if result.traceback:
        lines.append("  traceback")
        lines.extend("    " + line for line in result.traceback.rstrip("\n").splitlines())
    return "\n".join(lines)


DENY_ALL_NOTE = (
    "no --policy was given, so the deny-all policy applied: every tool and LLM call is denied "
    "(see docs/policy.md)"
)


def _interrupted(runtime: Runtime, run_id: str, as_json: bool) -> None:
    try:
        status: str | None = load_run(runtime.store, run_id).status
    except TracelockError:
        status = None
    if status is None:
        message = f"interrupted before run {run_id} started: nothing was recorded"
    else:
        message = (
            f"interrupted: run {run_id} is left unfinished ({status}); "
            "`tracelock recover` continues it"
        )
    if as_json:
        print_json({"ok": False, "interrupted": True, "run_id": run_id, "status": status, "message": message})
    click.echo(message, err=True)
    sys.exit(EXIT_INTERRUPTED)


def _exit_for(result: RunResult) -> None:
    if result.outcome is not None and result.outcome != "SUCCESS":
        sys.exit(EXIT_CHECK_FAILED)


@click.command("run")
@click.argument("agent", required=False)
@click.option("--workflow", type=click.Path(path_type=Path, dir_okay=False), help="Run this workflow file (docs/workflows.md) instead of AGENT.")
@click.option("--input", "input_file", type=click.Path(path_type=Path, dir_okay=False), help="JSON file with the run's input.")
@click.option(
    "--policy",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Policy file (TOML or YAML). Without it the deny-all policy applies: every tool and LLM call is denied.",
)
@click.option("--sandbox", type=click.Path(path_type=Path, file_okay=False), help="Root of the sandboxed filesystem toolset.")
@click.option("--run-id", default=None, help="Use this run id instead of a generated one.")
@click.option(
    "--seed",
    default=None,
    help="Seed of ctx.random() and ctx.uuid() (part of the run's configuration; default: derived from the run id).",
)
@store_option
@json_option
@reports_errors
def run_command(
    agent: str | None,
    workflow: Path | None,
    input_file: Path | None,
    policy: Path | None,
    sandbox: Path | None,
    run_id: str | None,
    seed: str | None,
    store_path: Path,
    as_json: bool,
) -> None:
    """Run AGENT (module:function) or --workflow FILE as a new recorded run. Exit 1 if the run
    fails; 130 if interrupted (Ctrl-C), leaving the run unfinished for `tracelock recover`.

    Without --policy, the deny-all policy applies."""
    func, toolkits = agent_for_run(agent, workflow)
    value: Any = read_json_file(input_file, "input") if input_file is not None else None
    with runtime_for(store_path, policy=policy, toolkits=toolkits, sandbox=sandbox, create=True, timeline=True) as runtime:
        run_id = run_id or runtime.new_run_id()
        try:
            result = runtime.run(func, value, run_id=run_id, seed=seed)
        except KeyboardInterrupt:
            _interrupted(runtime, run_id, as_json)
            raise
    note = DENY_ALL_NOTE if policy is None and result.outcome == "DENIED" else None
    emit(
        as_json,
        {"ok": result.outcome in (None, "SUCCESS")} | result.to_dict() | ({"note": note} if note else {}),
        lambda: result_text(result) + (f"\nnote: {note}" if note else ""),
    )
    _exit_for(result)


@click.command("retrieve")
@click.argument("run_id")
@store_option
@json_option
@reports_errors
def retrieve_command(run_id: str, store_path: Path, as_json: bool) -> None:
    """Return a run's stored response from the journal; no agent code or model runs."""
    with runtime_for(store_path) as runtime:
        result = runtime.retrieve(run_id)
    emit(as_json, {"ok": True} | result.to_dict(), lambda: result_text(result))


def _decide(decision: str, run_id: str, step: int, by: str, reason: str, store_path: Path, as_json: bool) -> None:
    with runtime_for(store_path) as runtime:
        if decision == "approved":
            runtime.approve(run_id, step, by=by, reason=reason)
        else:
            runtime.reject(run_id, step, by=by, reason=reason)
    emit(
        as_json,
        {"ok": True, "run_id": run_id, "step": step, "decision": decision, "by": by},
        f"run {run_id} step {step}: {decision} by {by}; `tracelock resume {run_id}` continues it",
    )


@click.command("approve")
@click.argument("run_id")
@click.argument("step", type=int)
@click.option("--by", required=True, help="Who approves (recorded).")
@click.option("--reason", default="", help="Why (recorded).")
@store_option
@json_option
@reports_errors
def approve_command(run_id: str, step: int, by: str, reason: str, store_path: Path, as_json: bool) -> None:
    """Approve the step a run waits on (awaiting_approval)."""
    _decide("approved", run_id, step, by, reason, store_path, as_json)


@click.command("reject")
@click.argument("run_id")
@click.argument("step", type=int)
@click.option("--by", required=True, help="Who rejects (recorded).")
@click.option("--reason", default="", help="Why (recorded).")
@store_option
@json_option
@reports_errors
def reject_command(run_id: str, step: int, by: str, reason: str, store_path: Path, as_json: bool) -> None:
    """Reject the step a run waits on; the step ends DENIED [APPROVAL_REJECTED]."""
    _decide("rejected", run_id, step, by, reason, store_path, as_json)


@click.command("resume")
@click.argument("run_id")
@click.option("--agent", default=None, help="module:function, when the recorded name cannot be imported.")
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False), help="Policy file (must be the run's policy).")
@click.option("--sandbox", type=click.Path(path_type=Path, file_okay=False), help="Sandbox root.")
@store_option
@json_option
@reports_errors
def resume_command(
    run_id: str, agent: str | None, policy: Path | None, sandbox: Path | None, store_path: Path, as_json: bool
) -> None:
    """Continue an unfinished run (after an approval, for instance) from its journal."""
    with runtime_for(store_path) as probe:
        spec = agent or load_run(probe.store, run_id).entry
    func, toolkits = import_agent(spec)
    with runtime_for(store_path, policy=policy, toolkits=toolkits, sandbox=sandbox) as runtime:
        try:
            result = runtime.resume(run_id, func)
        except DivergenceError as exc:
            # A check failed, not the input: the run is left as it was (see docs/recovery.md).
            left = load_run(runtime.store, run_id)
            emit(
                as_json,
                {"ok": False, "run_id": run_id, "status": left.status, "waiting_step": left.waiting_step, "error": exc.to_dict()},
                f"run {run_id} not resumed: {exc.message}\nit stays {left.status}",
            )
            sys.exit(EXIT_CHECK_FAILED)
    emit(as_json, {"ok": result.outcome in (None, "SUCCESS")} | result.to_dict(), lambda: result_text(result))
    _exit_for(result)


COMMANDS = [run_command, retrieve_command, approve_command, reject_command, resume_command]
