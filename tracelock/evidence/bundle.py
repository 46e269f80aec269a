"""Evidence bundles: the entries, payloads, policies, redactions, inclusion proofs and signed
checkpoint that let anyone verify a set of runs offline (``docs/spec.md`` section 8).

A bundle is a set of files, written as a directory, a ``.zip`` or a ``.tar``::

    manifest.json             canonical JSON: format, checkpoint, runs, policies, redacted
                              payloads, claimed signer keys, and the SHA-256 and size of
                              every other file
    checkpoint.note           the signed checkpoint (c2sp.org/tlog-checkpoint)
    entries.jsonl             the selected journal entry lines, ascending seq
    proofs.jsonl              line k: {"hash", "proof", "seq"} for line k of entries.jsonl
    payloads/<hash>.json      the canonical bytes of every payload still present

The bytes are a function of (store, runs, checkpoint) only: every JSON file is canonical,
files are sorted by path, archives are uncompressed with fixed timestamps, owners and modes.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tracelock.core.canonical import dumps, loads
from tracelock.core.entry import ADMIN_RUN, POLICY_KIND, PROVENANCE_KIND, REDACTION_KIND, Entry
from tracelock.errors import EvidenceError
from tracelock.evidence.bundle_files import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    CHECKPOINT,
    ENTRIES,
    MANIFEST,
    MAX_BUNDLE_BYTES,
    PAYLOAD_DIR,
    PROOFS,
    BundleFiles,
    BundleFormatError,
    bundle_kind,
    read_bundle_files,
)
from tracelock.evidence.history import (
    CheckpointHistory,
    CheckpointInconsistentError,
    SigningKey,
    StoredCheckpoint,
)
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.proofs import batch_inclusion_proofs, journal_leaf_hashes
from tracelock.storage.backend import Store
from tracelock.storage.errors import RunNotFoundError

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "CHECKPOINT",
    "ENTRIES",
    "MANIFEST",
    "MAX_BUNDLE_BYTES",
    "PAYLOAD_DIR",
    "PROOFS",
    "BundleExistsError",
    "BundleFiles",
    "BundleFormatError",
    "CheckpointStaleError",
    "ExportIncompleteError",
    "ExportResult",
    "ExportRunOpenError",
    "bundle_kind",
    "collect_bundle",
    "export_bundle",
    "read_bundle_files",
    "write_bundle",
]

#: Below one proof per this many leaves, proofs come from the store one by one.
_BATCH_RATIO = 64
#: Fixed archive metadata: the earliest time a zip can hold, mode 0644, owner root.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o644


class BundleExistsError(EvidenceError):
    """The export destination already exists (bundles are never overwritten)."""

    code: ClassVar[str] = "EVIDENCE_BUNDLE_EXISTS"


class ExportRunOpenError(EvidenceError):
    """A run to export has not ended (pass ``allow_open`` to export it anyway)."""

    code: ClassVar[str] = "EVIDENCE_EXPORT_RUN_OPEN"


class ExportIncompleteError(EvidenceError):
    """The store lacks something a bundle must hold (a run's policy document, a payload)."""

    code: ClassVar[str] = "EVIDENCE_EXPORT_INCOMPLETE"


class CheckpointStaleError(EvidenceError):
    """The checkpoint does not cover every entry to prove; sign a newer one."""

    code: ClassVar[str] = "EVIDENCE_CHECKPOINT_STALE"


# ---------------------------------------------------------------------------------------
# Collecting


def _line(value: Any) -> bytes:
    return dumps(value) + b"\n"


def _status(entries: Sequence[Entry]) -> str:
    status = "created"
    for entry in entries:
        value = (entry.meta or {}).get("status")
        if isinstance(value, str):
            status = value
    return status


def _readable(
    store: Store, digest: str | None, redactions: dict[str, list[Entry]]
) -> Any:
    """A payload's document, or the copy kept by a field redaction of it, or None."""
    if digest is None:
        return None
    if store.payload_state(digest) == "present":
        return store.get_payload(digest)
    for entry in reversed(redactions.get(digest, [])):
        doc = _readable(store, entry.payload, {})
        if isinstance(doc, dict) and isinstance(doc.get("copy"), dict):
            return doc["copy"]
    return None


def collect_bundle(
    store: Store,
    run_ids: Iterable[str],
    checkpoint: StoredCheckpoint,
    *,
    allow_open: bool = False,
    signer_vkeys: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, bytes]:
    """The files of the bundle of ``run_ids`` proved against ``checkpoint``; ``progress``
    is called with (runs collected, runs) after each run."""
    runs = sorted(set(run_ids))
    if not runs:
        raise ExportIncompleteError("name at least one run to export")
    if ADMIN_RUN in runs:
        raise ExportIncompleteError(f"{ADMIN_RUN} is the store's own chain, not a run")
    tree_size = store.tree_size()
    if tree_size < checkpoint.size or store.tree_root(checkpoint.size) != checkpoint.root:
        raise CheckpointInconsistentError(
            f"the store's journal does not match checkpoint {checkpoint.number} (size "
            f"{checkpoint.size}): it was rewritten or truncated since the checkpoint was signed",
            details={"checkpoint": checkpoint.number},
        )
    try:
        admin = store.entries(ADMIN_RUN)
    except RunNotFoundError:
        admin = []
    redactions: dict[str, list[Entry]] = {}
    for entry in admin:
        if entry.kind == REDACTION_KIND:
            target = (entry.meta or {}).get("payload")
            if isinstance(target, str):
                redactions.setdefault(target, []).append(entry)
    selected: dict[int, Entry] = {}
    summaries: list[dict[str, Any]] = []
    policies: set[str] = set()
    provenances: set[str] = set()
    for run in runs:
        entries = store.entries(run)
        last = entries[-1]
        ended = last.kind == "run.end"
        if not ended and not allow_open:
            raise ExportRunOpenError(
                f"run {run} has not ended (status {_status(entries)}); export it with "
                "--allow-open to include its entries so far",
                details={"run": run},
            )
        end_doc = _readable(store, last.payload, redactions) if ended else None
        summaries.append(
            {
                "run": run,
                "entries": len(entries),
                "first_seq": entries[0].seq,
                "last_seq": last.seq,
                "status": _status(entries),
                "ended": ended,
                "fingerprint": (
                    end_doc.get("fingerprint")
                    if isinstance(end_doc, dict) and isinstance(end_doc.get("fingerprint"), str)
                    else None
                ),
            }
        )
        for entry in entries:
            selected[entry.seq] = entry
        start_doc = (
            _readable(store, entries[0].payload, redactions)
            if entries[0].kind == "run.start"
            else None
        )
        policy = start_doc.get("policy") if isinstance(start_doc, dict) else None
        if isinstance(policy, str):
            policies.add(policy)
        provenance = start_doc.get("provenance") if isinstance(start_doc, dict) else None
        if isinstance(provenance, str):
            provenances.add(provenance)
        if progress is not None:
            progress(len(summaries), len(runs))
    # The first register entry of each document (two writers may both have registered it).
    registered: dict[tuple[str, str], Entry] = {}
    for entry in admin:
        if entry.payload and entry.kind in (POLICY_KIND, PROVENANCE_KIND):
            registered.setdefault((entry.kind, entry.payload), entry)
    for member, kind, named in (("policy", POLICY_KIND, policies), ("provenance", PROVENANCE_KIND, provenances)):
        for digest in sorted(named):
            register = registered.get((kind, digest))
            if register is None:
                raise ExportIncompleteError(
                    f"{member} {digest} named by the runs has no {kind} entry in the store",
                    details={member: digest},
                )
            selected[register.seq] = register
    # Redaction entries of every payload the bundle refers to (and, in turn, of theirs).
    while True:
        referenced = {e.payload for e in selected.values() if e.payload}
        extra = [
            r for digest in sorted(referenced) for r in redactions.get(digest, []) if r.seq not in selected
        ]
        if not extra:
            break
        for entry in extra:
            selected[entry.seq] = entry
    ordered = [selected[seq] for seq in sorted(selected)]
    uncovered = [e for e in ordered if e.seq >= checkpoint.size]
    if uncovered:
        first = uncovered[0]
        raise CheckpointStaleError(
            f"checkpoint {checkpoint.number} covers {checkpoint.size} entries, but entry seq "
            f"{first.seq} (run {first.run}, index {first.i}) is after it; sign a new "
            "checkpoint first (`tracelock checkpoint`, or export with --key)",
            details={"checkpoint": checkpoint.number, "seq": first.seq, "run": first.run},
        )
    proofs = _inclusion_proofs(store, checkpoint, [e.seq for e in ordered])
    files: dict[str, bytes] = {}
    files[ENTRIES] = b"".join(e.line + b"\n" for e in ordered)
    files[PROOFS] = b"".join(
        _line({"hash": e.hash, "proof": [node.hex() for node in proofs[e.seq]], "seq": e.seq})
        for e in ordered
    )
    redacted: list[dict[str, Any]] = []
    for digest in sorted({e.payload for e in ordered if e.payload}):
        state = store.payload_state(digest)
        if state == "present":
            files[f"{PAYLOAD_DIR}/{digest}.json"] = store.get_payload_bytes(digest)
        elif state == "redacted" and digest in redactions:
            redacted.append(
                {"payload": digest, "redactions": [r.seq for r in redactions[digest]]}
            )
        else:
            raise ExportIncompleteError(
                f"payload {digest} is {state} in the store"
                + (" without a redaction entry" if state == "redacted" else ""),
                details={"payload": digest, "state": state},
            )
    files[CHECKPOINT] = checkpoint.note.encode("utf-8")
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "checkpoint": {
            "origin": checkpoint.origin,
            "size": checkpoint.size,
            "root": checkpoint.root.hex(),
        },
        "runs": summaries,
        "policies": sorted(policies),
        "redacted": redacted,
        "signers": sorted(set(signer_vkeys)),
        "files": [
            {"path": path, "sha256": _sha256(data), "size": len(data)}
            for path, data in sorted(files.items())
        ],
    }
    files[MANIFEST] = _line(manifest)
    return files


def _inclusion_proofs(
    store: Store, checkpoint: StoredCheckpoint, seqs: Sequence[int]
) -> dict[int, list[bytes]]:
    """The inclusion proof of each seq in the checkpoint's tree: asked of the store one by
    one for a few entries, computed in one pass over the journal for many."""
    if len(seqs) * _BATCH_RATIO < checkpoint.size:
        return {seq: store.inclusion_proof(seq, checkpoint.size) for seq in seqs}
    root, proofs = batch_inclusion_proofs(journal_leaf_hashes(store), checkpoint.size, seqs)
    if root != checkpoint.root:
        raise CheckpointInconsistentError(
            f"the journal's first {checkpoint.size} entries do not hash to the root of "
            f"checkpoint {checkpoint.number}: it was rewritten since the checkpoint was signed",
            details={"checkpoint": checkpoint.number},
        )
    return proofs


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------
# Writing


def write_bundle(files: dict[str, bytes], out: Path) -> str:
    """Write the files as a directory, a ``.zip`` or a ``.tar`` (by ``out``'s extension);
    returns the kind written. Never overwrites: ``out`` must not exist (a directory may
    exist if it is empty)."""
    out = Path(out)
    kind = bundle_kind(out)
    if kind == "dir":
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise BundleExistsError(f"{out} already exists", details={"path": str(out)})
        out.mkdir(parents=True, exist_ok=True)
        for parent in sorted({(out / path).parent for path in files}):
            parent.mkdir(parents=True, exist_ok=True)
        for path, data in sorted(files.items()):
            target = out / path
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        return kind
    if out.exists():
        raise BundleExistsError(f"{out} already exists", details={"path": str(out)})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    try:
        with open(tmp, "wb") as handle:
            handle.write(archive_bytes(files, kind))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return kind


def archive_bytes(files: dict[str, bytes], kind: str) -> bytes:
    """The deterministic ``zip`` or ``tar`` archive of ``files``."""
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
            for path, data in sorted(files.items()):
                info = zipfile.ZipInfo(path, date_time=ZIP_TIME)
                info.compress_type = zipfile.ZIP_STORED
                info.create_system = 3  # Unix, so that the mode below is meaningful
                info.external_attr = (stat.S_IFREG | FILE_MODE) << 16
                archive.writestr(info, data)
    elif kind == "tar":
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            for path, data in sorted(files.items()):
                member = tarfile.TarInfo(path)
                member.size = len(data)
                member.mtime = 0
                member.mode = FILE_MODE
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                member.type = tarfile.REGTYPE
                archive.addfile(member, io.BytesIO(data))
    else:
        raise BundleFormatError(f"unknown archive kind {kind!r}")
    return buffer.getvalue()


@dataclass
class ExportResult:
    """Where a bundle was written and what it holds."""

    path: Path
    kind: str
    checkpoint: StoredCheckpoint
    signed_checkpoint: bool
    files: dict[str, bytes]

    def to_dict(self) -> dict[str, Any]:
        manifest = loads(self.files[MANIFEST])
        return {
            "ok": True,
            "path": str(self.path),
            "kind": self.kind,
            "checkpoint": self.checkpoint.to_dict(),
            "signed_checkpoint": self.signed_checkpoint,
            "runs": manifest["runs"],
            "entries": self.files[ENTRIES].count(b"\n"),
            "payloads": sum(1 for p in self.files if p.startswith(PAYLOAD_DIR + "/")),
            "redacted": manifest["redacted"],
            "policies": manifest["policies"],
            "bytes": sum(len(d) for d in self.files.values()),
        }


def export_bundle(
    store: Store,
    run_ids: Iterable[str],
    out: Path,
    *,
    checkpoint: int | None = None,
    key: SigningKey | PrivateKey | None = None,
    origin: str | None = None,
    allow_open: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Export ``run_ids`` to ``out`` against the store's latest checkpoint (or number
    ``checkpoint``). With ``key``, a new checkpoint is signed first when the latest one does
    not cover every entry the bundle needs."""
    out = Path(out)
    bundle_kind(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleExistsError(f"{out} already exists", details={"path": str(out)})
    history = CheckpointHistory.of(store)
    signed = False
    if key is not None and checkpoint is None:
        latest = history.latest()
        if latest is None or latest.size < store.tree_size():
            history.sign(store, key, origin=origin)
            signed = True
    stored = history.get(checkpoint)
    files = collect_bundle(
        store,
        run_ids,
        stored,
        allow_open=allow_open,
        signer_vkeys=history.signer_vkeys(stored.number),
        progress=progress,
    )
    kind = write_bundle(files, out)
    return ExportResult(out, kind, stored, signed, files)
