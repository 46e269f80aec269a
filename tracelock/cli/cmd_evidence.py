"""Evidence commands: ``checkpoint``, ``prove``, ``export``, ``redact``; and the bundle half
of ``verify`` (``verify BUNDLE --key PUBKEY``, dispatched from ``cmd_store``)."""

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
from tracelock.core.merkle import leaf_hash, verify_consistency, verify_inclusion
from tracelock.errors import ProofError, UsageError
from tracelock.evidence.bundle import export_bundle, read_bundle_files
from tracelock.evidence.history import (
    DEFAULT_KEY_NAME,
    CheckpointHistory,
    SigningKey,
    StoredCheckpoint,
    load_signing_key,
    rebuild_advice,
)
from tracelock.evidence.proofs import CACHE_ALTERED, JOURNAL_CHANGED, judge_tree_mismatch
from tracelock.evidence.redaction import parse_step, redact
from tracelock.evidence.verify import BundleReport, Failure, load_pinned_keys, verify_bundle
from tracelock.storage.backend import Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.open import open_store
from tracelock.storage.postgres import PostgresStore


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


def _open_reader(store_path: Path) -> DirectoryStore | PostgresStore:
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
        history = CheckpointHistory.of(store)
        if consistency is not None:
            document = _prove_consistency(store, history, *consistency)
        else:
            assert run_id is not None
            document = _prove_run(store, history, run_id, number)
    if consistency is not None:

        def text() -> str:
            old, new = document["old"], document["new"]
            verdict = "OK" if document["ok"] else f"FAILED: {document.get('error')}"
            lines = [
                f"consistency of checkpoint {old['number']} (size {old['size']}) with checkpoint "
                f"{new['number']} (size {new['size']}): {verdict}"
            ]
            lines.extend(f"  {node}" for node in document["proof"])
            return "\n".join(lines)

    else:

        def text() -> str:
            cp = document["checkpoint"]
            lines = [
                f"run {document['run']}: {len(document['proofs'])} inclusion proofs against checkpoint "
                f"{cp['number']} ({cp['origin']}, size {cp['size']})"
            ]
            for proof in document["proofs"]:
                lines.append(
                    f"  entry {proof['i']:>4} seq {proof['seq']:>8} {proof['kind']:<16} "
                    f"{len(proof['proof'])} hashes  {'ok' if proof['verified'] else 'FAILED'}"
                )
            if document["uncovered"]:
                lines.append(
                    f"NOT COVERED: entries with seq {document['uncovered']} are after the checkpoint; "
                    "run `tracelock checkpoint`"
                )
            if document.get("error"):
                lines.append(f"FAILED: {document['error']}")
            return "\n".join(lines)

    emit(as_json, document, text)
    if not document["ok"]:
        sys.exit(EXIT_CHECK_FAILED)


def _prove_run(
    store: Store, history: CheckpointHistory, run_id: str, number: int | None
) -> dict[str, Any]:
    stored = history.get(number)
    entries = store.entries(run_id)
    document: dict[str, Any] = {
        "ok": True,
        "run": run_id,
        "checkpoint": stored.to_dict() | {"note": stored.note},
        "proofs": [],
        "uncovered": [],
        "error": None,
    }
    if store.tree_size() < stored.size or store.tree_root(stored.size) != stored.root:
        wrong, message = judge_tree_mismatch(store, stored.number, stored.size, stored.root)
        document.update(ok=False, error=message, wrong=wrong)
        return document
    for entry in entries:
        if entry.seq >= stored.size:
            document["uncovered"].append(entry.seq)
            continue
        proof = store.inclusion_proof(entry.seq, stored.size)
        leaf = leaf_hash(entry.line)
        try:
            verify_inclusion(entry.seq, stored.size, leaf, proof, stored.root)
            verified = True
        except ProofError:
            verified = False
            document["ok"] = False
        document["proofs"].append(
            {
                "seq": entry.seq,
                "i": entry.i,
                "kind": entry.kind,
                "hash": entry.hash,
                "leaf_hash": leaf.hex(),
                "proof": [node.hex() for node in proof],
                "verified": verified,
            }
        )
    if document["uncovered"]:
        document["ok"] = False
    return document


def _prove_consistency(
    store: Store, history: CheckpointHistory, old_number: int, new_number: int
) -> dict[str, Any]:
    if old_number > new_number:
        raise UsageError("--consistency OLD NEW: OLD must not be after NEW")
    old, new = history.load(old_number), history.load(new_number)
    document: dict[str, Any] = {
        "ok": True,
        "old": old.to_dict(),
        "new": new.to_dict(),
        "proof": [],
        "error": None,
    }
    if old.origin != new.origin:
        document.update(ok=False, error=f"different logs: {old.origin!r} and {new.origin!r}")
        return document
    if old.size > new.size:
        document.update(ok=False, error=f"checkpoint {old_number} is larger than checkpoint {new_number}")
        return document
    if store.tree_size() < new.size:
        wrong, message = judge_tree_mismatch(store, new.number, new.size, new.root)
        document.update(ok=False, error=message, wrong=wrong)
        return document
    proof = store.consistency_proof(old.size, new.size) if 0 < old.size < new.size else []
    document["proof"] = [node.hex() for node in proof]
    if old.size == 0:
        return document
    try:
        verify_consistency(old.size, new.size, proof, old.root, new.root)
    except ProofError as exc:
        document.update(ok=False, error=f"[{exc.code}] {exc.message}")
        # Which side: each checkpoint against the journal itself.
        for checkpoint in (new, old):
            wrong, message = judge_tree_mismatch(store, checkpoint.number, checkpoint.size, checkpoint.root)
            if wrong == JOURNAL_CHANGED:
                break
        else:
            wrong, message = CACHE_ALTERED, (
                "the journal itself matches both checkpoints, so the proof made from the "
                "store's Merkle node files (a cache) is what is wrong: they were altered; "
                + rebuild_advice(store)
            )
        document.update(error=f"[{exc.code}] {exc.message}; {message}", wrong=wrong)
    return document


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


# ---------------------------------------------------------------------------------------
# verify BUNDLE


def _report_text(report: BundleReport) -> str:
    lines = [
        f"bundle {report.source} ({report.kind}): {len(report.runs)} run(s), {report.entries} "
        f"entries, {report.payloads} payloads, {report.redacted} redacted"
    ]
    if report.checkpoint:
        cp = report.checkpoint
        lines.append(f"checkpoint: {cp['origin']}, size {cp['size']}, root {cp['root']}")
    integrity = report.failures_of("integrity")
    if report.integrity_ok:
        lines.append(
            "integrity: OK (manifest, entry hashes, chain links, inclusion proofs, payload "
            "hashes and fingerprints all agree)"
        )
    else:
        lines.append(f"integrity: FAILED ({report.counts.get('integrity', 0)} problem(s))")
        lines.extend(_failure_line(f) for f in integrity)
    trust = report.failures_of("trust")
    if report.trust_ok:
        signers = ", ".join(
            f"{t['name']} {t['key_id']}" + (f" ({t['source']})" if t.get("source") else "")
            for t in report.trusted_by
        )
        lines.append(f"trust: OK (signed by pinned key {signers})")
    else:
        lines.append("trust: FAILED")
        lines.extend(_failure_line(f) for f in trust)
        if not trust:
            lines.append("  the checkpoint could not be checked against the pinned keys")
    for run in report.runs:
        fp = run.fingerprint_status
        detail = {
            "match": f"fingerprint {run.fingerprint} recomputed: match",
            "mismatch": f"fingerprint MISMATCH (recorded {run.fingerprint}, recomputed {run.recomputed})",
            "redacted": f"fingerprint {run.fingerprint or '?'}: {run.fingerprint_detail}",
            "not_ended": "not ended: no fingerprint",
            "unavailable": "fingerprint not checked (see failures)",
        }.get(fp, fp)
        lines.append(f"run {run.run}: {run.status}, {run.entries} entries, {detail}")
        for item in run.redacted:
            fields = f" (fields: {', '.join(item['fields'])})" if item.get("fields") else ""
            by = f" by {item['by']}: {item['reason']}" if item.get("by") else ""
            lines.append(
                f"  redacted: entry {item['i']} ({item['kind']}) payload {str(item['payload'])[:16]}..."
                f"{fields}, redaction entry seq {item['redactions']}{by}"
            )
    for result in report.replay:
        verdict = "matched" if result.get("matched") else (result.get("error") or "DIVERGED")
        lines.append(f"replay {result['run']}: {verdict}")
        produced = result.get("provenance")
        if isinstance(produced, dict):
            from tracelock.runtime.provenance.record import describe_differences

            lines.extend(f"  {line}" for line in describe_differences(produced))
        divergence = result.get("divergence")
        if divergence:
            lines.append(f"  {divergence.get('message')}")
    lines.extend(f"note: {note}" for note in report.notes)
    if report.dropped:
        lines.append(f"({report.dropped} more failures not listed)")
    lines.append("RESULT: " + ("OK" if report.ok else "FAILED (" + ", ".join(report.checks_failed()) + ")"))
    return "\n".join(lines)


def _failure_line(failure: Failure) -> str:
    where = failure.where()
    code = f" ({failure.code})" if failure.code else ""
    return f"  [{failure.check}] {where + ': ' if where else ''}{failure.message}{code}"


def verify_bundle_target(
    target: Path,
    *,
    keys: tuple[str, ...],
    origin: str | None,
    allow_open: bool,
    replay: str | None,
    runs: tuple[str, ...],
    as_json: bool,
    strict_environment: bool = False,
) -> None:
    """``tracelock verify BUNDLE``: check a bundle offline against pinned keys; exit 1 when
    any check fails (integrity, trust or replay)."""
    if not keys:
        raise UsageError(
            "verifying a bundle needs the signer's public key, pinned: --key FILE "
            "(.vkey, .pub or hex); a key carried inside a bundle is never trusted"
        )
    if target.is_dir() and (target / "store.json").is_file() and not (target / "manifest.json").exists():
        raise UsageError(
            f"{target} is a store, not a bundle: verify a store with `tracelock verify --store {target}`"
        )
    pins = load_pinned_keys(keys)
    files = read_bundle_files(target)
    with Progress("verify bundle", "checks") as bar:
        report = verify_bundle(files, pins, origin=origin, allow_open=allow_open, required_runs=runs, progress=bar.update)
    if replay is not None:
        if report.integrity_ok:
            from tracelock.cli.loading import import_agent
            from tracelock.evidence.bundle_replay import replay_bundle

            func, toolkits = import_agent(replay)
            with Progress("replay bundle", "runs") as replayed:
                for result in replay_bundle(files, func, toolkits=toolkits):
                    report.replay.append(result)
                    replayed.update(len(report.replay))
                    engine = (result.get("provenance") or {}).get("engine")
                    if strict_environment and engine:
                        report.fail(
                            Failure(
                                "replay.environment",
                                "recorded under another engine or environment: "
                                + ", ".join(f"{item['field']} {item['recorded']} (now {item['current']})" for item in engine),
                                run=result["run"],
                            )
                        )
                    if not result["matched"]:
                        divergence = result.get("divergence") or {}
                        report.fail(
                            Failure(
                                "replay.error" if result.get("error") else "replay.diverged",
                                result.get("error") or str(divergence.get("message")),
                                run=result["run"],
                            )
                        )
        else:
            report.notes.append("replay skipped: the bundle failed integrity checks")
    emit(as_json, report.to_dict(), lambda: _report_text(report))
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


COMMANDS = [checkpoint_command, prove_command, export_command, redact_command]
