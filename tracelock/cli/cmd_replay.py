"""Replay, fork, drift and diff: ``replay``, ``fork``, ``drift``, ``diff``."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import click

from tracelock.cli.cmd_run import result_text, runtime_for
from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    emit,
    json_option,
    json_text,
    reports_errors,
    store_option,
)
from tracelock.cli.describe import table
from tracelock.cli.drift_processes import process_attempt
from tracelock.cli.loading import add_import_paths, import_agent, read_json_file, toolkits_for_runs
from tracelock.cli.progress import Progress
from tracelock.cli.workflow_run import load_workflow_file, require_workflow_file
from tracelock.errors import UsageError
from tracelock.runtime.provenance.record import describe_differences, differences
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.compare import run_difference, step_table
from tracelock.runtime.replay.drift import compare_attempts, detect_drift, drift_run_id, hash_seed
from tracelock.runtime.replay.fork import fork_plan, fork_run
from tracelock.runtime.replay.gate import replay_all
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store


def strict_environment_option(func: Any) -> Any:
    """``--strict-environment``: an engine or environment other than the recorded one is a
    failure (exit 1) instead of information (for CI)."""
    return click.option(
        "--strict-environment",
        "strict_environment",
        is_flag=True,
        help="Fail (exit 1) when the run was recorded under another engine or environment "
        "(tracelock or Python version, platform, installed distributions).",
    )(func)


def _since_ms(text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since takes an ISO 8601 time or milliseconds, not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _divergence_text(divergence: dict[str, Any]) -> list[str]:
    lines = [f"  {divergence.get('kind')}: {divergence.get('message')}"]
    for change in divergence.get("diff", [])[:10]:
        if change["op"] == "changed":
            lines.append(f"    {change['path']}: recorded {json_text(change['recorded'])}, requested {json_text(change['requested'])}")
        elif change["op"] == "added":
            lines.append(f"    {change['path']}: added {json_text(change['requested'])}")
        else:
            lines.append(f"    {change['path']}: removed (was {json_text(change['recorded'])})")
    return lines


@click.command("replay")
@click.argument("run_id", required=False)
@click.option("--all", "replay_every", is_flag=True, help="Replay every ended run in the store (the replay gate).")
@click.option("--since", default=None, help="With --all: only runs started at or after this time (ISO 8601 or ms).")
@click.option("--agent", default=None, help="module:function to replay with (default: the recorded agent).")
@click.option("--workflow", type=click.Path(path_type=Path, dir_okay=False), help="Replay with this workflow file (a run of `run --workflow`).")
@click.option(
    "--path",
    "import_paths",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory where the agents' modules are imported from, before the working directory (repeatable).",
)
@strict_environment_option
@store_option
@json_option
@reports_errors
def replay_command(
    run_id: str | None,
    replay_every: bool,
    since: str | None,
    agent: str | None,
    workflow: Path | None,
    import_paths: tuple[Path, ...],
    strict_environment: bool,
    store_path: Path,
    as_json: bool,
) -> None:
    """Re-execute a run's agent code with every effect answered from the journal.

    The recorded agent (module:function) is imported from the --path directories, then the
    working directory. Exit 0 when it matches, 1 on divergence (the step, what was recorded,
    what was requested, and the differing fields as JSON pointers). With --all, progress goes
    to stderr.

    What changed since the recording is reported first, as information: the engine and
    environment (tracelock and Python versions, platform, installed distributions), the
    agent's modules and the tools' definitions. With --strict-environment a run recorded
    under another engine or environment fails (exit 1) even when it matches."""
    if replay_every == (run_id is not None):
        raise UsageError("give a RUN_ID or --all")
    add_import_paths(import_paths)
    func: Any = None
    toolkits: list[Toolkit]
    if agent is not None and workflow is not None:
        raise UsageError("give --agent or --workflow, not both")
    if workflow is not None:
        func, toolkits = load_workflow_file(workflow)
    elif agent is not None:
        func, toolkits = import_agent(agent)
    else:
        toolkits = toolkits_for_runs(store_path, None if replay_every else [run_id or ""])
    with runtime_for(store_path, toolkits=toolkits) as runtime:
        if replay_every:

            with Progress("replay", "runs") as bar:
                gate = replay_all(
                    runtime, since_ms=_since_ms(since), agent=func, progress=lambda done, total: bar.update(done, total)
                )
            document = gate.to_dict()

            def gate_text() -> str:
                rows = [[str(failed["run"]), str(failed["agent"]), "DIVERGED"] for failed in gate.diverged]
                rows += [[str(skipped["run"]), str(skipped["agent"]), f"NOT LOADABLE: {skipped['reason']}"] for skipped in gate.skipped]
                lines = []
                if rows:
                    header, *row_lines = table(["RUN", "AGENT", "RESULT"], rows)
                    lines.append(header)
                    for index, failed in enumerate(gate.diverged):
                        lines.append(row_lines[index])
                        lines.extend(_divergence_text(failed["divergence"] or {}))
                    lines.extend(row_lines[len(gate.diverged):])
                for changed in gate.environment:
                    found = {"recorded": True, "engine": changed["engine"], "modules": [], "tools": []}
                    lines.extend(f"{changed['run']}: {line}" for line in describe_differences(found))
                gate_failed = not gate.ok or (strict_environment and bool(gate.environment))
                lines.append(
                    f"{gate.checked} replayed, {gate.matched} matched, {len(gate.diverged)} diverged, "
                    f"{len(gate.skipped)} not loadable"
                    + (f", {len(gate.environment)} recorded under another environment" if gate.environment else "")
                    + f": {'FAIL' if gate_failed else 'PASS'}"
                )
                return "\n".join(lines)

            if strict_environment:
                document["ok"] = document["ok"] and not gate.environment
            emit(as_json, document, gate_text)
            if not document["ok"]:
                sys.exit(EXIT_CHECK_FAILED)
            return
        assert run_id is not None
        if func is None:
            require_workflow_file(runtime.store, run_id)
        report = runtime.replay(run_id, func)
    failed = not report.matched or (strict_environment and report.environment_changed)
    document = {"ok": not failed} | report.to_dict()

    def text() -> str:
        # What changed since the recording comes first: it often explains a divergence.
        lines = [f"  {line}" for line in describe_differences(report.provenance)] if report.provenance else []
        if report.matched:
            verdict = f"run {run_id}: replay MATCHED (fingerprint {report.replayed_fingerprint})"
            if strict_environment and report.environment_changed:
                verdict += "; FAILED: recorded under another engine or environment (--strict-environment)"
            return "\n".join([verdict, *lines])
        return "\n".join([f"run {run_id}: replay DIVERGED", *lines, *_divergence_text(report.divergence or {})])

    emit(as_json, document, text)
    if failed:
        sys.exit(EXIT_CHECK_FAILED)


def _only_changes(found: dict[str, Any]) -> bool:
    return bool(found.get("engine") or found.get("modules") or found.get("tools"))


@click.command("fork")
@click.argument("run_id")
@click.option("--at", "at", type=click.IntRange(min=0), required=True, help="First step to run live.")
@click.option("--agent", default=None, help="module:function (default: the recorded agent's current code).")
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False), help="Policy for the new run (default: the parent's).")
@click.option("--sandbox", type=click.Path(path_type=Path, file_okay=False), help="Sandbox root.")
@click.option(
    "--allow-irreversible",
    is_flag=True,
    help="Consent to running again, live, the irreversible effects the parent recorded at or after --at.",
)
@store_option
@json_option
@reports_errors
def fork_command(
    run_id: str,
    at: int,
    agent: str | None,
    policy: Path | None,
    sandbox: Path | None,
    allow_irreversible: bool,
    store_path: Path,
    as_json: bool,
) -> None:
    """Replay RUN_ID up to step --at from the record, then continue live as a new run.

    Before it runs, the effects the parent recorded at or after --at (which run live) are
    listed. Refused (exit 2, no run written) when --at is past the parent's steps
    (FORK_POINT_OUT_OF_RANGE), when one of them is irreversible and neither
    --allow-irreversible nor the policy's approval covers it (FORK_IRREVERSIBLE_NOT_ALLOWED),
    or when the code does not reproduce a recorded step before --at (FORK_REFUSED).
    Exit 1 if the new run fails."""
    func: Any = None
    if agent is not None:
        func, toolkits = import_agent(agent)
    else:
        toolkits = toolkits_for_runs(store_path, [run_id])
    with runtime_for(store_path, policy=policy, toolkits=toolkits, sandbox=sandbox) as runtime:
        chosen = runtime.policy if policy is not None else None
        live = fork_plan(runtime, run_id, at, chosen)
        if not as_json:
            click.echo(live_text(run_id, at, live), err=True)
        result = fork_run(runtime, run_id, at, func, policy=chosen, allow_irreversible=allow_irreversible)
    emit(
        as_json,
        {"ok": result.ok, "live": live} | result.to_dict(),
        lambda: result_text(result) + f"\n  parent       {json_text(result.parent)}",
    )
    if not result.ok:
        sys.exit(EXIT_CHECK_FAILED)


def live_text(run_id: str, at: int, live: list[dict[str, Any]]) -> str:
    """The effects a fork runs live, one line each, as the fork command lists them first."""
    if not live:
        return f"fork of {run_id} at step {at}: no recorded effect runs live"
    lines = [f"fork of {run_id} at step {at}: these recorded effects run live if the code requests them again:"]
    for effect in live:
        approval = ", needs approval" if effect["approval"] else ""
        lines.append(f"  step {effect['step']} {effect['kind']} {effect['name']} ({effect['class']}{approval})")
    return "\n".join(lines)


@click.command("drift")
@click.argument("agent")
@click.option("--input", "input_file", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.option("--n", "n", type=click.IntRange(min=2), default=5, show_default=True, help="How many runs.")
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False), help="Policy file.")
@click.option(
    "--in-process",
    "in_process",
    is_flag=True,
    help="Run every attempt in this process (faster; blind to drift that depends on the hash seed).",
)
@click.option("--seed", default=None, help="Seed of every attempt (default: the one their shared run id gives).")
@click.option(
    "--hold-llm",
    "hold_llm",
    is_flag=True,
    help="Answer the LLM steps of every attempt after the first from the first run (separates code "
    "drift from model variance); runs the attempts in this process.",
)
@json_option
@reports_errors
def drift_command(
    agent: str,
    input_file: Path,
    n: int,
    policy: Path | None,
    in_process: bool,
    seed: str | None,
    hold_llm: bool,
    as_json: bool,
) -> None:
    """Run AGENT on the same input N times, each in a fresh store; exit 1 on drift.

    Every attempt runs under one run id and one seed, so ctx.random(), ctx.uuid() and
    idempotency keys are the same in all of them.

    By default each attempt runs in a fresh Python process with PYTHONHASHSEED set to the
    attempt number plus one, so that drift across processes (set iteration order) shows."""
    value = read_json_file(input_file, "input")

    with Progress("drift", "runs", n) as bar:

        def progress(done: int, digest: str | None) -> None:
            bar.update(done, note=digest)

        if in_process or hold_llm:
            func, toolkits = import_agent(agent)

            def make(store: Any) -> Runtime:
                return Runtime(store, policy, toolkits=tuple(toolkits))

            report = detect_drift(make, func, value, n, progress=progress, seed=seed, hold_llm=hold_llm)
        else:
            import_agent(agent)  # a name that cannot be imported is a usage error, once, here
            seeds = [hash_seed(number) for number in range(n)]
            attempt = process_attempt(agent, input_file, policy, run_id=drift_run_id(agent, value), seed=seed)
            report = compare_attempts(attempt, n, progress=progress, mode="processes", hash_seeds=seeds)

    def text() -> str:
        mode = "in one process" if report.mode == "in-process" else f"in {n} processes (PYTHONHASHSEED {report.hash_seeds})"
        if report.held_llm:
            mode += ", LLM answers held from the first run"
        if not report.drifted:
            return f"no drift: {n} runs {mode}, one fingerprint {report.fingerprints[0]}"
        drift = report.drift or {}
        where = f" at step {drift.get('step')}" if drift.get("step") is not None else ""
        tool = drift.get("tool") or {}
        named = f", {tool.get('kind')} {tool.get('name')!s} ({tool.get('class')})" if tool else ""
        field = f" ({drift.get('field')})" if drift.get("field") else ""
        lines = [
            f"DRIFT in run {drift.get('run')} of {n} {mode}: {drift.get('kind')} difference in "
            f"{drift.get('component')}{where}{field}{named}",
        ]
        if drift.get("cause") or drift.get("kind") == "model":
            lines.append(f"  {drift.get('message')}")
        if drift.get("diff"):
            lines.extend(_changes_text(drift["diff"], "first run", "this run"))
        else:
            lines += [f"  first run: {json_text(drift.get('a'))}", f"  this run:  {json_text(drift.get('b'))}"]
        return "\n".join(lines)

    emit(as_json, {"ok": not report.drifted} | report.to_dict(), text)
    if report.drifted:
        sys.exit(EXIT_CHECK_FAILED)


def _changes_text(changes: list[dict[str, Any]], before: str, after: str) -> list[str]:
    lines = []
    for change in changes[:10]:
        if change["op"] == "changed":
            lines.append(f"    {change['path']}: {before} {json_text(change['recorded'])}, {after} {json_text(change['requested'])}")
        elif change["op"] == "added":
            lines.append(f"    {change['path']}: only in {after}: {json_text(change['requested'])}")
        else:
            lines.append(f"    {change['path']}: only in {before}: {json_text(change['recorded'])}")
    return lines


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@strict_environment_option
@store_option
@json_option
@reports_errors
def diff_command(run_a: str, run_b: str, strict_environment: bool, store_path: Path, as_json: bool) -> None:
    """Compare two runs step by step; exit 0 when they match (same fingerprint, no
    difference), 1 when they differ. Differences in what produced them (engine and
    environment, modules, tool definitions) are reported as information; with
    --strict-environment, runs recorded under different engines or environments differ."""
    with open_store(store_path, create=False, read_only=True) as store:
        a, b = load_run(store, run_a), load_run(store, run_b)
    rows = step_table(a, b)
    fp_a, fp_b = (a.end or {}).get("fingerprint"), (b.end or {}).get("fingerprint")
    first = run_difference(a, b)
    produced = differences(a.start.get("provenance"), b.start.get("provenance"))
    same = fp_a == fp_b and first is None and not (strict_environment and produced["engine"])
    document = {"ok": same, "same": same, "same_fingerprint": fp_a == fp_b, "fingerprints": [fp_a, fp_b],
                "first_difference": first, "steps": rows, "provenance": produced}

    def text() -> str:
        lines = [f"{'STEP':>4}  {'A: ' + run_a:<36} {'B: ' + run_b:<36} DIFFERS"]
        for row in rows:
            lines.append(f"{row['step']:>4}  {row['a']:<36} {row['b']:<36} {', '.join(row['differs']) or '-'}")
        lines.append(f"fingerprints {'MATCH' if fp_a == fp_b else 'DIFFER'}: {fp_a} vs {fp_b}")
        if first:
            lines.append(f"first difference: {first['kind']} in {first['component']}" + (f" at step {first['step']}" if first.get("step") is not None else ""))
            if first.get("kind") == "model":
                lines.append(f"  {first.get('message')}")
            lines.extend(_changes_text(first.get("diff", []), "A", "B"))
        if _only_changes(produced) or not produced["recorded"]:
            lines.extend(f"  {line}" for line in describe_differences(produced, now="B ran", then="A ran"))
        return "\n".join(lines)

    emit(as_json, document, text)
    if not same:
        sys.exit(EXIT_CHECK_FAILED)


COMMANDS = [replay_command, fork_command, drift_command, diff_command]
