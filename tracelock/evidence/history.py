"""The checkpoint history of a store, and the signing of new checkpoints.

A store keeps the records where its backend keeps things (``Store.checkpoint_records()``,
:mod:`tracelock.storage.checkpoint_records`: note files inside a directory store, a
``tracelock_checkpoints`` table in PostgreSQL); numbering, signing and every check are the
same code, here. A new checkpoint is signed only after the store's tree is proved consistent
with the previous checkpoint (RFC 9162 2.1.4): a tree that is not (the journal was truncated
or rewritten) is refused, never signed. The stored proofs are checked by ``verify --store``
(``tracelock.evidence.store_verify``), and a history goes with its store's copy
(:meth:`CheckpointHistory.copy_to`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from tracelock.core.canonical import dumps, loads
from tracelock.core.merkle import verify_consistency
from tracelock.errors import EvidenceError, ProofError
from tracelock.evidence.checkpoint import Checkpoint, CheckpointOriginError, sign_checkpoint
from tracelock.evidence.keys import PrivateKey, load_private_key
from tracelock.evidence.note import NoteSigner, NoteVerifier, parse_note
from tracelock.storage.backend import Store
from tracelock.storage.checkpoint_records import CHECKPOINT_DIR, CheckpointRecords, recorded_keys
from tracelock.storage.errors import MerkleTreeTamperedError
from tracelock.storage.merkle_stream import MerkleStream, StoredNodes
from tracelock.storage.open import checkpoint_records_at
from tracelock.storage.verify import verify_store

__all__ = [
    "CHECKPOINT_DIR",
    "DEFAULT_KEY_NAME",
    "CheckpointHistory",
    "CheckpointHistoryError",
    "CheckpointInconsistentError",
    "CheckpointJournalInvalidError",
    "CheckpointNotFoundError",
    "Checkpointer",
    "SigningKey",
    "StoredCheckpoint",
    "load_signing_key",
    "open_merkle_cache",
    "rebuild_advice",
]

#: Key name (and so checkpoint origin) used when nothing else names the log.
DEFAULT_KEY_NAME = "tracelock"


class CheckpointNotFoundError(EvidenceError):
    """The store has no checkpoint (or none with the number asked for)."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_NOT_FOUND"


class CheckpointHistoryError(EvidenceError):
    """A file of the store's checkpoint history is unreadable or malformed."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_HISTORY"


class CheckpointJournalInvalidError(EvidenceError):
    """The journal fails verification: no checkpoint is signed over it."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_JOURNAL_INVALID"


class CheckpointInconsistentError(EvidenceError):
    """The store's tree is not an extension of a checkpoint: the journal was rewritten."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_INCONSISTENT"


@dataclass(frozen=True)
class StoredCheckpoint:
    """One checkpoint of the history: its number, parsed body and signed note text.

    The note is parsed but not verified here (the history is the store's own record);
    verifiers check it against pinned keys.
    """

    number: int
    checkpoint: Checkpoint
    note: str
    signers: tuple[tuple[str, int], ...]
    #: Where the history keeps it (the note file inside the store directory, or the row).
    place: str = ""

    @property
    def origin(self) -> str:
        return self.checkpoint.origin

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root

    @property
    def file_name(self) -> str:
        return f"{self.number:08d}.note"

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "origin": self.origin,
            "size": self.size,
            "root": self.root.hex(),
            "root_base64": self.checkpoint.root_base64,
            "file": self.place or f"{CHECKPOINT_DIR}/{self.file_name}",
            "note_sha256": hashlib.sha256(self.note.encode("utf-8")).hexdigest(),
            "signers": [{"name": name, "key_id": f"{key_id:08x}"} for name, key_id in self.signers],
        }


@dataclass(frozen=True)
class SigningKey:
    """A private key and the key name it was generated for (None when unknown)."""

    private_key: PrivateKey
    name: str | None = None


def load_signing_key(path: Path) -> SigningKey:
    """Read a private key file (0600 PKCS#8 PEM); its name comes from the ``.vkey`` file
    written beside it by ``tracelock keys generate``, when that file names the same key."""
    path = Path(path)
    private = load_private_key(path)
    name: str | None = None
    sibling = path.with_suffix(".vkey")
    if sibling.is_file():
        try:
            verifier = NoteVerifier.from_vkey(sibling.read_text("utf-8").strip())
        except (OSError, UnicodeDecodeError, EvidenceError):
            verifier = None
        if verifier is not None and verifier.public_key == private.public_key:
            name = verifier.name
    return SigningKey(private, name)




class CheckpointHistory:
    """The numbered, signed checkpoints of a store: ``<store>/checkpoints`` for a
    directory store (give its path, or the open store), the ``tracelock_checkpoints`` table
    for a PostgreSQL store (give the store)."""

    def __init__(self, store: str | os.PathLike[str] | Store) -> None:
        self._records: CheckpointRecords = (
            checkpoint_records_at(store) if isinstance(store, str | os.PathLike) else store.checkpoint_records()
        )

    @classmethod
    def of(cls, store: Store) -> CheckpointHistory:
        """The history of an open store, wherever its backend keeps it."""
        return cls(store)

    def file(self, stored: StoredCheckpoint) -> Path | None:
        """The file checkpoint ``stored``'s note is kept in (None: the backend keeps it in
        no file, e.g. a table row)."""
        return self._records.file(stored.number)

    @property
    def where(self) -> str:
        """Where the history is kept, for people."""
        return self._records.where

    def place(self, stored: StoredCheckpoint) -> str:
        """Where checkpoint ``stored`` is kept: a file inside the store, or a table row."""
        return stored.place or self._records.place(stored.number)

    # -- reading -------------------------------------------------------------------------
    def numbers(self) -> list[int]:
        """Checkpoint numbers present, ascending (they must run from 1 without gaps)."""
        found = self._records.numbers()
        for expected, number in enumerate(found, 1):
            if number != expected:
                raise CheckpointHistoryError(
                    f"the checkpoint history in {self.where} has a gap: checkpoint "
                    f"{expected} is missing",
                    details={"missing": expected},
                )
        return found

    def load(self, number: int) -> StoredCheckpoint:
        place = self._records.place(number)
        data = self._read(lambda: self._records.note(number))
        if data is None:
            raise CheckpointNotFoundError(
                f"no checkpoint {number} in {self.where}", details={"number": number}
            )
        try:
            text, signatures = parse_note(data)
            body = Checkpoint.from_body(text)
        except EvidenceError as exc:
            raise CheckpointHistoryError(
                f"{place} in {self.where} is not a signed checkpoint: {exc.message}",
                details={"file": place},
            ) from None
        return StoredCheckpoint(
            number,
            body,
            data.decode("utf-8"),
            tuple((sig.name, sig.key_id) for sig in signatures),
            place,
        )

    @staticmethod
    def _read(read: Callable[[], bytes | None]) -> bytes | None:
        try:
            return read()
        except OSError as exc:
            raise CheckpointHistoryError(f"cannot read {exc.filename}: {exc.strerror}") from None

    def _summaries(self) -> list[dict[str, Any]]:
        return [self.load(number).to_dict() for number in self.numbers()]

    def latest(self) -> StoredCheckpoint | None:
        numbers = self.numbers()
        return self.load(numbers[-1]) if numbers else None

    def get(self, number: int | None = None) -> StoredCheckpoint:
        """Checkpoint ``number``, or the latest one; raises when there is none."""
        if number is not None:
            return self.load(number)
        latest = self.latest()
        if latest is None:
            raise CheckpointNotFoundError(
                "the store has no checkpoint yet (run `tracelock checkpoint --key KEY`)",
            )
        return latest

    def consistency(self, number: int) -> dict[str, Any] | None:
        """The stored consistency proof from checkpoint ``number - 1`` to ``number``."""
        data = self._read(lambda: self._records.consistency(number))
        if data is None:
            return None
        try:
            doc = loads(data)
        except ValueError as exc:
            raise CheckpointHistoryError(
                f"the consistency proof of checkpoint {number} in {self.where} is unreadable: {exc}"
            ) from None
        if not isinstance(doc, dict):
            raise CheckpointHistoryError(
                f"the consistency proof of checkpoint {number} in {self.where} is not a proof document"
            )
        return doc

    def sign(
        self,
        store: Store,
        key: SigningKey | PrivateKey,
        *,
        origin: str | None = None,
        recheck: bool = True,
    ) -> tuple[StoredCheckpoint, bool]:
        """Sign the store's current tree size and root as the next checkpoint.

        The origin (which is also the key name in the note) is ``origin``, else that of the
        previous checkpoint, else the key's name, else :data:`DEFAULT_KEY_NAME`. A history is
        one log: an origin different from the previous checkpoint's is refused. Returns the
        checkpoint and whether it is new (when the tree has not grown and the previous
        checkpoint was signed by the same key, that one is returned).

        With ``recheck`` (the default) the journal is verified first, in one pass that also
        computes its Merkle root from the entries themselves: the root to sign and the
        previous checkpoint's are checked against that, not against the Merkle node files
        (a cache, which may be stale or altered) alone.
        """
        signing = key if isinstance(key, SigningKey) else SigningKey(key)
        with self._records.locked():
            size = store.tree_size()
            root = store.tree_root(size)
            last = self.latest()
            if recheck:
                self._recheck(store, last, size, root)
            chosen = origin or (last.origin if last else None) or signing.name or DEFAULT_KEY_NAME
            if last is not None and chosen != last.origin:
                raise CheckpointOriginError(
                    f"this store's checkpoints are for the log {last.origin!r}; refusing to "
                    f"sign one for {chosen!r}",
                    details={"origin": last.origin, "requested": chosen},
                )
            signer = NoteSigner(chosen, signing.private_key)
            proof: list[bytes] = []
            if last is not None:
                proof = self._prove_extension(store, last, size, root)
                if (
                    last.size == size
                    and last.root == root
                    and (signer.name, signer.key_id) in last.signers
                ):
                    return last, False
            body = Checkpoint(chosen, size, root)
            note = sign_checkpoint(body, signer)
            number = (last.number if last else 0) + 1
            consistency: bytes | None = None
            if last is not None:
                record = {
                    "from": {"number": last.number, "size": last.size, "root": last.root.hex()},
                    "to": {"number": number, "size": size, "root": root.hex()},
                    "proof": [node.hex() for node in proof],
                }
                consistency = dumps(record) + b"\n"
            stored = StoredCheckpoint(
                number, body, note, ((signer.name, signer.key_id),), self._records.place(number)
            )
            self._records.add(
                number, note.encode("utf-8"), consistency, [signer.verifier().vkey], stored.to_dict(), self._summaries
            )
            return stored, True

    def _recheck(
        self, store: Store, last: StoredCheckpoint | None, size: int, root: bytes
    ) -> None:
        """Verify the journal and compare its own root with the previous checkpoint's and
        with the one the Merkle cache gives (``size``, ``root``); raise on any difference."""
        cache, _ = open_merkle_cache(store)
        try:
            stream = MerkleStream([size, *([last.size] if last is not None else [])], cache)
            # The step rule is left out: a run that breaks it is a recorded fact, and the
            # log that holds it stays signable (verify reports the run).
            report = verify_store(store, merkle=stream, steps=False)
        finally:
            if cache is not None:
                cache.close()
        if report.issue is not None:
            issue = report.issue
            raise CheckpointJournalInvalidError(
                f"the journal fails verification ([{issue.code}] at seq {issue.seq}: "
                f"{issue.message}); refusing to sign",
                details={"issue": issue.to_dict()},
            )
        if last is not None:
            if report.entries < last.size:
                raise CheckpointInconsistentError(
                    f"the journal has {report.entries} entries but checkpoint {last.number} "
                    f"covers {last.size}: entries were removed since it was signed",
                    details={"checkpoint": last.number, "size": report.entries,
                             "checkpoint_size": last.size},
                )
            if stream.roots[last.size] != last.root:
                raise CheckpointInconsistentError(
                    f"the journal is not consistent with checkpoint {last.number} (size "
                    f"{last.size}): the root of its first {last.size} entries differs from the "
                    "signed one, so entries were rewritten since it was signed; refusing to sign",
                    details={"checkpoint": last.number},
                )
        if stream.mismatch is not None:
            bad = stream.mismatch
            raise MerkleTreeTamperedError(
                f"the Merkle nodes of {store.location} disagree with the journal: stored "
                f"node {bad.index} of level {bad.level} (entries {bad.first_leaf}-"
                f"{bad.last_leaf}) is not the one the journal gives; refusing to sign "
                f"({rebuild_advice(store)})",
                details={"level": bad.level, "index": bad.index},
            )
        # Other processes may append meanwhile (to either backend: the directory store's
        # writer lock is held per commit): the journal may have grown past ``size``.
        grown = report.entries < size
        if grown or stream.roots.get(size) != root:
            raise MerkleTreeTamperedError(
                f"the Merkle nodes of {store.location} disagree with the journal: they give "
                f"size {size} and root {root.hex()}, the journal {report.entries} and "
                f"{stream.root().hex()}; refusing to sign ({rebuild_advice(store)})",
                details={"size": size, "journal_size": report.entries},
            )

    def _prove_extension(
        self, store: Store, last: StoredCheckpoint, size: int, root: bytes
    ) -> list[bytes]:
        """The consistency proof from ``last`` to the store's tree, checked; raises
        :class:`CheckpointInconsistentError` when the journal no longer extends ``last``."""
        if size < last.size:
            raise CheckpointInconsistentError(
                f"the journal has {size} entries but checkpoint {last.number} covers "
                f"{last.size}: entries were removed since it was signed",
                details={"checkpoint": last.number, "size": size, "checkpoint_size": last.size},
            )
        if last.size == 0:
            return []
        proof = store.consistency_proof(last.size, size) if size > last.size else []
        try:
            verify_consistency(last.size, size, proof, last.root, root)
        except ProofError as exc:
            raise CheckpointInconsistentError(
                f"the journal is not consistent with checkpoint {last.number} (size "
                f"{last.size}): its first {last.size} entries were rewritten since it was "
                f"signed ({exc.message}); refusing to sign",
                details={"checkpoint": last.number, "proof_error": exc.code},
            ) from None
        return proof

    def copy_to(self, destination: CheckpointHistory, tree: Store, count: int) -> tuple[int, list[str]]:
        """Copy checkpoints 1 to ``count`` of this history into the empty ``destination``,
        the history of ``tree``, a copy of this history's store (``tracelock store copy``):
        each note, consistency proof and recorded signer keys as they are, once the
        checkpoint's root is found to be the root of the copy's first ``size`` entries.
        Returns how many were copied and what did not match (a checkpoint that does not
        match is not copied, nor any after it: a history has no gaps)."""
        copied = 0
        with destination._records.locked():
            if destination.numbers():
                return 0, [f"the destination already has a checkpoint history ({destination.where}); none was copied"]
            for number in range(1, count + 1):
                try:
                    stored = self.load(number)
                except EvidenceError as exc:
                    return copied, [f"{exc.message}: neither it nor a later checkpoint was copied"]
                if stored.size > tree.size() or tree.tree_root(stored.size) != stored.root:
                    return copied, [
                        f"checkpoint {number} (size {stored.size}) does not match the copy's first "
                        f"{stored.size} entries: neither it nor a later checkpoint was copied"
                    ]
                summary = replace(stored, place=destination._records.place(number)).to_dict()
                destination._records.add(
                    number,
                    stored.note.encode("utf-8"),
                    self._records.consistency(number),
                    self._records.vkeys(number),
                    summary,
                    destination._summaries,
                )
                copied += 1
        return copied, []

    def index(self) -> list[dict[str, Any]]:
        """One document per checkpoint: its :meth:`StoredCheckpoint.to_dict` and ``vkeys``
        (a directory store's ``index.jsonl``, rebuilt from the notes when they disagree)."""
        return self._records.index(self._summaries)

    def rebuild_index(self) -> None:
        """Rewrite a directory store's ``index.jsonl`` from the note files (signer keys are
        then unknown); nothing to do for a history kept in a table."""
        self._records.rebuild_index(self._summaries)

    def signer_vkeys(self, number: int) -> list[str]:
        """The verifier keys recorded for checkpoint ``number`` when it was signed
        (informational: a verifier trusts only the keys it pinned)."""
        for line in self.index():
            if line.get("number") == number:
                return recorded_keys(line.get("vkeys"))
        return []


def open_merkle_cache(store: Store) -> tuple[StoredNodes | None, str | None]:
    """The store's stored Merkle nodes to compare with its journal (``Store.merkle_cache``)."""
    return store.merkle_cache()


def rebuild_advice(store: Store) -> str:
    """How to have a store's Merkle cache rebuilt from its journal."""
    return store.merkle_rebuild_advice()


class Checkpointer:
    """Signs a checkpoint of the store each time it is called (any backend).

    Give it to ``Runtime(..., checkpointer=Checkpointer(key))`` to checkpoint every run as
    soon as its ``run.end`` is durable. ``key`` is a private key, a :class:`SigningKey`, or
    the path of a private key file. Calls are serialized; a call that finds the tree
    unchanged since the last checkpoint by the same key signs nothing new.

    It runs after every run, so by default it does not re-read the whole journal (see
    :meth:`CheckpointHistory.sign`, ``recheck``): it signs the tree its store handle keeps,
    proved consistent with the previous checkpoint. ``recheck=True`` verifies the journal
    before each signature, at the cost of one full pass each time; ``tracelock checkpoint``
    and ``tracelock verify --store`` always do.
    """

    def __init__(
        self,
        key: PrivateKey | SigningKey | str | os.PathLike[str],
        *,
        origin: str | None = None,
        recheck: bool = False,
    ) -> None:
        self._recheck = recheck
        if isinstance(key, PrivateKey):
            self._key = SigningKey(key)
        elif isinstance(key, SigningKey):
            self._key = key
        else:
            self._key = load_signing_key(Path(key))
        self._origin = origin
        self._lock = threading.Lock()
        #: The last checkpoint this checkpointer signed or found current.
        self.last: StoredCheckpoint | None = None

    def __call__(self, store: Store) -> StoredCheckpoint:
        with self._lock:
            stored, _ = CheckpointHistory.of(store).sign(
                store, self._key, origin=self._origin, recheck=self._recheck
            )
            self.last = stored
            return stored
