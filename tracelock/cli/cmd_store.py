"""Commands that read the store: ``log``, ``show``, ``verify``."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import click

from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    emit,
    json_option,
    json_text,
    reports_errors,
    store_option,
)
from tracelock.cli.describe import Describer, table
from tracelock.cli.progress import Progress
from tracelock.core.entry import Entry
from tracelock.errors import UsageError
from tracelock.evidence.history import CheckpointHistory
from tracelock.evidence.store_verify import CheckpointVerdict, verify_store_checkpoints
from tracelock.evidence.verify import load_pinned_keys
from tracelock.runtime.queue.backends import close_queue, existing_queue, queue_for
from tracelock.runtime.records import readable_payload
from tracelock.runtime.replay.recompute import FingerprintCheck, recompute_fingerprint
from tracelock.runtime.runs.lifecycle import TERMINAL_STATES
from tracelock.storage.backend import RunInfo, Store
from tracelock.storage.copy import (
    CopyReport,
    ReplayClock,
    copy_store,
    queue_rows,
    refuse_destination,
    verify_copy,
)
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.open import open_store
from tracelock.storage.postgres import PostgresStore
from tracelock.storage.queue_backend import QueueBackend, QueueRow
from tracelock.storage.verify import verify_run


def format_ts(ms: int) -> str:
    """Milliseconds since the epoch as an ISO 8601 UTC timestamp."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def open_for_reading(store_path: Path) -> DirectoryStore | PostgresStore:
    return open_store(store_path, create=False, read_only=True)


def _repairs_note(store: DirectoryStore | PostgresStore) -> list[dict[str, Any]]:
    repairs = [repair.to_dict() for repair in store.repairs]
    for repair in repairs:
        click.echo(
            f"note: repaired on open: {repair['what']} ({repair['length']} bytes at byte "
            f"{repair['offset']}, saved to {repair['saved_to']})",
            err=True,
        )
    return repairs


def _damage_warning(store: DirectoryStore | PostgresStore) -> dict[str, Any] | None:
    """Warn (on stderr) when the open stopped at damage in a directory store's journal (what
    a writer refuses to open with, ``JOURNAL_CORRUPT``): what is shown is read up to it
    only. Returns the damage for ``--json`` (None when there is none)."""
    damage = store.damage if isinstance(store, DirectoryStore) else None
    if damage is None:
        return None
    click.echo(
        f"warning: [{damage.code}] the store is damaged: {damage.message}. Shown is what the "
        "journal holds before the damage: a run whose status is marked '?' had not ended "
        "there, and may have gone on, or ended, in the damaged part",
        err=True,
    )
    return damage.to_dict()


def _uncertain(run: RunInfo, damage: dict[str, Any] | None) -> bool:
    """Whether ``run``'s status may be out of date: it had not ended where the damage starts."""
    return damage is not None and run.status not in TERMINAL_STATES


@click.command("log")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show at most N runs.")
@click.option("--status", default=None, help="Only runs in this state.")
@store_option
@json_option
@reports_errors
def log_command(limit: int | None, status: str | None, store_path: Path, as_json: bool) -> None:
    """List runs, newest first, with status, agent and start time."""
    with open_for_reading(store_path) as store:
        repairs = _repairs_note(store)
        damage = _damage_warning(store)
        runs = store.runs(limit=limit, status=status)
    document = {
        "ok": True,
        "runs": [run.to_dict() | ({"status_uncertain": True} if _uncertain(run, damage) else {}) for run in runs],
        "repairs": repairs,
        "damage": damage,
    }

    def text() -> str:
        if not runs:
            return "no runs"
        rows = [
            [run.run, run.status + ("?" if _uncertain(run, damage) else ""), run.agent or "-",
             format_ts(run.started_ts), str(run.entries)]
            for run in runs
        ]
        return "\n".join(table(["RUN", "STATUS", "AGENT", "STARTED", "ENTRIES"], rows))

    emit(as_json, document, text)


@click.command("show")
@click.argument("run_id")
@click.option("--payloads", is_flag=True, help="Include each entry's payload.")
@store_option
@json_option
@reports_errors
def show_command(run_id: str, payloads: bool, store_path: Path, as_json: bool) -> None:
    """Show a run's entries as a timeline."""
    with open_for_reading(store_path) as store:
        _repairs_note(store)
        damage = _damage_warning(store)
        info = store.run_info(run_id)
        entries = store.entries(run_id)
        bodies: dict[str, Any] = {}
        for entry in entries:
            if entry.payload and entry.payload not in bodies:
                # A field redaction's readable copy stands in for the payload (so a redacted
                # step still reads as the step it was); a wholly redacted one is a marker.
                bodies[entry.payload] = readable_payload(store, entry.payload)[1]
    describer = Describer()
    summaries = [describer(entry, bodies.get(entry.payload or "")) for entry in entries]
    uncertain = _uncertain(info, damage)
    document: dict[str, Any] = {
        "ok": True,
        "run": info.to_dict() | ({"status_uncertain": True} if uncertain else {}),
        "damage": damage,
        "entries": [
            dict(entry.to_dict(), hash=entry.hash, summary=summary)
            | ({"payload_value": bodies.get(entry.payload)} if payloads and entry.payload else {})
            | _traceback_of(entry, bodies)
            for entry, summary in zip(entries, summaries, strict=True)
        ],
    }

    def text() -> str:
        lines = [
            f"run {info.run}  status={info.status}{'?' if uncertain else ''}  agent={info.agent or '-'}  "
            f"started={format_ts(info.started_ts)}  entries={info.entries}"
        ]
        for entry, summary in zip(entries, summaries, strict=True):
            lines.append(f"{entry.i:>4}  {format_ts(entry.ts)}  {summary}")
            trace = _traceback_of(entry, bodies).get("traceback")
            if trace:
                lines.extend("        " + line for line in trace.rstrip("\n").splitlines())
            if payloads and entry.payload:
                lines.append(f"        {json_text(bodies.get(entry.payload))}")
        return "\n".join(lines)

    emit(as_json, document, text)


def _traceback_of(entry: Entry, bodies: dict[str, Any]) -> dict[str, str]:
    """``{"traceback": text}`` for a ``run.traceback`` entry whose payload is readable."""
    doc = bodies.get(entry.payload or "") if entry.kind == "run.traceback" else None
    trace = doc.get("traceback") if isinstance(doc, dict) else None
    return {"traceback": trace} if isinstance(trace, str) else {}


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
        from tracelock.cli.cmd_evidence import verify_bundle_target

        verify_bundle_target(
            Path(target), keys=keys, origin=origin, allow_open=allow_open, replay=replay,
            runs=runs, as_json=as_json, strict_environment=strict_environment,
        )
        return
    if allow_open or runs or replay or (target is not None and (keys or origin)):
        raise UsageError(f"no bundle at {target}" if target else "give the bundle to verify")
    run_id = target
    verdict: CheckpointVerdict | None = None
    fingerprint_check: FingerprintCheck | None = None
    pins = load_pinned_keys(keys) if keys else []
    with open_for_reading(store_path) as store:
        repairs = _repairs_note(store)
        if run_id is None:
            with Progress("verify", "entries", store.size()) as bar:
                report, verdict = verify_store_checkpoints(store, pins, origin=origin, progress=bar.update)
                bar.update(report.entries)
        else:
            report = verify_run(store, run_id)
            # The fingerprint recomputed from the stored entries (spec 5.4), as for a bundle.
            fingerprint_check = recompute_fingerprint(store, run_id) if report.ok else None
    document = report.to_dict() | {"repairs": repairs}
    if verdict is not None:
        document["checkpoint"] = verdict.to_dict()
    fingerprint_failed = False
    if run_id is not None and fingerprint_check is not None:
        document["fingerprint"] = fingerprint_check.to_dict()
        fingerprint_failed = not fingerprint_check.ok
        document["ok"] = bool(document.get("ok", report.ok)) and not fingerprint_failed

    def text() -> str:
        lines = []
        if report.ok:
            lines.append(
                f"OK: {report.scope}: {report.entries} entries, {report.payloads} payloads, "
                f"{report.redacted} redacted, every hash and chain link checks"
            )
        else:
            assert report.issue is not None
            issue = report.issue
            where = f"seq {issue.seq}" + (f", run {issue.run}" if issue.run else "")
            lines.append(f"FAILED: {report.scope}: [{issue.code}] at {where}: {issue.message}")
        if verdict is not None:
            lines.append(verdict.describe())
            lines.extend(f"note: {note}" for note in verdict.notes)
        if run_id is not None and fingerprint_check is not None:
            lines.append(fingerprint_line(fingerprint_check))
        lines.extend(f"note: {note}" for note in report.notes)
        return "\n".join(lines)

    emit(as_json, document, text)
    if not report.ok or fingerprint_failed:
        sys.exit(EXIT_CHECK_FAILED)


def fingerprint_line(check: FingerprintCheck) -> str:
    """How ``verify RUN`` reports the recomputed fingerprint."""
    if check.status == "match":
        return f"fingerprint {check.recorded} recomputed from the entries: match"
    if check.status == "mismatch":
        return (
            f"FAILED: fingerprint MISMATCH: run.end records {check.recorded}, the entries give "
            f"{check.recomputed or '(none)'}" + (f" ({check.detail})" if check.detail else "")
        )
    return f"fingerprint {check.recorded or '?'}: {check.detail}"


@click.group("store")
def store_group() -> None:
    """Operations on a whole store."""


@store_group.command("copy")
@click.argument("source")
@click.argument("destination")
@json_option
@reports_errors
def store_copy_command(source: str, destination: str, as_json: bool) -> None:
    """Copy the store at SOURCE into the new or empty store at DESTINATION (a directory or
    postgresql:// URL each), entry by entry with payloads (redacted ones stay redacted), its
    run queue's rows and its signed checkpoint history, then verify the copy: entries,
    payloads, runs, the Merkle root, the queue rows and each checkpoint's root. A source
    with leased runs (workers running) is refused before anything is written. Exit 1 if
    they differ."""
    clock = ReplayClock()
    with open_store(source, create=False, read_only=True) as src:
        try:
            # Read (and refused, if leased) before the destination is even created.
            source_queue = existing_queue(src)
            rows = queue_rows(source_queue, src.location)
            with open_store(destination, clock=clock) as dst:
                try:
                    report = _copy(src, dst, clock, source_queue, rows)
                finally:
                    close_queue(dst)
                where = {"source": src.location, "destination": dst.location}
        finally:
            close_queue(src)
    document = report.to_dict() | where

    def text() -> str:
        verdict = "OK" if report.ok else "FAILED"
        lines = [
            f"{verdict}: copied {report.entries} entries of {report.runs} runs, {report.payloads} payloads "
            f"({report.redacted} redacted) from {where['source']} to {where['destination']}",
            _queue_line(report),
            f"checkpoint history: {report.checkpoints} checkpoint{'' if report.checkpoints == 1 else 's'} copied",
            f"source root {report.source_root}",
            f"copy root   {report.copy_root}",
        ]
        lines.extend(f"mismatch: {line}" for line in report.mismatches)
        return "\n".join(lines)

    emit(as_json, document, text)
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@store_group.command("info")
@store_option
@json_option
@reports_errors
def store_info_command(store_path: Path, as_json: bool) -> None:
    """How many runs and entries the store holds, and what it takes on disk by part (per
    run too). For a directory store: its format and index versions, and how much of the
    journal is sealed into compressed segments (docs/spec.md 3.8)."""
    with open_for_reading(store_path) as store:
        footprint = store.footprint()
        document = {"store": store.location, "backend": _backend_name(store), **footprint.to_dict()}
    emit(as_json, document, lambda: _info_text(document))


def _backend_name(store: Store) -> str:
    return "postgresql" if isinstance(store, PostgresStore) else "directory"


def _size(count: int) -> str:
    """Bytes for people: 512 B, 1.3 KiB, 4.0 MiB, 2.1 GiB."""
    if count < 1024:
        return f"{count} B"
    for unit in ("KiB", "MiB", "GiB"):
        count_in = count / 1024
        if count_in < 1024 or unit == "GiB":
            return f"{count_in:.1f} {unit}"
        count = int(count_in)
    raise AssertionError("unreachable")


def _info_text(document: dict[str, Any]) -> str:
    sizes = document["bytes"]
    parts = ", ".join(f"{name} {_size(size)}" for name, size in sizes.items() if name != "total" and size)
    if document["backend"] == "directory":
        versions = f"store format {document['format_version']}, index schema {document['index_schema']}"
    else:
        versions = f"schema {document['schema_version']}"
    lines = [
        f"store {document['store']} ({document['backend']}, {versions})",
        f"runs: {document['runs']:,} ({document['open_runs']:,} open); entries: {document['entries']:,}",
        f"on disk: {_size(sizes['total'])}" + (f": {parts}" if parts else ""),
    ]
    if document["bytes_per_run"] is not None:
        lines.append(f"per run: {_size(document['bytes_per_run'])}")
    if document["backend"] == "directory":
        segments = document["segment_files"]
        lines.append(
            f"journal: {document['journal_bytes']:,} bytes, of which {document['sealed_end']:,} sealed in "
            f"{segments} segment{'' if segments == 1 else 's'} and {document['unsealed_bytes']:,} not yet"
        )
        every = document["seal_every_bytes"]
        if every and document["unsealed_bytes"] > 2 * every:
            lines.append(
                f"note: more than twice {_size(every)} of durable journal lie past the last segment. A writer "
                "seals them on its next commits; if this persists, sealing fails (the writer logs why, "
                "as a warning of the tracelock.storage logger). Nothing is lost meanwhile."
            )
    return "\n".join(lines)


def _copy(
    src: Store, dst: Store, clock: ReplayClock, source_queue: QueueBackend | None, rows: list[QueueRow] | None
) -> CopyReport:
    """Refuse a destination that is not empty before writing anything, copy the entries,
    then the queue's ``rows`` (read before the source's size: see tracelock.storage.copy),
    then the checkpoint history as it was before the entries were (its checkpoints cover
    only entries the copy holds)."""
    refuse_destination(dst, existing_queue(dst))
    history = CheckpointHistory.of(src)
    signed = len(history.numbers())
    with Progress("copy", "entries", src.size()) as bar:
        total = copy_store(src, dst, clock, progress=bar.update)
    copy_queue = None
    if rows is not None:
        copy_queue = queue_for(dst)
        copy_queue.restore(rows)
    report = verify_copy(src, dst, total, queues=(source_queue, copy_queue))
    report.checkpoints, mismatches = history.copy_to(CheckpointHistory.of(dst), dst, signed)
    report.mismatches.extend(mismatches)
    return report


def _queue_line(report: CopyReport) -> str:
    if not report.queue_rows:
        return "run queue: no rows"
    states = ", ".join(f"{count} {state}" for state, count in sorted(report.queue_states.items()))
    rows = "1 row" if report.queue_rows == 1 else f"{report.queue_rows} rows"
    return f"run queue: {rows} copied ({states})"


COMMANDS = [log_command, show_command, verify_command, store_group]
