"""The checkpoint history of a store, and the signing of new checkpoints.

A directory store keeps it in files, inside the store directory::

    checkpoints/00000001.note               signed checkpoint 1 (c2sp tlog-checkpoint note)
    checkpoints/00000002.consistency.json   consistency proof from checkpoint 1 to 2
    checkpoints/00000002.note
    ...
    checkpoints/index.jsonl                 one canonical JSON line per checkpoint (a cache)
    checkpoints/lock                        serializes signers

The note files are the history; ``index.jsonl`` is a convenience for people and tools, and
is rewritten from the notes whenever it disagrees with them. A PostgreSQL store keeps it in
its database: one ``tracelock_checkpoints`` row per checkpoint (number, note, consistency
record, signers' verifier keys), written in one transaction, with signers serialized by an
advisory lock. The two differ only in :class:`_FileRecords` and :class:`_TableRecords`;
numbering, signing and every check are the same code. A new checkpoint is signed only
after the store's tree is proved consistent with the previous checkpoint (RFC 9162 2.1.4):
a tree that is not (the journal was truncated or rewritten) is refused, never signed. The
stored proofs are checked by ``verify --store`` (``tracelock.evidence.store_verify``), and a
history goes with its store's copy (:meth:`CheckpointHistory.copy_to`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from tracelock.core.canonical import dumps, loads
from tracelock.core.merkle import verify_consistency
from tracelock.errors import EvidenceError, ProofError
from tracelock.evidence.checkpoint import Checkpoint, CheckpointOriginError, sign_checkpoint
from tracelock.evidence.keys import PrivateKey, load_private_key
from tracelock.evidence.note import NoteSigner, NoteVerifier, parse_note
from tracelock.storage.backend import Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.files import write_durably
from tracelock.storage.merkle_stream import MerkleStream, StoredNodes, open_node_files
from tracelock.storage.merkle_tree import MerkleTreeTamperedError
from tracelock.storage.verify import verify_store

if TYPE_CHECKING:
    from tracelock.storage.postgres.store import PostgresStore

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




class _Records(Protocol):
    """Where a history keeps its checkpoints (the files, or the table)."""

    where: str

    def numbers(self) -> list[int]: ...

    def note(self, number: int) -> bytes | None: ...

    def consistency(self, number: int) -> bytes | None: ...

    def vkeys(self, number: int) -> list[str]: ...

    def place(self, number: int) -> str: ...

    def locked(self) -> AbstractContextManager[None]: ...

    def add(self, stored: StoredCheckpoint, consistency: bytes | None, vkeys: list[str]) -> None: ...

    def index(self, history: CheckpointHistory) -> list[dict[str, Any]]: ...


class _FileRecords:
    """``<store>/checkpoints``: one note file per checkpoint, one consistency file, and
    ``index.jsonl`` (a cache rewritten from the notes)."""

    def __init__(self, store_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(store_dir) / CHECKPOINT_DIR
        self.where = str(self.directory)

    def numbers(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(
            int(match.group(1))
            for name in os.listdir(self.directory)
            if (match := _NOTE_FILE.fullmatch(name)) is not None
        )

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointHistoryError(f"cannot read {path}: {exc.strerror}") from None

    def note(self, number: int) -> bytes | None:
        return self._read(self.directory / f"{number:08d}.note")

    def consistency(self, number: int) -> bytes | None:
        return self._read(self.directory / f"{number:08d}.consistency.json")

    def vkeys(self, number: int) -> list[str]:
        """The signer keys ``index.jsonl`` records for checkpoint ``number`` (read only:
        [] when the cache lacks them)."""
        try:
            lines = [loads(line) for line in (self.directory / INDEX_FILE).read_bytes().splitlines() if line]
        except (OSError, ValueError):
            return []
        for line in lines:
            if isinstance(line, dict) and line.get("number") == number:
                return _strings(line.get("vkeys"))
        return []

    def place(self, number: int) -> str:
        return f"{CHECKPOINT_DIR}/{number:08d}.note"

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def add(self, stored: StoredCheckpoint, consistency: bytes | None, vkeys: list[str]) -> None:
        number = stored.number
        if consistency is not None:
            write_durably(self.directory / f"{number:08d}.consistency.json", consistency)
        write_durably(self.directory / f"{number:08d}.note", stored.note.encode("utf-8"))
        line = dumps(stored.to_dict() | {"vkeys": vkeys}) + b"\n"
        path = self.directory / INDEX_FILE
        if self._index_lines() != number - 1:
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

    def index(self, history: CheckpointHistory) -> list[dict[str, Any]]:
        path = self.directory / INDEX_FILE
        numbers = history.numbers()
        try:
            lines = [loads(line) for line in path.read_bytes().splitlines() if line]
        except (OSError, ValueError):
            lines = []
        if [line.get("number") if isinstance(line, dict) else None for line in lines] != numbers:
            self.rebuild_index(history)
            lines = [loads(line) for line in path.read_bytes().splitlines() if line]
        return [line for line in lines if isinstance(line, dict)]

    def rebuild_index(self, history: CheckpointHistory | None = None) -> None:
        """Rewrite ``index.jsonl`` from the note files (signer keys are then unknown)."""
        history = history or CheckpointHistory(self.directory.parent)
        lines = [dumps(history.load(n).to_dict() | {"vkeys": []}) + b"\n" for n in history.numbers()]
        self.directory.mkdir(parents=True, exist_ok=True)
        write_durably(self.directory / INDEX_FILE, b"".join(lines))


class _TableRecords:
    """A PostgreSQL store's ``tracelock_checkpoints`` table."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.where = f"the tracelock_checkpoints table of {store.location}"

    def numbers(self) -> list[int]:
        return self.store.checkpoint_numbers()

    def note(self, number: int) -> bytes | None:
        record = self.store.checkpoint_record(number)
        return None if record is None else record[0]

    def consistency(self, number: int) -> bytes | None:
        record = self.store.checkpoint_record(number)
        return None if record is None else record[1]

    def vkeys(self, number: int) -> list[str]:
        record = self.store.checkpoint_record(number)
        try:
            return _strings(loads(record[2])) if record is not None else []
        except ValueError:
            return []

    def place(self, number: int) -> str:
        return f"tracelock_checkpoints/{number}"

    def locked(self) -> AbstractContextManager[None]:
        return self.store.checkpoint_lock()

    def add(self, stored: StoredCheckpoint, consistency: bytes | None, vkeys: list[str]) -> None:
        self.store.add_checkpoint(stored.number, stored.note.encode("utf-8"), consistency, dumps(vkeys).decode())

    def index(self, history: CheckpointHistory) -> list[dict[str, Any]]:
        return [history.load(number).to_dict() | {"vkeys": self.vkeys(number)} for number in history.numbers()]


def _strings(value: Any) -> list[str]:
    """The strings of a JSON list (a recorded ``vkeys``); [] for anything else."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


class CheckpointHistory:
    """The numbered, signed checkpoints of a store: ``<store>/checkpoints`` for a
    directory store (give its path), the ``tracelock_checkpoints`` table for a PostgreSQL
    store (give the store; :meth:`of` picks for any store)."""

    def __init__(self, store: str | os.PathLike[str] | PostgresStore) -> None:
        if isinstance(store, str | os.PathLike):
            files = _FileRecords(store)
            self.directory: Path | None = files.directory
            self._records: _Records = files
        else:
            self.directory = None
            self._records = _TableRecords(store)

    @classmethod
    def of(cls, store: Store) -> CheckpointHistory:
        """The history of an open store, wherever its backend keeps it."""
        if isinstance(store, DirectoryStore):
            return cls(store.path)
        from tracelock.storage.postgres.store import PostgresStore

        if isinstance(store, PostgresStore):
            return cls(store)
        raise EvidenceError(f"{type(store).__name__} stores keep no checkpoint history")

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
        data = self._records.note(number)
        place = self._records.place(number)
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
        data = self._records.consistency(number)
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
            self._records.add(stored, consistency, [signer.verifier().vkey])
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
                place = destination._records.place(number)
                destination._records.add(
                    replace(stored, place=place), self._records.consistency(number), self._records.vkeys(number)
                )
                copied += 1
        return copied, []

    def index(self) -> list[dict[str, Any]]:
        """One document per checkpoint: its :meth:`StoredCheckpoint.to_dict` and ``vkeys``
        (a directory store's ``index.jsonl``, rebuilt from the notes when they disagree)."""
        return self._records.index(self)

    def rebuild_index(self) -> None:
        """Rewrite a directory store's ``index.jsonl`` from the note files (signer keys are
        then unknown); nothing to do for a history kept in a table."""
        if isinstance(self._records, _FileRecords):
            self._records.rebuild_index(self)

    def signer_vkeys(self, number: int) -> list[str]:
        """The verifier keys recorded for checkpoint ``number`` when it was signed
        (informational: a verifier trusts only the keys it pinned)."""
        for line in self.index():
            if line.get("number") == number:
                return _strings(line.get("vkeys"))
        return []


def open_merkle_cache(store: Store) -> tuple[StoredNodes | None, str | None]:
    """The store's stored Merkle nodes to compare with its journal (see
    :func:`tracelock.storage.merkle_stream.open_node_files`): a directory store's node
    files, a PostgreSQL store's node table; (None, why) when unusable, (None, None) when
    there are none."""
    if isinstance(store, DirectoryStore):
        return open_node_files(store.path / "merkle")
    from tracelock.storage.postgres.merkle import NodeTable
    from tracelock.storage.postgres.store import PostgresStore

    if isinstance(store, PostgresStore):
        table = NodeTable(store)
        return (table, None) if table.stored_levels() else (None, None)
    return None, None


def rebuild_advice(store: Store) -> str:
    """How to have a store's Merkle cache rebuilt from its journal."""
    if isinstance(store, DirectoryStore):
        return "delete the store's merkle/ directory to have them rebuilt from the journal"
    return "delete the rows of its tracelock_merkle_nodes table to have them rebuilt from the journal"


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
