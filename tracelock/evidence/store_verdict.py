"""Verifying a store, one run of it, and its proofs: ``tracelock verify [RUN]`` and
``tracelock prove``, the web UI's verification page and the MCP server's ``verify_*`` tools.

* :func:`store_verdict`: every hash and chain link of the store, its signed checkpoints
  (roots; with pinned keys, signatures) and its caches
  (:func:`tracelock.evidence.store_verify.verify_store_checkpoints`);
* :func:`run_verdict`: one run's chain and payloads
  (:func:`tracelock.storage.verify.verify_run`), then its fingerprint recomputed from the
  stored entries (:mod:`tracelock.evidence.run_fingerprint`);
* :func:`run_proof_verdict`: the inclusion proof of each of a run's entries against a
  checkpoint; :func:`consistency_verdict`: the consistency proof between two checkpoints.

Each returns a :class:`Verdict`: ``ok``, every failed check, the JSON document and the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tracelock.core.entry import ChainIssue
from tracelock.core.merkle import leaf_hash, verify_consistency, verify_inclusion
from tracelock.errors import ProofError, UsageError
from tracelock.evidence.history import CheckpointHistory, rebuild_advice
from tracelock.evidence.proofs import CACHE_ALTERED, JOURNAL_CHANGED, judge_tree_mismatch
from tracelock.evidence.run_fingerprint import FingerprintCheck, recompute_fingerprint
from tracelock.evidence.store_verify import verify_store_checkpoints
from tracelock.evidence.verdict import Verdict
from tracelock.evidence.verify import Failure, PinnedKey
from tracelock.storage.backend import Store
from tracelock.storage.verify import VerifyReport, verify_run

__all__ = [
    "checkpoints_line",
    "consistency_verdict",
    "fingerprint_line",
    "run_proof_verdict",
    "run_verdict",
    "store_verdict",
]

#: Issue codes of a store verification that are about the checkpoints, and about the caches.
_CHECKPOINT_PREFIX = "EVIDENCE_CHECKPOINT_"
_CACHE_CODES = frozenset({"STORE_MERKLE_TAMPERED", "STORE_INDEX_TAMPERED"})


def _issue_failure(issue: ChainIssue, entries_check: str) -> Failure:
    """The failed check a store or run verification's issue is: the checkpoints', the
    caches', or the entries' own (``entries_check``)."""
    if issue.code.startswith(_CHECKPOINT_PREFIX):
        check = "checkpoint"
    elif issue.code in _CACHE_CODES:
        check = "store.cache"
    else:
        check = entries_check
    return Failure(check, issue.message, run=issue.run, seq=issue.seq, code=issue.code)


def _report_line(report: VerifyReport) -> str:
    if report.ok:
        return (
            f"OK: {report.scope}: {report.entries} entries, {report.payloads} payloads, "
            f"{report.redacted} redacted, every hash and chain link checks"
        )
    assert report.issue is not None
    issue = report.issue
    where = f"seq {issue.seq}" + (f", run {issue.run}" if issue.run else "")
    return f"FAILED: {report.scope}: [{issue.code}] at {where}: {issue.message}"


def store_verdict(
    store: Store,
    pins: Sequence[PinnedKey] = (),
    *,
    origin: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Verdict:
    """Every entry and payload of the store, then its signed checkpoints and its caches."""
    report, checkpoints = verify_store_checkpoints(store, pins, origin=origin, progress=progress)
    if progress is not None:
        progress(report.entries)
    document = report.to_dict() | {"checkpoint": checkpoints.to_dict()}
    lines = [_report_line(report), checkpoints.describe()]
    lines.extend(f"note: {note}" for note in checkpoints.notes)
    lines.extend(f"note: {note}" for note in report.notes)
    failures = [_issue_failure(report.issue, "store.entries")] if report.issue is not None else []
    return Verdict(report.ok, document, lines, failures)


def checkpoints_line(verdict: Verdict) -> str:
    """The line of a :func:`store_verdict` that says which checkpoints were checked, and
    with which key (its second line, after the entries' own)."""
    return verdict.lines[1]


def run_verdict(store: Store, run_id: str) -> Verdict:
    """One run's chain, payloads and steps, then (when they hold) its fingerprint
    recomputed from the stored entries (spec 5.4), as for a bundle."""
    report = verify_run(store, run_id)
    check = recompute_fingerprint(store, run_id) if report.ok else None
    document = report.to_dict()
    lines = [_report_line(report)]
    failures = [_issue_failure(report.issue, "run.chain")] if report.issue is not None else []
    fingerprint_failed = False
    if check is not None:
        document["fingerprint"] = check.to_dict()
        fingerprint_failed = not check.ok
        document["ok"] = bool(document.get("ok", report.ok)) and not fingerprint_failed
        lines.append(fingerprint_line(check))
        if fingerprint_failed:
            failures.append(Failure("fingerprint.mismatch", fingerprint_line(check), run=run_id))
    lines.extend(f"note: {note}" for note in report.notes)
    return Verdict(report.ok and not fingerprint_failed, document, lines, failures)


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


def run_proof_verdict(store: Store, run_id: str, number: int | None = None) -> Verdict:
    """The inclusion proof of each entry of ``run_id`` against checkpoint ``number`` (the
    latest by default), each checked against the checkpoint's signed root."""
    stored = CheckpointHistory.of(store).get(number)
    entries = store.entries(run_id)
    document: dict[str, Any] = {
        "ok": True,
        "run": run_id,
        "checkpoint": stored.to_dict() | {"note": stored.note},
        "proofs": [],
        "uncovered": [],
        "error": None,
    }
    failures: list[Failure] = []
    if store.tree_size() < stored.size or store.tree_root(stored.size) != stored.root:
        wrong, message = judge_tree_mismatch(store, stored.number, stored.size, stored.root)
        document.update(ok=False, error=message, wrong=wrong)
        failures.append(Failure("checkpoint.root", message))
    else:
        for entry in entries:
            if entry.seq >= stored.size:
                document["uncovered"].append(entry.seq)
                failures.append(
                    Failure(
                        "entry.covered", f"after checkpoint {stored.number} (size {stored.size})",
                        run=run_id, i=entry.i, seq=entry.seq,
                    )
                )
                continue
            proof = store.inclusion_proof(entry.seq, stored.size)
            leaf = leaf_hash(entry.line)
            try:
                verify_inclusion(entry.seq, stored.size, leaf, proof, stored.root)
                verified = True
            except ProofError as exc:
                verified = False
                document["ok"] = False
                failures.append(
                    Failure("entry.inclusion", exc.message, run=run_id, i=entry.i, seq=entry.seq, code=exc.code)
                )
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
    return Verdict(bool(document["ok"]), document, _run_proof_lines(document), failures)


def _run_proof_lines(document: dict[str, Any]) -> list[str]:
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
    return lines


def consistency_verdict(store: Store, old_number: int, new_number: int) -> Verdict:
    """The consistency proof from checkpoint ``old_number`` to ``new_number``, checked
    against both signed roots; when it fails, which side is wrong (the journal, or the
    Merkle node files the proof was made from)."""
    history = CheckpointHistory.of(store)
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
    failures: list[Failure] = []

    def verdict() -> Verdict:
        if document["error"]:
            failures.append(Failure("checkpoint.consistency", str(document["error"])))
        return Verdict(bool(document["ok"]), document, _consistency_lines(document), failures)

    if old.origin != new.origin:
        document.update(ok=False, error=f"different logs: {old.origin!r} and {new.origin!r}")
        return verdict()
    if old.size > new.size:
        document.update(ok=False, error=f"checkpoint {old_number} is larger than checkpoint {new_number}")
        return verdict()
    if store.tree_size() < new.size:
        wrong, message = judge_tree_mismatch(store, new.number, new.size, new.root)
        document.update(ok=False, error=message, wrong=wrong)
        return verdict()
    proof = store.consistency_proof(old.size, new.size) if 0 < old.size < new.size else []
    document["proof"] = [node.hex() for node in proof]
    if old.size == 0:
        return verdict()
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
    return verdict()


def _consistency_lines(document: dict[str, Any]) -> list[str]:
    old, new = document["old"], document["new"]
    verdict = "OK" if document["ok"] else f"FAILED: {document.get('error')}"
    lines = [
        f"consistency of checkpoint {old['number']} (size {old['size']}) with checkpoint "
        f"{new['number']} (size {new['size']}): {verdict}"
    ]
    lines.extend(f"  {node}" for node in document["proof"])
    return lines
