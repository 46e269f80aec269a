"""The run queue's commands: ``worker`` (serve a queue), ``submit`` (queue a run), ``queue``
(what the queues hold). See docs/queue.md."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import click

from tracelock.cli.cmd_run import result_text, runtime_for
from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    emit,
    json_option,
    json_text,
    print_json,
    reports_errors,
    store_option,
)
from tracelock.cli.describe import table
from tracelock.cli.loading import import_agent, read_json_file, toolkits_of
from tracelock.errors import UsageError
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.queue import Worker
from tracelock.runtime.queue.backends import existing_queue
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store


def _module_policy(module_name: str) -> Policy | None:
    """The module's ``POLICY`` (a Policy or a mapping), if it defines one."""
    import importlib

    found = getattr(importlib.import_module(module_name), "POLICY", None)
    if found is None:
        return None
    if isinstance(found, Policy):
        return found
    if isinstance(found, dict):
        return Policy.from_mapping(found)
    raise UsageError(f"{module_name}.POLICY is neither a Policy nor a mapping")


@contextlib.contextmanager
def _worker_runtime(
    store_path: Path, policy: Path | Policy | None, toolkits: list[Toolkit], sandbox: Path | None
) -> Iterator[Runtime]:
    store = open_store(store_path, create=True)
    try:
        runtime = Runtime(store, policy, toolkits=tuple(toolkits), sandbox=sandbox)
    except BaseException:
        store.close()
        raise
    try:
        yield runtime
    finally:
        runtime.close()
        store.close()


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@click.command("worker")
@click.argument("module")
@click.option("--queue", "queues", multiple=True, default=("default",), show_default=True, help="Queue to serve (repeat for several).")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 1024), help="Runs in flight at once in this worker (sync agents in threads, async agents on one event loop).")
@click.option("--queue-limit", default=None, type=click.IntRange(1), help="At most this many runs of each queue in flight across every worker.")
@click.option("--lease-ms", default=30_000, show_default=True, type=click.IntRange(100), help="Lease length (renewed every third of it).")
@click.option("--grace", default=30.0, show_default=True, type=click.FloatRange(0), help="Seconds in-flight runs get to finish after SIGTERM before they are handed back.")
@click.option("--worker-id", default=None, help="This worker's name in its leases (default host-pid).")
@click.option("--max-runs", default=None, type=click.IntRange(1), help="Stop after taking this many runs.")
@click.option("--until-idle", is_flag=True, help="Stop once the queues are empty and nothing is in flight.")
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False), help="Policy file (default: the module's POLICY, else deny-all).")
@click.option("--sandbox", type=click.Path(path_type=Path, file_okay=False), help="Sandbox root.")
@store_option
@json_option
@reports_errors
def worker_command(
    module: str,
    queues: tuple[str, ...],
    concurrency: int,
    queue_limit: int | None,
    lease_ms: int,
    grace: float,
    worker_id: str | None,
    max_runs: int | None,
    until_idle: bool,
    policy: Path | None,
    sandbox: Path | None,
    store_path: Path,
    as_json: bool,
) -> None:
    """Take runs from the queue and drive them (any number of workers, on any machine).

    MODULE is imported for its toolkits (tools and agents) and its POLICY. Each run is held
    under a lease with a fencing token: a worker that loses its lease (paused, cut off) has
    its appends refused. A sync agent's run takes one of the worker's threads; the runs of
    ``async def`` agents are tasks of one event loop (no thread each). SIGTERM: take nothing more, let the runs in flight finish for
    --grace seconds, hand the rest back. Exit 1 if a run could not be served."""
    toolkits: list[Toolkit] = toolkits_of(module)
    module_policy = _module_policy(module) if policy is None else None
    chosen: Path | Policy | None = policy if policy is not None else module_policy
    with _worker_runtime(store_path, chosen, toolkits, sandbox) as runtime:

        def event(row: dict[str, Any]) -> None:
            if not as_json:
                click.echo(f"{row['run']}: {row['outcome']}" + (f" ({row['reason']})" if row.get("reason") else ""))

        worker = Worker(
            runtime,
            queues=queues,
            concurrency=concurrency,
            queue_limit=queue_limit,
            lease_ms=lease_ms,
            worker_id=worker_id or _default_worker_id(),
            grace=grace,
            on_event=event,
        )

        def on_term(signum: int, frame: FrameType | None) -> None:
            worker.stop()

        previous = signal.signal(signal.SIGTERM, on_term)
        if not as_json:
            click.echo(f"worker {worker.worker_id} serving {', '.join(queues)} (concurrency {concurrency})", err=True)
        try:
            report = worker.run(max_runs=max_runs, until_idle=until_idle)
        finally:
            signal.signal(signal.SIGTERM, previous)
    failed = [row for row in report.runs if row["outcome"] == "error"] or worker.failed
    if as_json:
        print_json({"ok": not failed} | report.to_dict())
    else:
        click.echo(f"worker {report.worker}: " + ", ".join(f"{n} {what}" for what, n in sorted(report.counts().items())), err=True)
    code = EXIT_CHECK_FAILED if failed else 0
    if any(row["outcome"] == "handed_back" for row in report.runs):
        # Threads of handed-back runs (and cancelled async runs still unwinding) may be
        # inside agent code: they must not keep the process alive (their appends are
        # refused; their runs are queued again).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if failed:
        sys.exit(code)


@click.command("submit")
@click.argument("agent")
@click.option("--input", "input_file", type=click.Path(path_type=Path, dir_okay=False), help="JSON file with the run's input.")
@click.option("--queue", default="default", show_default=True, help="Queue to submit to.")
@click.option("--key", "idempotency_key", default=None, help="Idempotency key: the same key, from anywhere, names one run.")
@click.option("--tenant", default=None, help="Tenant key (a customer, a team) recorded in the run's start: the policy's daily_budgets.tenant applies.")
@click.option("--wait", "wait_s", default=None, type=click.FloatRange(0), help="Wait up to this many seconds for the run's result.")
@store_option
@json_option
@reports_errors
def submit_command(
    agent: str,
    input_file: Path | None,
    queue: str,
    idempotency_key: str | None,
    tenant: str | None,
    wait_s: float | None,
    store_path: Path,
    as_json: bool,
) -> None:
    """Queue a run of AGENT (module:function) for the workers of the store.

    With --tenant, the worker runs it for that tenant (recorded in the run's start), so the
    tenant's daily budgets apply; the same --key with another tenant is refused."""
    _, toolkits = import_agent(agent)
    value = read_json_file(input_file, "input file") if input_file is not None else None
    with runtime_for(store_path, toolkits=toolkits, create=True) as runtime:
        handle = runtime.submit(agent, value, queue=queue, idempotency_key=idempotency_key, tenant=tenant)
        if wait_s is None:
            document = {"ok": True, "run_id": handle.run_id, "status": handle.status(), "tenant": tenant}
            for_whom = f" for tenant {tenant}" if tenant is not None else ""
            emit(as_json, document, f"queued run {handle.run_id} on {queue}{for_whom}")
            return
        result = handle.result(timeout=wait_s)
    emit(as_json, {"ok": result.ok} | result.to_dict(), lambda: result_text(result))
    if result.outcome is not None and not result.ok:
        sys.exit(EXIT_CHECK_FAILED)


@click.command("queue")
@click.option("--state", default=None, type=click.Choice(["queued", "leased", "waiting", "done", "error"]), help="List the runs in this state.")
@click.option("--name", "queue", default=None, help="Only this queue.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1), help="At most this many runs listed.")
@store_option
@json_option
@reports_errors
def queue_command(state: str | None, queue: str | None, limit: int, store_path: Path, as_json: bool) -> None:
    """What the store's queues hold: counts per queue and state, and with --state the runs
    (each with its tenant, if it was submitted with one)."""
    with runtime_for(store_path) as runtime:
        backend = existing_queue(runtime.store)
        counts = backend.counts() if backend is not None else {}
        items = backend.items(queue=queue, state=state, limit=limit) if backend is not None and state else []
    document = {"ok": True, "queues": counts, "runs": [item.to_dict() for item in items]}

    def text() -> str:
        if not counts:
            return "no runs were ever queued in this store"
        rows = [[name, json_text(states)] for name, states in sorted(counts.items())]
        lines = table(["QUEUE", "RUNS"], rows)
        if items:
            lines += [""] + table(
                ["RUN", "QUEUE", "STATE", "TENANT", "ATTEMPTS", "NOTE"],
                [[i.run, i.queue, i.state, i.tenant or "", str(i.attempts), i.note or ""] for i in items],
            )
        return "\n".join(lines)

    emit(as_json, document, text)


COMMANDS = [worker_command, submit_command, queue_command]
