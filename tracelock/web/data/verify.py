"""Verification for people: the latest signed checkpoint and which pinned key signed it,
one run's chain and Merkle inclusion, and "verify now" over the whole store.

Every verdict is the verification service's (:mod:`tracelock.evidence.store_verdict`), the
one ``tracelock verify`` and ``tracelock prove`` print: ``store_verdict`` for "verify now",
``run_proof_verdict`` for a run's inclusion proofs, beside ``verify_run`` for its chain and
``open_note`` for a checkpoint's signature, on either backend (a PostgreSQL store keeps its
checkpoint history in a table: ``CheckpointHistory.of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracelock.errors import EvidenceError
from tracelock.evidence.history import CheckpointHistory, StoredCheckpoint
from tracelock.evidence.note import (
    NoteSignatureInvalidError,
    NoteUntrustedError,
    NoteVerifier,
    open_note,
)
from tracelock.evidence.store_verdict import checkpoints_line, run_proof_verdict, store_verdict
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
    verdict = run_proof_verdict(store, run_id, latest.number)
    proof.proofs = [
        {"seq": p["seq"], "i": p["i"], "kind": p["kind"], "hashes": len(p["proof"]), "verified": p["verified"]}
        for p in verdict.document["proofs"]
    ]
    proof.uncovered = list(verdict.document["uncovered"])
    proof.error = verdict.document["error"]
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
    verdict = store_verdict(store, pins)
    report = verdict.document
    failure = None
    if verdict.failures:
        first = verdict.failures[0]
        where = f"seq {first.seq}" + (f", run {first.run}" if first.run else "")
        failure = f"[{first.code}] at {where}: {first.message}"
    summary = (
        f"{report['entries']} entries, {report['payloads']} payloads ({report['redacted']} redacted), {report['runs']} runs: "
        + ("every hash and chain link checks" if verdict.ok else "FAILED")
    )
    checkpoint = dict(report["checkpoint"])
    return StoreVerdict(
        ok=verdict.ok,
        report={key: value for key, value in report.items() if key != "checkpoint"},
        checkpoint=checkpoint | {"describe": checkpoints_line(verdict)},
        summary=summary,
        failure=failure,
    )
