"""``tracelock verify``: a bundle offline, or a store (one run of it, or all of it).

A thin command over the verification service (:mod:`tracelock.evidence.bundle_verdict`,
:mod:`tracelock.evidence.store_verdict`): it reads the options, shows progress, prints the
verdict and exits 1 when a check failed. Verifying a bundle loads no storage backend and
no runtime (unless ``--replay`` re-executes an agent): the store half is imported only
when a store is verified.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracelock.cli.common import EXIT_CHECK_FAILED, emit, json_option, reports_errors, store_option
from tracelock.cli.progress import Progress
from tracelock.errors import UsageError
from tracelock.evidence.bundle_verdict import (
    bundle_verdict,
    read_bundle_target,
    replay_possible,
    replay_runs,
)
from tracelock.evidence.verdict import Verdict
from tracelock.evidence.verify import load_pinned_keys, verify_bundle

__all__ = ["COMMANDS", "verify_command"]


@click.command("verify")
@click.argument("target", required=False)
@click.option("--key", "keys", multiple=True, help="Bundle or store: pinned public key of the signer (.vkey, .pub or hex; repeatable).")
@click.option("--origin", default=None, help="Bundle or store: the log origin the checkpoint must name.")
@click.option("--allow-open", is_flag=True, help="Bundle: accept runs that have not ended.")
@click.option("--run", "runs", multiple=True, help="Bundle: a run that must be in it (repeatable).")
@click.option("--replay", default=None, metavar="MODULE:AGENT", help="Bundle: also re-execute the agent against its runs.")
@click.option(
    "--strict-environment",
    "strict_environment",
    is_flag=True,
    help="Bundle, with --replay: fail when a run was recorded under another engine or environment.",
)
@store_option
@json_option
@reports_errors
def verify_command(
    target: str | None,
    keys: tuple[str, ...],
    origin: str | None,
    allow_open: bool,
    runs: tuple[str, ...],
    replay: str | None,
    strict_environment: bool,
    store_path: Path,
    as_json: bool,
) -> None:
    """Verify a bundle offline (TARGET is an existing directory, .zip or .tar; needs --key),
    or recompute every hash of one run (TARGET is a run id) or of the whole store. The whole
    store is also checked against its signed checkpoints: their roots (integrity) and, with
    --key, their signatures (trust). Exit 1 on any failure."""
    if target is not None and Path(target).exists():
        verdict = _verify_bundle(Path(target), keys, origin, allow_open, runs, replay, strict_environment)
    else:
        if allow_open or runs or replay or (target is not None and (keys or origin)):
            raise UsageError(f"no bundle at {target}" if target else "give the bundle to verify")
        verdict = _verify_store(store_path, target, keys, origin)
    emit(as_json, verdict.document, verdict.text)
    if not verdict.ok:
        sys.exit(EXIT_CHECK_FAILED)


def _verify_bundle(
    target: Path,
    keys: tuple[str, ...],
    origin: str | None,
    allow_open: bool,
    runs: tuple[str, ...],
    replay: str | None,
    strict_environment: bool,
) -> Verdict:
    pins, files = read_bundle_target(target, keys)
    with Progress("verify bundle", "checks") as bar:
        report = verify_bundle(files, pins, origin=origin, allow_open=allow_open, required_runs=runs, progress=bar.update)
    if replay is not None and replay_possible(report):
        from tracelock.cli.loading import import_agent

        func, toolkits = import_agent(replay)
        with Progress("replay bundle", "runs") as replayed:
            replay_runs(report, files, func, toolkits, strict_environment=strict_environment, progress=replayed.update)
    return bundle_verdict(report)


def _verify_store(store_path: Path, run_id: str | None, keys: tuple[str, ...], origin: str | None) -> Verdict:
    from tracelock.cli.cmd_store import _repairs_note, open_for_reading
    from tracelock.evidence.store_verdict import run_verdict, store_verdict

    pins = load_pinned_keys(keys) if keys else []
    with open_for_reading(store_path) as store:
        repairs = _repairs_note(store)
        if run_id is None:
            with Progress("verify", "entries", store.size()) as bar:
                verdict = store_verdict(store, pins, origin=origin, progress=bar.update)
        else:
            verdict = run_verdict(store, run_id)
    verdict.document["repairs"] = repairs
    return verdict


COMMANDS = [verify_command]
