"""Evidence commands: ``checkpoint``, ``prove``, ``export``, ``redact`` (``verify`` is
``cmd_verify``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from tracelock.cli.common import (
    EXIT_CHECK_FAILED,
    emit,
    json_option,
    reports_errors,
    store_option,
)
from tracelock.cli.progress import Progress
from tracelock.errors import UsageError
from tracelock.evidence.bundle import export_bundle
from tracelock.evidence.history import (
    DEFAULT_KEY_NAME,
    CheckpointHistory,
    SigningKey,
    StoredCheckpoint,
    load_signing_key,
)
from tracelock.evidence.redaction import parse_step, redact
from tracelock.evidence.store_verdict import consistency_verdict, run_proof_verdict
from tracelock.storage.backend import Store
from tracelock.storage.open import open_store


def _signing_key(path: Path | None, *, required: bool) -> SigningKey | None:
    if path is None:
        env = os.environ.get("TRACELOCK_KEY")
        if env:
            path = Path(env)
        elif Path(f"{DEFAULT_KEY_NAME}.key").is_file() and required:
            path = Path(f"{DEFAULT_KEY_NAME}.key")
        elif required:
            raise UsageError(
                "no signing key: pass --key PRIVATE_KEY (or set TRACELOCK_KEY); create one "
                "with `tracelock keys generate`"
            )
        else:
            return None
    return load_signing_key(path)


def _open_reader(store_path: Path) -> Store:
    """The store, read-only as far as its journal goes: the evidence commands add only
    checkpoints (and the Merkle cache), which every backend keeps beside the journal."""
    return open_store(store_path, create=False, read_only=True)


def _checkpoint_text(stored: StoredCheckpoint) -> list[str]:
    return [
        f"  origin  {stored.origin}",
        f"  size    {stored.size}",
        f"  root    {stored.checkpoint.root_base64}",
    ]


# ---------------------------------------------------------------------------------------
# checkpoint


@click.command("checkpoint")
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Private key file (default: $TRACELOCK_KEY, else ./tracelock.key).",
)
@click.option("--origin", default=None, help="Log name (only for the store's first checkpoint; default: the key's name).")
@store_option
@json_option
@reports_errors
def checkpoint_command(key_path: Path | None, origin: str | None, store_path: Path, as_json: bool) -> None:
    """Sign the store's current tree size and root as a checkpoint (C2SP signed note).

    The new checkpoint is proved consistent with the previous one first; a journal that was
    rewritten since (not an extension of the last checkpoint) is refused."""
    key = _signing_key(key_path, required=True)
    assert key is not None
    with _open_reader(store_path) as store:
        history = CheckpointHistory.of(store)
        previous = history.latest()
        stored, created = history.sign(store, key, origin=origin)
        consistency = history.consistency(stored.number) if created else None
        note_file = history.file(stored)
        kept = (
            f"file    {note_file}" if note_file is not None else f"row     {history.place(stored)} in {store.location}"
        )
    document: dict[str, Any] = {
        "ok": True,
        "created": created,
        "checkpoint": stored.to_dict() | {"note": stored.note},
        "previous": previous.to_dict() if previous is not None and created else None,
        "consistency_proof": consistency["proof"] if consistency else None,
    }

    def text() -> str:
        head = (
            f"signed checkpoint {stored.number}" if created
            else f"checkpoint {stored.number} is current (the journal has not grown)"
        )
        lines = [head, *_checkpoint_text(stored), f"  {kept}"]
        if created and previous is not None:
            lines.append(
                f"  consistent with checkpoint {previous.number} (size {previous.size}): proof of "
                f"{len(consistency['proof']) if consistency else 0} hashes stored"
            )
        return "\n".join(lines)

    emit(as_json, document, text)


# ---------------------------------------------------------------------------------------
# prove


@click.command("prove")
@click.argument("run_id", required=False)
@click.option(
    "--consistency",
    nargs=2,
    type=click.IntRange(min=1),
    default=None,
    metavar="OLD NEW",
    help="Prove checkpoint NEW consistent with checkpoint OLD (checkpoint numbers).",
)
@click.option("--checkpoint", "number", type=click.IntRange(min=1), default=None, help="Checkpoint number (default: the latest).")
@store_option
@json_option
@reports_errors
def prove_command(
    run_id: str | None,
    consistency: tuple[int, int] | None,
    number: int | None,
    store_path: Path,
    as_json: bool,
) -> None:
    """Print inclusion proofs of a run's entries against the latest checkpoint, or with
    --consistency OLD NEW the consistency proof between two checkpoints. Exit 1 when an
    entry is not covered or a proof does not verify."""
    if (run_id is None) == (consistency is None):
        raise UsageError("give a RUN_ID, or --consistency OLD NEW")
    with _open_reader(store_path) as store:
        if consistency is not None:
            verdict = consistency_verdict(store, *consistency)
        else:
            assert run_id is not None
            verdict = run_proof_verdict(store, run_id, number)
    emit(as_json, verdict.document, verdict.text)
    if not verdict.ok:
        sys.exit(EXIT_CHECK_FAILED)


# ---------------------------------------------------------------------------------------
# export


@click.command("export")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("-o", "--out", "out", required=True, type=click.Path(path_type=Path), help="Bundle to write: a directory, or a .zip or .tar file.")
@click.option("--checkpoint", "number", type=click.IntRange(min=1), default=None, help="Prove against this checkpoint (default: the latest).")
@click.option("--key", "key_path", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Sign a new checkpoint first when the latest does not cover the runs.")
@click.option("--origin", default=None, help="Origin for that new checkpoint (first checkpoint only).")
@click.option("--allow-open", is_flag=True, help="Also export runs that have not ended.")
@store_option
@json_option
@reports_errors
def export_command(
    run_ids: tuple[str, ...],
    out: Path,
    number: int | None,
    key_path: Path | None,
    origin: str | None,
    allow_open: bool,
    store_path: Path,
    as_json: bool,
) -> None:
    """Write an evidence bundle of RUN_ID... that verifies offline (`tracelock verify`)."""
    key = _signing_key(key_path, required=False) if key_path is not None else None
    with _open_reader(store_path) as store, Progress("export", "runs", len(set(run_ids))) as bar:
        result = export_bundle(
            store, run_ids, out, checkpoint=number, key=key, origin=origin, allow_open=allow_open,
            progress=bar.update,
        )
    document = result.to_dict()

    def text() -> str:
        cp = result.checkpoint
        lines = [
            f"wrote {result.kind} bundle {result.path}: {len(document['runs'])} run(s), "
            f"{document['entries']} entries, {document['payloads']} payloads, "
            f"{len(document['redacted'])} redacted, {document['bytes']} bytes",
            f"  proved against checkpoint {cp.number} ({cp.origin}, size {cp.size})"
            + (" (signed now)" if result.signed_checkpoint else ""),
        ]
        lines.extend(
            f"  run {run['run']}: {run['status']}, {run['entries']} entries" for run in document["runs"]
        )
        lines.append(f"verify it with: tracelock verify {result.path} --key <signer's .vkey or .pub>")
        return "\n".join(lines)

    emit(as_json, document, text)


# ---------------------------------------------------------------------------------------
# redact


@click.command("redact")
@click.argument("run_id")
@click.argument("step")
@click.option("--field", "fields", multiple=True, help="Redact only this top-level member of the payload (repeatable), e.g. args, result, input, output.")
@click.option("--by", "by", required=True, help="Who redacts (recorded).")
@click.option("--reason", required=True, help="Why (recorded).")
@store_option
@json_option
@reports_errors
def redact_command(
    run_id: str,
    step: str,
    fields: tuple[str, ...],
    by: str,
    reason: str,
    store_path: Path,
    as_json: bool,
) -> None:
    """Remove the payload of STEP of RUN_ID from the store and from future bundles.

    STEP is a step number (its effect, or its intent and result), `start` (the run's input
    document) or `end` (its output document). The removal is recorded first as a
    payload.redact entry (who, why) in the store's admin chain; verification still passes
    and reports the entry as redacted. With --field, only that member is replaced by a
    marker holding its hash, and the rest stays readable. Payloads are content-addressed:
    identical bytes referenced by other entries or runs are redacted there too."""
    target = parse_step(step)
    with open_store(store_path, create=False) as store:
        result = redact(store, run_id, target, by=by, reason=reason, fields=fields)
    document = result.to_dict()

    def text() -> str:
        lines = [
            f"redacted {len(result.redactions)} payload(s) of run {run_id} step {step}"
            + (f" (fields: {', '.join(fields)})" if fields else " (whole payloads)")
        ]
        for item in result.redactions:
            lines.append(
                f"  entry {item['i']} ({item['kind']}) payload {item['payload'][:16]}... -> "
                f"payload.redact entry seq {item['redaction_seq']}, by {by}: {reason}"
            )
        others = [
            a for a in result.affected
            if not any(a["run"] == r["run"] and a["i"] == r["i"] for r in result.redactions)
        ]
        if others:
            lines.append(
                "note: payloads are content-addressed; the same bytes were also referenced by "
                + ", ".join(f"run {a['run']} entry {a['i']}" for a in others[:10])
                + (f" and {len(others) - 10} more" if len(others) > 10 else "")
                + ": they are redacted there too"
            )
        lines.append("sign a new checkpoint (`tracelock checkpoint`) before exporting bundles")
        return "\n".join(lines)

    emit(as_json, document, text)


COMMANDS = [checkpoint_command, prove_command, export_command, redact_command]
