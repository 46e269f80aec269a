"""Verification of a whole store against its own signed checkpoints (``verify --store``).

One pass over the journal (``tracelock.storage.verify.verify_store``) checks every hash and
chain rule and, on the way, computes the Merkle root at the size of every checkpoint of the
history and at the journal's full size, in O(log n) memory. Then:

* **integrity**: each checkpoint's size is at most the journal's entry count, and its root is
  the root of the journal's first ``size`` entries (a journal that grew since is fine; one
  that is shorter was truncated, one with another root was rewritten);
* **the history** is one log: every checkpoint names the first one's origin, no checkpoint
  covers fewer entries than the one before it, and the consistency proof stored with each
  checkpoint after the first names that pair of checkpoints and proves it (RFC 9162
  2.1.4.2); any other history was edited (``EVIDENCE_CHECKPOINT_HISTORY``);
* **trust** (only with pinned keys): the newest checkpoint's note carries a valid signature by
  a pinned key; an older checkpoint signed by a pinned key must verify too. A store with no
  checkpoint has nothing signed to trust (``EVIDENCE_CHECKPOINT_NOT_FOUND``);
* **the Merkle node files** (a cache of the tree): every stored node must be the node the
  journal gives. One that differs is reported as tampering of that cache
  (``STORE_MERKLE_TAMPERED``), never rebuilt silently;
* **the index** (``index.sqlite``, another cache): compared with the journal during the same
  pass (``tracelock.storage.verify``); one that contradicts it is ``STORE_INDEX_TAMPERED``,
  reported last (the journal and the checkpoints are judged first), never rebuilt silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from tracelock.core.entry import ChainIssue
from tracelock.core.merkle import verify_consistency
from tracelock.errors import EvidenceError, ProofError
from tracelock.evidence.checkpoint import Checkpoint
from tracelock.evidence.history import (
    CheckpointHistory,
    CheckpointNotFoundError,
    StoredCheckpoint,
    open_merkle_cache,
    rebuild_advice,
)
from tracelock.evidence.note import (
    NoteSignatureInvalidError,
    NoteUntrustedError,
    NoteVerifier,
    open_note,
)
from tracelock.evidence.verify import PinnedKey
from tracelock.storage.backend import Store
from tracelock.storage.merkle_stream import MerkleStream, StoredNodes
from tracelock.storage.verify import INDEX_TAMPERED, VerifyReport, verify_store

__all__ = [
    "CHECKPOINT_HISTORY",
    "CHECKPOINT_INCONSISTENT",
    "CHECKPOINT_TRUNCATED",
    "MERKLE_TAMPERED",
    "CheckpointVerdict",
    "verify_store_checkpoints",
]

#: Issue codes of a store verification that reads the checkpoint history.
CHECKPOINT_INCONSISTENT = "EVIDENCE_CHECKPOINT_INCONSISTENT"
CHECKPOINT_TRUNCATED = "EVIDENCE_CHECKPOINT_TRUNCATED"
CHECKPOINT_HISTORY = "EVIDENCE_CHECKPOINT_HISTORY"
MERKLE_TAMPERED = "STORE_MERKLE_TAMPERED"

#: ``trust`` values: signed by a pinned key; roots checked without a pinned key; nothing to check.
PINNED = "pinned_key"
INTEGRITY_ONLY = "integrity_only"
NO_CHECKPOINT = "no_checkpoint"


@dataclass
class CheckpointVerdict:
    """What a store verification did with the checkpoint history, and what it found."""

    trust: str = NO_CHECKPOINT
    checked: list[int] = field(default_factory=list)
    newest: StoredCheckpoint | None = None
    signed_by: list[dict[str, Any]] = field(default_factory=list)
    merkle_cache: str = "absent"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trust": self.trust,
            "checked": list(self.checked),
            "newest": None if self.newest is None else self.newest.to_dict(),
            "signed_by": list(self.signed_by),
            "merkle_cache": self.merkle_cache,
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        """One line for people: which checkpoint was checked, and with which key."""
        if self.newest is None:
            return "checkpoint: none present (only the hash chains were checked)"
        cp = self.newest
        head = (
            f"checkpoint {cp.number} ({cp.origin}, size {cp.size})"
            + (f" and {len(self.checked) - 1} older" if len(self.checked) > 1 else "")
        )
        if len(self.checked) != cp.number or (self.trust == PINNED and not self.signed_by):
            return f"{head}: not accepted (see the failure)"
        if self.trust == PINNED:
            keys = ", ".join(f"{s['name']} {s['fingerprint']}" for s in self.signed_by)
            return f"{head}: roots match the journal; signed by pinned key {keys}"
        if self.trust == INTEGRITY_ONLY:
            return (
                f"{head}: roots match the journal (integrity only: no key pinned, the "
                "signature was not checked; pass --key to check it)"
            )
        return f"{head}: not checked"


def _fail(report: VerifyReport, code: str, seq: int, message: str) -> None:
    report.issue = ChainIssue(code, seq, None, message)


def _open_cache(store: Store, verdict: CheckpointVerdict) -> StoredNodes | None:
    tree, problem = open_merkle_cache(store)
    if problem is not None:
        verdict.merkle_cache = "unusable"
        verdict.notes.append(f"Merkle node files unusable, to be rebuilt: {problem}")
    elif tree is not None:
        verdict.merkle_cache = "checked"
    return tree


def verify_store_checkpoints(
    store: Store,
    pins: Sequence[PinnedKey] = (),
    *,
    origin: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[VerifyReport, CheckpointVerdict]:
    """Verify the journal, then the checkpoint history and the Merkle node files against
    it. The report's ``issue`` is the first failure: the journal's own, else a checkpoint's
    (integrity, then trust), else the node files'."""
    verdict = CheckpointVerdict()
    history = CheckpointHistory.of(store)
    checkpoints: list[StoredCheckpoint] = []
    history_problem: EvidenceError | None = None
    try:
        checkpoints = [history.load(number) for number in history.numbers()]
    except EvidenceError as exc:
        history_problem = exc
    cache = _open_cache(store, verdict)
    try:
        stream = MerkleStream([cp.size for cp in checkpoints], cache)
        report = verify_store(store, progress=progress, merkle=stream, compare_index=True)
    finally:
        if cache is not None:
            cache.close()
    # A contradicting index is reported after the checkpoints: the journal itself passed.
    index_issue = report.issue if report.issue is not None and report.issue.code == INDEX_TAMPERED else None
    if index_issue is not None:
        report.issue = None
    if history_problem is not None:
        verdict.trust = INTEGRITY_ONLY if not pins else PINNED
        if report.ok:
            _fail(report, CHECKPOINT_HISTORY, report.entries, history_problem.message)
        if report.ok:
            report.issue = index_issue
        return report, verdict
    if checkpoints:
        verdict.newest = checkpoints[-1]
        verdict.trust = PINNED if pins else INTEGRITY_ONLY
    if not report.ok:
        if checkpoints:
            verdict.notes.append("the checkpoints were not compared: the journal itself failed")
        return report, verdict
    if _check_roots(report, verdict, checkpoints, stream) and _check_history(report, history, checkpoints) and pins:
        _check_trust(report, verdict, checkpoints, pins, origin)
    if report.ok and stream.mismatch is not None:
        bad = stream.mismatch
        verdict.merkle_cache = "tampered"
        signed = checkpoints[-1].size if checkpoints else 0
        why = (
            "the journal matches the signed checkpoints there, so the node files were altered"
            if bad.last_leaf < signed
            else "no signed checkpoint covers these entries, so either the node files were "
            "altered or the journal was rewritten after they were built"
        )
        _fail(
            report,
            MERKLE_TAMPERED,
            bad.first_leaf,
            f"the Merkle nodes (a cache) disagree with the journal: stored node "
            f"{bad.index} of level {bad.level} (entries {bad.first_leaf}-{bad.last_leaf}) is "
            f"not the one the journal gives; {why}. They are not rebuilt silently: "
            f"{rebuild_advice(store)}",
        )
    if report.ok and index_issue is not None:
        report.issue = index_issue
    return report, verdict


def _check_roots(
    report: VerifyReport,
    verdict: CheckpointVerdict,
    checkpoints: list[StoredCheckpoint],
    stream: MerkleStream,
) -> bool:
    """Integrity: every checkpoint against the journal, newest first (the newest covers the
    most: a truncation shows there first)."""
    for cp in reversed(checkpoints):
        if cp.size > report.entries:
            _fail(
                report,
                CHECKPOINT_TRUNCATED,
                report.entries,
                f"the journal has {report.entries} entries but checkpoint {cp.number} "
                f"({cp.origin}) covers {cp.size}: entries {report.entries}-{cp.size - 1} were "
                "deleted or the journal truncated since it was signed",
            )
            return False
        actual = stream.roots[cp.size]
        if actual != cp.root:
            _fail(
                report,
                CHECKPOINT_INCONSISTENT,
                max(cp.size - 1, 0),
                f"the journal does not match checkpoint {cp.number} ({cp.origin}, size "
                f"{cp.size}): its first {cp.size} entries have root "
                f"{Checkpoint(cp.origin, cp.size, actual).root_base64}, the checkpoint signed "
                f"{cp.checkpoint.root_base64} (entries were changed, or the chain rewritten, "
                "since it was signed)",
            )
            return False
        verdict.checked.append(cp.number)
    verdict.checked.sort()
    return True


def _check_history(
    report: VerifyReport, history: CheckpointHistory, checkpoints: list[StoredCheckpoint]
) -> bool:
    """The history is one log that only grows: each checkpoint after the first names the
    same origin, covers at least as many entries as the one before it, and has its stored
    consistency proof from that one. (Each root was compared with the journal already: a
    checkpoint copied from an older one matches it, and only its place in the history
    tells.)"""
    for previous, cp in pairwise(checkpoints):
        problem: str | None = None
        if cp.origin != previous.origin:
            problem = (
                f"checkpoint {cp.number} is for the log {cp.origin!r}, checkpoint "
                f"{previous.number} for {previous.origin!r}: a history is one log"
            )
        elif cp.size < previous.size:
            problem = (
                f"checkpoint {cp.number} covers {cp.size} entries, fewer than the {previous.size} "
                f"of checkpoint {previous.number} before it: a log only grows, so a checkpoint "
                "of the history was replaced, copied or reordered"
            )
        else:
            problem = _proof_problem(history, previous, cp)
        if problem is not None:
            _fail(report, CHECKPOINT_HISTORY, cp.size, f"the checkpoint history in {history.where}: {problem}")
            return False
    return True


def _proof_problem(history: CheckpointHistory, previous: StoredCheckpoint, cp: StoredCheckpoint) -> str | None:
    """What is wrong with the consistency proof stored with checkpoint ``cp`` (from
    ``previous``), or None when it proves ``cp`` an extension of ``previous``."""
    try:
        record = history.consistency(cp.number)
    except EvidenceError as exc:
        return exc.message
    if record is None:
        return f"the consistency proof of checkpoint {cp.number} (from checkpoint {previous.number}) is missing"
    ends = {
        "from": {"number": previous.number, "size": previous.size, "root": previous.root.hex()},
        "to": {"number": cp.number, "size": cp.size, "root": cp.root.hex()},
    }
    if {side: record.get(side) for side in ends} != ends:
        return (
            f"the consistency proof stored with checkpoint {cp.number} is not the one from "
            f"checkpoint {previous.number} (size {previous.size}) to checkpoint {cp.number} "
            f"(size {cp.size}): it names {record.get('from')!r} to {record.get('to')!r}"
        )
    nodes = record.get("proof")
    if not isinstance(nodes, list) or not all(isinstance(n, str) and _is_hash(n) for n in nodes):
        return f"the consistency proof of checkpoint {cp.number} is not a list of 32-byte hashes"
    proof = [bytes.fromhex(node) for node in nodes]
    if previous.size == 0:  # nothing to prove from the empty tree: the proof is empty
        return None if not proof else f"the consistency proof of checkpoint {cp.number} from the empty tree is not empty"
    try:
        verify_consistency(previous.size, cp.size, proof, previous.root, cp.root)
    except ProofError as exc:
        return (
            f"the consistency proof stored with checkpoint {cp.number} does not prove it an "
            f"extension of checkpoint {previous.number} ({exc.message})"
        )
    return None


def _is_hash(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _check_trust(
    report: VerifyReport,
    verdict: CheckpointVerdict,
    checkpoints: list[StoredCheckpoint],
    pins: Sequence[PinnedKey],
    origin: str | None,
) -> None:
    """Trust: the newest checkpoint is signed by a pinned key (and names ``origin``); a
    pinned key's signature on any checkpoint verifies. Without a checkpoint nothing is
    signed: trust fails (``EVIDENCE_CHECKPOINT_NOT_FOUND``)."""
    if not checkpoints:
        _fail(
            report,
            CheckpointNotFoundError.code,
            report.entries,
            "the store has no checkpoint, so no key signed anything of it and the pinned key "
            "cannot be checked (only the hash chains were); sign one with `tracelock "
            "checkpoint --key KEY`",
        )
        return
    newest = checkpoints[-1]
    if origin is not None and newest.origin != origin:
        _fail(
            report,
            "EVIDENCE_CHECKPOINT_ORIGIN_MISMATCH",
            newest.size,
            f"checkpoint {newest.number} is for the log {newest.origin!r}, expected {origin!r}",
        )
        return
    for cp in reversed(checkpoints):
        verifiers: list[NoteVerifier] = []
        for pin in pins:
            try:
                verifiers.append(pin.verifier(cp.origin))
            except EvidenceError:
                continue  # an origin that is not a valid key name matches no pin
        try:
            note = open_note(cp.note, verifiers)
        except NoteSignatureInvalidError as exc:
            _fail(
                report,
                exc.code,
                cp.size,
                f"checkpoint {cp.number}: {exc.message}: the checkpoint file was altered after "
                "it was signed",
            )
            return
        except NoteUntrustedError as exc:
            if cp is newest:
                pinned = ", ".join(
                    f"{pin.name or '*'} {pin.public_key.fingerprint()[:16]}" for pin in pins
                )
                _fail(
                    report,
                    exc.code,
                    cp.size,
                    f"checkpoint {cp.number} is not signed by a pinned key ({exc.message}; "
                    f"pinned: {pinned})",
                )
                return
            verdict.notes.append(f"checkpoint {cp.number} is not signed by a pinned key")
            continue
        if cp is newest:
            for signature in note.signatures:
                match = next(
                    p
                    for p in pins
                    if (p.name or cp.origin) == signature.name
                    and p.public_key.key_id(signature.name) == signature.key_id
                )
                verdict.signed_by.append(
                    {
                        "name": signature.name,
                        "key_id": f"{signature.key_id:08x}",
                        "fingerprint": match.public_key.fingerprint(),
                        "source": match.source,
                    }
                )
