"""Verification for people: the latest signed checkpoint and which pinned key signed it,
one run's chain and Merkle inclusion, and "verify now" over the whole store.

Every check is the library's own: ``verify_store_checkpoints`` (what ``tracelock verify``
runs on a store), ``verify_run``, the store's inclusion proofs checked with
``verify_inclusion`` against the checkpoint's signed root (what ``tracelock prove``
prints), ``open_note`` for a checkpoint's signature, on either backend (a PostgreSQL store
keeps its checkpoint history in a table: ``CheckpointHistory.of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracelock.core.merkle import leaf_hash, verify_inclusion
from tracelock.errors import EvidenceError, ProofError
from tracelock.evidence.history import CheckpointHistory, StoredCheckpoint
from tracelock.evidence.note import (
    NoteSignatureInvalidError,
    NoteUntrustedError,
    NoteVerifier,
    open_note,
)
from tracelock.evidence.store_verify import verify_store_checkpoints
from tracelock.evidence.verify import PinnedKey
from tracelock.storage.backend import Store
from tracelock.storage.errors import RunNotFoundError
from tracelock.storage.verify import verify_run
from tracelock.web.data.run import check_run_id
from tracelock.web.errors import UiNotFoundError

__all__ = ["CheckpointStatus", "RunProof", "StoreVerdict", "checkpoint_status", "prove_run", "verify_now"]


@dataclass
class CheckpointStatus:
    """The latest checkpoint and whether a pinned key signed it."""

    checkpoint: StoredCheckpoint | None = None
    count: int = 0
    #: ``"pinned"`` (a pinned key's signature verifies), ``"untrusted"`` (no pinned key
    #: signed it), ``"invalid"`` (a pinned key's signature does not verify),
    #: ``"no_pins"`` (nothing to check it against), ``"none"`` (no checkpoint).
    signature: str = "none"
    signed_by: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    tree_size: int = 0


def _verifiers(pins: Sequence[PinnedKey], origin: str) -> list[NoteVerifier]:
    verifiers = []
    for pin in pins:
        try:
            verifiers.append(pin.verifier(origin))
        except EvidenceError:
            continue  # an origin that is not a valid key name matches no pin
    return verifiers


def checkpoint_status(store: Store, pins: Sequence[PinnedKey]) -> CheckpointStatus:
    """The latest checkpoint and its signature against the pinned keys."""
    try:
        history = CheckpointHistory.of(store)
        numbers = history.numbers()
        latest = history.latest()
    except EvidenceError as exc:
        return CheckpointStatus(signature="invalid", message=f"[{exc.code}] {exc.message}")
    status = CheckpointStatus(checkpoint=latest, count=len(numbers), tree_size=store.size())
    if latest is None:
        status.message = "no checkpoint yet: sign one with `tracelock checkpoint`"
        return status
    if not pins:
        status.signature = "no_pins"
        status.message = "no key is pinned (start the UI with --key PUBLIC_KEY to check who signed)"
        return status
    try:
        note = open_note(latest.note, _verifiers(pins, latest.origin))
    except NoteSignatureInvalidError as exc:
        status.signature = "invalid"
        status.message = f"[{exc.code}] {exc.message}: the checkpoint file was altered after it was signed"
        return status
    except NoteUntrustedError as exc:
        status.signature = "untrusted"
        status.message = f"[{exc.code}] not signed by a pinned key: {exc.message}"
        return status
    status.signature = "pinned"
    for signature in note.signatures:
        for pin in pins:
            if (pin.name or latest.origin) == signature.name and pin.public_key.key_id(signature.name) == signature.key_id:
                status.signed_by.append(
                    {"name": signature.name, "key_id": f"{signature.key_id:08x}", "fingerprint": pin.public_key.fingerprint(), "source": pin.source}
                )
                break
    return status


@dataclass
class RunProof:
    """One run's chain check and each entry's inclusion in the latest checkpoint."""

    run: str
    chain_ok: bool
    chain_issue: dict[str, Any] | None
    checkpoint: StoredCheckpoint | None
    proofs: list[dict[str, Any]] = field(default_factory=list)
    uncovered: list[int] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.chain_ok and self.error is None and not self.uncovered and all(p["verified"] for p in self.proofs)


def prove_run(store: Store, run_id: str) -> RunProof:
    """The chain of ``run_id`` and the inclusion proof of each of its entries."""
    check_run_id(run_id)
    try:
        report = verify_run(store, run_id)
        entries = store.entries(run_id)
    except RunNotFoundError:
        raise UiNotFoundError(f"no run {run_id!r} in this store", details={"run": run_id}) from None
    latest = CheckpointHistory.of(store).latest()
    proof = RunProof(
        run=run_id,
        chain_ok=report.ok,
        chain_issue=None if report.issue is None else report.issue.to_dict(),
        checkpoint=latest,
    )
    if latest is None:
        proof.error = "no checkpoint to prove inclusion against: sign one with `tracelock checkpoint`"
        return proof
    if store.tree_size() < latest.size or store.tree_root(latest.size) != latest.root:
        proof.error = (
            f"the journal's first {latest.size} entries do not have the root checkpoint {latest.number} signed: "
            "run `tracelock verify` for the details"
        )
        return proof
    for entry in entries:
        if entry.seq >= latest.size:
            proof.uncovered.append(entry.seq)
            continue
        path = store.inclusion_proof(entry.seq, latest.size)
        try:
            verify_inclusion(entry.seq, latest.size, leaf_hash(entry.line), path, latest.root)
            verified = True
        except ProofError:
            verified = False
        proof.proofs.append({"seq": entry.seq, "i": entry.i, "kind": entry.kind, "hashes": len(path), "verified": verified})
    return proof


@dataclass
class StoreVerdict:
    """The verdict of "verify now": green when ``ok``; else what failed, where."""

    ok: bool
    report: dict[str, Any]
    checkpoint: dict[str, Any]
    summary: str
    failure: str | None


def verify_now(store: Store, pins: Sequence[PinnedKey]) -> StoreVerdict:
    """Every hash and chain link of the store, its checkpoints' roots and (with pinned
    keys) signatures, and its caches: ``tracelock verify`` over the store."""
    report, verdict = verify_store_checkpoints(store, pins)
    failure = None
    if report.issue is not None:
        issue = report.issue
        where = f"seq {issue.seq}" + (f", run {issue.run}" if issue.run else "")
        failure = f"[{issue.code}] at {where}: {issue.message}"
    summary = (
        f"{report.entries} entries, {report.payloads} payloads ({report.redacted} redacted), {report.runs} runs: "
        + ("every hash and chain link checks" if report.ok else "FAILED")
    )
    return StoreVerdict(
        ok=report.ok,
        report=report.to_dict(),
        checkpoint=verdict.to_dict() | {"describe": verdict.describe()},
        summary=summary,
        failure=failure,
    )
