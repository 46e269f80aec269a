"""The checkpoint history of a directory store, and the signing of new checkpoints.

Layout, inside the store directory::

    checkpoints/00000001.note               signed checkpoint 1 (c2sp tlog-checkpoint note)
    checkpoints/00000002.consistency.json   consistency proof from checkpoint 1 to 2
    checkpoints/00000002.note
    ...
    checkpoints/index.jsonl                 one canonical JSON line per checkpoint (a cache)
    checkpoints/lock                        serializes signers

The note files are the history; ``index.jsonl`` is a convenience for people and tools, and
is rewritten from the notes whenever it disagrees with them. A new checkpoint is signed only
after the store's tree is proved consistent with the previous checkpoint (RFC 9162 2.1.4):
a tree that is not (the journal was truncated or rewritten) is refused, never signed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tracelock.core.canonical import dumps, loads
from tracelock.core.merkle import verify_consistency
from tracelock.errors import EvidenceError, ProofError
from tracelock.evidence.checkpoint import Checkpoint, CheckpointOriginError, sign_checkpoint
from tracelock.evidence.keys import PrivateKey, load_private_key
from tracelock.evidence.note import NoteSigner, NoteVerifier, parse_note
from tracelock.storage.backend import Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.files import write_durably
from tracelock.storage.merkle_stream import MerkleStream, open_node_files
from tracelock.storage.merkle_tree import MerkleTreeTamperedError
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
]

CHECKPOINT_DIR = "checkpoints"
INDEX_FILE = "index.jsonl"
#: Key name (and so checkpoint origin) used when nothing else names the log.
DEFAULT_KEY_NAME = "tracelock"

_NOTE_FILE = re.compile(r"([0-9]{8})\.note")


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
            "file": f"{CHECKPOINT_DIR}/{self.file_name}",
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
    """The numbered, signed checkpoints kept in ``<store>/checkpoints``."""

    def __init__(self, store_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(store_dir) / CHECKPOINT_DIR

    # -- reading -------------------------------------------------------------------------
    def numbers(self) -> list[int]:
        """Checkpoint numbers present, ascending (they must run from 1 without gaps)."""
        if not self.directory.is_dir():
            return []
        found = sorted(
            int(match.group(1))
            for name in os.listdir(self.directory)
            if (match := _NOTE_FILE.fullmatch(name)) is not None
        )
        for expected, number in enumerate(found, 1):
            if number != expected:
                raise CheckpointHistoryError(
                    f"the checkpoint history in {self.directory} has a gap: checkpoint "
                    f"{expected} is missing",
                    details={"missing": expected},
                )
        return found

    def load(self, number: int) -> StoredCheckpoint:
        path = self.directory / f"{number:08d}.note"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CheckpointNotFoundError(
                f"no checkpoint {number} in {self.directory}", details={"number": number}
            ) from None
        except OSError as exc:
            raise CheckpointHistoryError(f"cannot read {path}: {exc.strerror}") from None
        try:
            text, signatures = parse_note(data)
            body = Checkpoint.from_body(text)
        except EvidenceError as exc:
            raise CheckpointHistoryError(
                f"{path} is not a signed checkpoint: {exc.message}", details={"file": str(path)}
            ) from None
        return StoredCheckpoint(
            number,
            body,
            data.decode("utf-8"),
            tuple((sig.name, sig.key_id) for sig in signatures),
        )

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
        path = self.directory / f"{number:08d}.consistency.json"
        try:
            doc = loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise CheckpointHistoryError(f"cannot read {path}: {exc}") from None
        if not isinstance(doc, dict):
            raise CheckpointHistoryError(f"{path} is not a consistency proof document")
        return doc

    # -- writing -------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def sign(
        self,
        store: DirectoryStore,
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
        with self._locked():
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
            if last is not None:
                record = {
                    "from": {"number": last.number, "size": last.size, "root": last.root.hex()},
                    "to": {"number": number, "size": size, "root": root.hex()},
                    "proof": [node.hex() for node in proof],
                }
                write_durably(
                    self.directory / f"{number:08d}.consistency.json", dumps(record) + b"\n"
                )
            write_durably(self.directory / f"{number:08d}.note", note.encode("utf-8"))
            stored = StoredCheckpoint(number, body, note, ((signer.name, signer.key_id),))
            self._append_index(stored, signer)
            return stored, True

    def _recheck(
        self, store: DirectoryStore, last: StoredCheckpoint | None, size: int, root: bytes
    ) -> None:
        """Verify the journal and compare its own root with the previous checkpoint's and
        with the one the node files give (``size``, ``root``); raise on any difference."""
        cache, _ = open_node_files(store.path / "merkle")
        try:
            stream = MerkleStream([last.size] if last is not None else [], cache)
            report = verify_store(store, merkle=stream)
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
                f"the Merkle node files of {store.path} disagree with the journal: stored "
                f"node {bad.index} of level {bad.level} (entries {bad.first_leaf}-"
                f"{bad.last_leaf}) is not the one the journal gives; refusing to sign (delete "
                "the store's merkle/ directory to have them rebuilt from the journal)",
                details={"level": bad.level, "index": bad.index},
            )
        if (size, root) != (report.entries, stream.root()):
            raise MerkleTreeTamperedError(
                f"the Merkle node files of {store.path} disagree with the journal: they give "
                f"size {size} and root {root.hex()}, the journal {report.entries} and "
                f"{stream.root().hex()}; refusing to sign (delete the store's merkle/ "
                "directory to have them rebuilt from the journal)",
                details={"size": size, "journal_size": report.entries},
            )

    def _prove_extension(
        self, store: DirectoryStore, last: StoredCheckpoint, size: int, root: bytes
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

    def _append_index(self, stored: StoredCheckpoint, signer: NoteSigner) -> None:
        line = dumps(
            stored.to_dict() | {"vkeys": [signer.verifier().vkey]}
        ) + b"\n"
        path = self.directory / INDEX_FILE
        if self._index_lines() != stored.number - 1:
            self.rebuild_index()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _index_lines(self) -> int:
        try:
            return (self.directory / INDEX_FILE).read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def index(self) -> list[dict[str, Any]]:
        """The index lines (rebuilt from the notes when they disagree)."""
        path = self.directory / INDEX_FILE
        numbers = self.numbers()
        try:
            lines = [loads(line) for line in path.read_bytes().splitlines() if line]
        except (OSError, ValueError):
            lines = []
        if [line.get("number") if isinstance(line, dict) else None for line in lines] != numbers:
            self.rebuild_index()
            lines = [loads(line) for line in path.read_bytes().splitlines() if line]
        return [line for line in lines if isinstance(line, dict)]

    def rebuild_index(self) -> None:
        """Rewrite ``index.jsonl`` from the note files (signer keys are then unknown)."""
        lines = [dumps(self.load(n).to_dict() | {"vkeys": []}) + b"\n" for n in self.numbers()]
        self.directory.mkdir(parents=True, exist_ok=True)
        write_durably(self.directory / INDEX_FILE, b"".join(lines))

    def signer_vkeys(self, number: int) -> list[str]:
        """The verifier keys recorded for checkpoint ``number`` when it was signed
        (informational: a verifier trusts only the keys it pinned)."""
        for line in self.index():
            if line.get("number") == number:
                vkeys = line.get("vkeys")
                return [v for v in vkeys if isinstance(v, str)] if isinstance(vkeys, list) else []
        return []


class Checkpointer:
    """Signs a checkpoint of a directory store each time it is called.

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
        if not isinstance(store, DirectoryStore):
            raise EvidenceError(
                f"checkpoints are kept for directory stores; {type(store).__name__} has none"
            )
        with self._lock:
            stored, _ = CheckpointHistory(store.path).sign(
                store, self._key, origin=self._origin, recheck=self._recheck
            )
            self.last = stored
            return stored
