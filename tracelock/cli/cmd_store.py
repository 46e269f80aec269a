"""Commands that read the store: ``log``, ``show``, ``store copy`` and ``store info``."""

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
from tracelock.evidence.history import CheckpointHistory
from tracelock.runtime.queue.backends import close_queue, existing_queue, queue_for
from tracelock.runtime.records import readable_payload
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
from tracelock.storage.open import open_store
from tracelock.storage.queue_backend import QueueBackend, QueueRow


def format_ts(ms: int) -> str:
    """Milliseconds since the epoch as an ISO 8601 UTC timestamp."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def open_for_reading(store_path: Path) -> Store:
    return open_store(store_path, create=False, read_only=True)


def _repairs_note(store: Store) -> list[dict[str, Any]]:
    repairs = [repair.to_dict() for repair in store.repairs]
    for repair in repairs:
        click.echo(
            f"note: repaired on open: {repair['what']} ({repair['length']} bytes at byte "
            f"{repair['offset']}, saved to {repair['saved_to']})",
            err=True,
        )
    return repairs


def _damage_warning(store: Store) -> dict[str, Any] | None:
    """Warn (on stderr) when the open stopped at damage in a directory store's journal (what
    a writer refuses to open with, ``JOURNAL_CORRUPT``): what is shown is read up to it
    only. Returns the damage for ``--json`` (None when there is none)."""
    damage = store.damage
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
    return store.backend


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


COMMANDS = [log_command, show_command, store_group]
