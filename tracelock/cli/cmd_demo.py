"""``tracelock demo``: record a small realistic agent run, retrieve it, replay it, verify it,
explaining each step."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    json_option,
    print_json,
    reports_errors,
    store_option,
)
from tracelock.cli.describe import Describer
from tracelock.examples import support
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime
from tracelock.storage.open import backend_of, open_store
from tracelock.storage.verify import verify_run, verify_store

TICKET = {"id": "T-1042", "text": "Hello, the keyboard from order A-1001 arrived broken. Refund?"}


@click.command("demo")
@store_option
@json_option
@reports_errors
def demo_command(store_path: Path, as_json: bool) -> None:
    """Record a support agent's run, then retrieve, replay and verify it."""
    say = (lambda *_: None) if as_json else click.echo
    if backend_of(store_path) == "postgresql":
        sandbox = Path("tracelock-demo-sandbox")  # a database has no directory beside it
    else:
        store_path = Path(store_path)
        sandbox = store_path.parent / (store_path.name.lstrip(".") + "-demo-sandbox")
    store = open_store(store_path)
    shown = store.location  # a connection string without its password
    runtime = Runtime(store, support.POLICY_FILE, toolkits=(support.support,), sandbox=sandbox)
    report: dict[str, Any] = {}
    try:
        say(f"tracelock demo: store {shown}, sandbox {sandbox}\n")
        say("1. RECORD  a support agent plans with an LLM (a deterministic stand-in), then submits")
        say("           each proposed action; every step passes RECEIVE, PARSE, VALIDATE, AUTHORIZE,")
        say("           EXECUTE, RECORD, RESPOND and is journaled before the agent sees its result.")
        result = runtime.run(support.agent, TICKET)
        record = load_run(store, result.run_id)
        describer = Describer()
        for entry in record.entries:
            doc = store.get_payload(entry.payload) if entry.payload else None
            say(f"     {entry.i:>2}  {describer(entry, doc)}")
        say(f"   -> run {result.run_id}: {result.outcome}, fingerprint {result.fingerprint}")
        say("      (the refund was DENIED by the policy: amount_cents above its max of 5000)\n")

        say("2. RETRIEVE  the stored response, from the journal alone (no agent code, no model):")
        retrieved = runtime.retrieve(result.run_id)
        same = retrieved.output == result.output and retrieved.fingerprint == result.fingerprint
        say(f"   -> output and fingerprint identical: {same}\n")

        say("3. REPLAY  the agent's code again, every effect answered from the journal; each request")
        say("           must match the recorded one in kind, name and canonical arguments:")
        replay = runtime.replay(result.run_id)
        say(f"   -> matched: {replay.matched}, fingerprint {replay.replayed_fingerprint}\n")

        say("4. VERIFY  every hash and chain link of the run, then of the whole store:")
        run_check = verify_run(store, result.run_id)
        store_check = verify_store(store)
        say(f"   -> run: {'OK' if run_check.ok else 'FAILED'} ({run_check.entries} entries), "
            f"store: {'OK' if store_check.ok else 'FAILED'} ({store_check.entries} entries)\n")
        ok = result.ok and same and replay.matched and run_check.ok and store_check.ok
        report = {
            "ok": ok,
            "run": result.to_dict(),
            "retrieved_identical": same,
            "replay": replay.to_dict(),
            "verify_run": run_check.to_dict(),
            "verify_store": store_check.to_dict(),
        }
        say("Try next:")
        say(f"  tracelock show {result.run_id} --payloads --store {shown}")
        say(f"  tracelock log --store {shown}")
        say(f"  tracelock verify --store {shown} --json")
    finally:
        runtime.close()
        store.close()
    if as_json:
        print_json(report)
    if not report.get("ok"):
        sys.exit(EXIT_CHECK_FAILED)


COMMANDS = [demo_command]
