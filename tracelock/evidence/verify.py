"""Offline verification of an evidence bundle (``docs/spec.md`` section 8.3).

Needs nothing but the bundle and the verifier's pinned public keys: no store, no network.
Integrity ("every hash, link and proof agrees") and trust ("the checkpoint is signed by a key
the verifier pinned") are reported separately; every failure names its check, and where it
is: the file, the run, the entry index and seq.

The bundle is parsed first (:mod:`tracelock.evidence.bundle_parse`: every file read once,
nothing decided), then checked here, check by check, in the order of the specification.
This module imports neither the runtime nor a storage backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tracelock.core.entry import (
    ADMIN_RUN,
    POLICY_KIND,
    PROVENANCE_KIND,
    REDACTION_KIND,
    Entry,
)
from tracelock.core.inclusion import InclusionVerifier
from tracelock.core.merkle import leaf_hash
from tracelock.errors import EvidenceError, ProofError
from tracelock.evidence.bundle_files import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    CHECKPOINT,
    ENTRIES,
    MANIFEST,
    PAYLOAD_DIR,
    PROOFS,
    BundleFiles,
    read_bundle_files,
)
from tracelock.evidence.bundle_parse import ParsedBundle, parse_bundle, payload_digest
from tracelock.evidence.bundle_runs import RunChecks, RunReport
from tracelock.evidence.checkpoint import Checkpoint
from tracelock.evidence.keys import KeyFileError, KeyInvalidError, PublicKey
from tracelock.evidence.note import (
    NoteSignatureInvalidError,
    NoteUntrustedError,
    NoteVerifier,
    open_note,
)

__all__ = [
    "INTEGRITY",
    "REPLAY",
    "TRUST",
    "BundleInvalidError",
    "BundleReport",
    "BundleUntrustedError",
    "Failure",
    "PinnedKey",
    "RunReport",
    "load_pinned_keys",
    "verify_bundle",
]

INTEGRITY = "integrity"
TRUST = "trust"
REPLAY = "replay"

#: Checks whose failure is a matter of trust (who signed), not of integrity.
TRUST_CHECKS = frozenset({"checkpoint.trust", "checkpoint.origin"})
#: Failures kept in a report (a badly damaged bundle would otherwise list every entry).
MAX_FAILURES = 200


class BundleInvalidError(EvidenceError):
    """A bundle failed an integrity check (raised by :meth:`BundleReport.raise_for_failure`)."""

    code: ClassVar[str] = "EVIDENCE_BUNDLE_INVALID"


class BundleUntrustedError(EvidenceError):
    """A bundle's hashes agree but its checkpoint is not signed by a pinned key."""

    code: ClassVar[str] = "EVIDENCE_BUNDLE_UNTRUSTED"


# ---------------------------------------------------------------------------------------
# Pinned keys


@dataclass(frozen=True)
class PinnedKey:
    """A public key the verifier trusts; ``name`` pins the key name (= checkpoint origin)
    too, None accepts the key under whatever origin the checkpoint names."""

    public_key: PublicKey
    name: str | None
    source: str

    def verifier(self, origin: str) -> NoteVerifier:
        return NoteVerifier(self.name if self.name is not None else origin, self.public_key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "fingerprint": self.public_key.fingerprint(),
            "source": self.source,
        }


def _key_from_text(text: str, source: str) -> PinnedKey:
    text = text.strip()
    if "+" in text:
        verifier = NoteVerifier.from_vkey(text)
        return PinnedKey(verifier.public_key, verifier.name, source)
    return PinnedKey(PublicKey.from_hex(text), None, source)


def load_pinned_keys(values: Iterable[str]) -> list[PinnedKey]:
    """Pinned keys from ``--key`` values: each a file (PEM public key, 64 hex digits, or one
    verifier key string ``name+id+data`` per line) or such a string given inline. A private
    key file is refused: a verifier never needs one."""
    pins: list[PinnedKey] = []
    for value in values:
        path = Path(value)
        if path.is_file():
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise KeyFileError(f"cannot read key {path}: {exc.strerror}") from None
            if b"PRIVATE KEY" in data:
                raise KeyInvalidError(
                    f"{path} is a private key; pin the public key (.pub or .vkey) instead",
                    details={"path": str(path)},
                )
            if data.lstrip().startswith(b"-----BEGIN"):
                pins.append(PinnedKey(PublicKey.from_pem(data), None, str(path)))
                continue
            try:
                text = data.decode("ascii")
            except UnicodeDecodeError:
                raise KeyInvalidError(f"{path} is not a key file") from None
            lines = [line for line in text.splitlines() if line.strip()]
            if not lines:
                raise KeyInvalidError(f"{path} holds no key")
            pins.extend(_key_from_text(line, str(path)) for line in lines)
            continue
        if "/" in value and "+" not in value:
            raise KeyFileError(f"no key file at {value}", details={"path": value})
        try:
            pins.append(_key_from_text(value, "--key"))
        except KeyInvalidError as exc:
            if isinstance(exc, KeyInvalidError) and type(exc) is not KeyInvalidError:
                raise
            raise KeyFileError(
                f"{value!r} is neither a key file nor a key (64 hex digits or a verifier key "
                "string name+id+data)",
                details={"value": value},
            ) from None
    return pins


# ---------------------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class Failure:
    """One failed check, and where."""

    check: str
    message: str
    file: str | None = None
    run: str | None = None
    i: int | None = None
    seq: int | None = None
    code: str | None = None

    @property
    def category(self) -> str:
        if self.check in TRUST_CHECKS:
            return TRUST
        if self.check.startswith("replay."):
            return REPLAY
        return INTEGRITY

    def where(self) -> str:
        parts = []
        if self.file:
            parts.append(self.file)
        if self.run is not None:
            parts.append(f"run {self.run}")
        if self.i is not None:
            parts.append(f"entry {self.i}")
        if self.seq is not None:
            parts.append(f"seq {self.seq}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "category": self.category,
            "message": self.message,
            "file": self.file,
            "run": self.run,
            "i": self.i,
            "seq": self.seq,
            "code": self.code,
        }


@dataclass
class BundleReport:
    """The outcome of :func:`verify_bundle`."""

    source: str
    kind: str = "dir"
    failures: list[Failure] = field(default_factory=list)
    dropped: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    checkpoint: dict[str, Any] | None = None
    trusted_by: list[dict[str, Any]] = field(default_factory=list)
    claimed_signers: list[dict[str, Any]] = field(default_factory=list)
    pinned: list[dict[str, Any]] = field(default_factory=list)
    runs: list[RunReport] = field(default_factory=list)
    entries: int = 0
    payloads: int = 0
    redacted: int = 0
    replay: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, failure: Failure) -> None:
        self.counts[failure.category] = self.counts.get(failure.category, 0) + 1
        if len(self.failures) >= MAX_FAILURES:
            self.dropped += 1
            return
        self.failures.append(failure)

    def failures_of(self, category: str) -> list[Failure]:
        return [f for f in self.failures if f.category == category]

    @property
    def integrity_ok(self) -> bool:
        return not self.counts.get(INTEGRITY)

    @property
    def trust_ok(self) -> bool:
        return not self.counts.get(TRUST) and bool(self.trusted_by)

    @property
    def replay_ok(self) -> bool:
        return not self.counts.get(REPLAY)

    @property
    def ok(self) -> bool:
        return self.integrity_ok and self.trust_ok and self.replay_ok

    def checks_failed(self) -> list[str]:
        return sorted({f.check for f in self.failures})

    def raise_for_failure(self) -> None:
        """Raise :class:`BundleInvalidError` or :class:`BundleUntrustedError` unless ok."""
        if not self.integrity_ok or not self.replay_ok:
            first = next(f for f in self.failures if f.category != TRUST)
            raise BundleInvalidError(
                f"{self.source}: [{first.check}] {first.where()}: {first.message}",
                details={"failures": [f.to_dict() for f in self.failures]},
            )
        if not self.trust_ok:
            message = next((f.message for f in self.failures_of(TRUST)), "no pinned key signed it")
            raise BundleUntrustedError(f"{self.source}: {message}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "bundle": self.source,
            "kind": self.kind,
            "integrity": {
                "ok": self.integrity_ok,
                "failures": [f.to_dict() for f in self.failures_of(INTEGRITY)],
            },
            "trust": {
                "ok": self.trust_ok,
                "trusted_by": self.trusted_by,
                "pinned": self.pinned,
                "claimed_signers": self.claimed_signers,
                "failures": [f.to_dict() for f in self.failures_of(TRUST)],
            },
            "replay": {
                "ok": self.replay_ok,
                "runs": self.replay,
                "failures": [f.to_dict() for f in self.failures_of(REPLAY)],
            },
            "checks_failed": self.checks_failed(),
            "failures_not_listed": self.dropped,
            "checkpoint": self.checkpoint,
            "runs": [run.to_dict() for run in self.runs],
            "entries": self.entries,
            "payloads": self.payloads,
            "redacted": self.redacted,
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------
# Checks over a parsed bundle


@dataclass
class _Line:
    number: int  # 1-based line number in entries.jsonl
    entry: Entry


_MANIFEST_MEMBERS = frozenset(
    ("format", "version", "checkpoint", "runs", "policies", "redacted", "signers", "files")
)


class _Checker:
    """The checks of docs/spec.md 8.3 over a :class:`ParsedBundle`, in order; each failure
    goes to the report as it is found."""

    def __init__(
        self,
        parsed: ParsedBundle,
        pins: Sequence[PinnedKey],
        origin: str | None,
        allow_open: bool,
        required_runs: Sequence[str],
    ) -> None:
        self.parsed = parsed
        self.bundle = parsed.files
        self.files = parsed.files.files
        self.pins = list(pins)
        self.origin = origin
        self.allow_open = allow_open
        self.required_runs = list(required_runs)
        self.report = BundleReport(self.bundle.source, self.bundle.kind)
        self.report.pinned = [pin.to_dict() for pin in self.pins]
        #: The manifest once its format is accepted (its claimed signers and summary are read).
        self.manifest: dict[str, Any] | None = None
        self.checkpoint: Checkpoint | None = None
        self.entries: list[_Line] = [_Line(number, entry) for number, entry in parsed.entries]
        self.redactions = parsed.redactions

    def fail(self, check: str, message: str, **where: Any) -> None:
        self.report.fail(Failure(check, message, **where))

    # -- the container and the manifest ------------------------------------------------
    def check_container(self) -> None:
        for name, problem in self.bundle.problems:
            self.fail("bundle.container", problem, file=name or None)
        for required in (MANIFEST, CHECKPOINT, ENTRIES, PROOFS):
            if required not in self.files:
                self.fail("bundle.files", f"the bundle has no {required}", file=required)
        for name in sorted(self.files):
            if name in (MANIFEST, CHECKPOINT, ENTRIES, PROOFS):
                continue
            if not (name.endswith(".json") and payload_digest(name) is not None):
                self.fail(
                    "bundle.files",
                    "unexpected file (a bundle holds manifest.json, checkpoint.note, "
                    "entries.jsonl, proofs.jsonl and payloads/<sha256>.json)",
                    file=name,
                )

    def check_manifest(self) -> None:
        parsed = self.parsed.manifest
        if parsed is None:
            return
        if parsed.error is not None:
            self.fail("manifest.format", f"not JSON: {parsed.error}", file=MANIFEST)
            return
        doc = parsed.doc
        if not parsed.canonical:
            self.fail("manifest.format", "not canonical JSON (RFC 8785) ending in a newline", file=MANIFEST)
        if not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT:
            self.fail("manifest.format", f"not a {BUNDLE_FORMAT} manifest", file=MANIFEST)
            return
        unknown = sorted(set(doc) - _MANIFEST_MEMBERS)
        if unknown:
            self.fail(
                "manifest.format",
                f"unknown member(s) {', '.join(map(repr, unknown))}: a version "
                f"{BUNDLE_VERSION} manifest holds only {', '.join(sorted(_MANIFEST_MEMBERS))}",
                file=MANIFEST,
            )
        if doc.get("version") != BUNDLE_VERSION:
            self.fail(
                "manifest.format",
                f"bundle format version {doc.get('version')!r}; this verifier reads {BUNDLE_VERSION}",
                file=MANIFEST,
            )
            return
        listing = doc.get("files")
        if not isinstance(listing, list) or not all(
            isinstance(item, dict)
            and set(item) == {"path", "sha256", "size"}
            and isinstance(item["path"], str)
            and isinstance(item["sha256"], str)
            and isinstance(item["size"], int)
            for item in listing
        ):
            self.fail("manifest.format", "files must be a list of {path, sha256, size}", file=MANIFEST)
            return
        paths = [item["path"] for item in listing]
        if paths != sorted(set(paths)):
            self.fail("manifest.format", "files must be sorted by path, each once", file=MANIFEST)
        self.manifest = doc
        listed = set(paths)
        for item in listing:
            path = item["path"]
            data_of = self.files.get(path)
            if path == MANIFEST:
                self.fail("manifest.format", "the manifest lists itself", file=MANIFEST)
            elif data_of is None:
                self.fail("manifest.hash", "listed in the manifest but absent from the bundle", file=path)
            elif hashlib.sha256(data_of).hexdigest() != item["sha256"] or len(data_of) != item["size"]:
                self.fail(
                    "manifest.hash",
                    f"SHA-256 {hashlib.sha256(data_of).hexdigest()} ({len(data_of)} bytes) differs "
                    f"from the manifest's {item['sha256']} ({item['size']} bytes)",
                    file=path,
                )
        for path in sorted(self.files):
            if path != MANIFEST and path not in listed:
                self.fail("manifest.hash", "present in the bundle but not listed in the manifest", file=path)

    # -- the checkpoint ------------------------------------------------------------------
    def check_checkpoint(self) -> None:
        parsed = self.parsed.checkpoint
        if parsed is None:
            return
        if parsed.error is not None or parsed.checkpoint is None:
            assert parsed.error is not None
            self.fail("checkpoint.format", parsed.error.message, file=CHECKPOINT, code=parsed.error.code)
            return
        checkpoint, signatures = parsed.checkpoint, parsed.signatures
        self.checkpoint = checkpoint
        self.report.checkpoint = {
            "origin": checkpoint.origin,
            "size": checkpoint.size,
            "root": checkpoint.root.hex(),
            "signatures": [{"name": s.name, "key_id": f"{s.key_id:08x}"} for s in signatures],
        }
        self._claimed_signers()
        verifiers: list[NoteVerifier] = []
        for pin in self.pins:
            try:
                verifiers.append(pin.verifier(checkpoint.origin))
            except EvidenceError:
                continue  # an origin that is not a valid key name matches no pin
        try:
            note = open_note(parsed.data, verifiers)
        except NoteSignatureInvalidError as exc:
            self.fail(
                "checkpoint.signature",
                f"{exc.message}: the checkpoint was altered after it was signed",
                file=CHECKPOINT,
                code=exc.code,
            )
            return
        except NoteUntrustedError as exc:
            claimed = [c for c in self.report.claimed_signers if c.get("valid")]
            self.fail(
                "checkpoint.trust",
                f"{exc.message}; pinned: "
                + (", ".join(f"{pin.name or '*'} {pin.public_key.fingerprint()[:16]}" for pin in self.pins) or "none")
                + (
                    "; the bundle names its own signer key "
                    + ", ".join(str(c["vkey"]) for c in claimed)
                    + ", which is never trusted unless pinned"
                    if claimed
                    else ""
                ),
                file=CHECKPOINT,
                code=exc.code,
            )
            return
        if self.origin is not None and checkpoint.origin != self.origin:
            self.fail(
                "checkpoint.origin",
                f"the checkpoint is for the log {checkpoint.origin!r}, expected {self.origin!r}",
                file=CHECKPOINT,
            )
            return
        for signature in note.signatures:
            match = next(
                (
                    p
                    for p in self.pins
                    if (p.name or checkpoint.origin) == signature.name
                    and p.public_key.key_id(signature.name) == signature.key_id
                ),
                None,
            )
            self.report.trusted_by.append(
                {
                    "name": signature.name,
                    "key_id": f"{signature.key_id:08x}",
                    "fingerprint": match.public_key.fingerprint() if match else None,
                    "source": match.source if match else None,
                }
            )

    def _claimed_signers(self) -> None:
        manifest = self.manifest or {}
        claimed = manifest.get("signers", [])
        if not isinstance(claimed, list):
            self.fail("manifest.format", "signers must be a list of verifier keys", file=MANIFEST)
            return
        for vkey in claimed:
            entry: dict[str, Any] = {"vkey": vkey, "valid": False, "pinned": False}
            try:
                verifier = NoteVerifier.from_vkey(str(vkey))
            except EvidenceError as exc:
                entry["error"] = exc.code
                self.report.notes.append(
                    f"the bundle names a signer key that is rejected ({exc.code}): {exc.message}"
                )
            else:
                entry["valid"] = True
                entry["pinned"] = any(p.public_key == verifier.public_key for p in self.pins)
            self.report.claimed_signers.append(entry)

    # -- entries and proofs --------------------------------------------------------------
    def check_entries(self) -> None:
        if ENTRIES not in self.files:
            return
        if not self.parsed.entries_complete:
            self.fail("entry.format", "the file does not end with a newline (truncated?)", file=ENTRIES)
        previous: Entry | None = None
        for line in self.parsed.entry_lines:
            number, entry = line.number, line.entry
            if entry is None:
                assert line.error is not None
                run, seq = line.claimed_run, line.claimed_seq
                named = ", ".join(
                    part
                    for part in (
                        f"run {run}" if run is not None else "",
                        f"seq {seq}" if seq is not None else "",
                    )
                    if part
                )
                self.fail(
                    "entry.format",
                    f"line {number}" + (f" ({named})" if named else "") + f": {line.error.message}",
                    file=ENTRIES,
                    code=line.error.code,
                    run=run,
                    seq=seq,
                )
                continue
            if previous is not None and entry.seq <= previous.seq:
                self.fail(
                    "entry.order",
                    f"line {number}: seq {entry.seq} does not follow seq {previous.seq} "
                    "(entries are reordered or duplicated)",
                    file=ENTRIES,
                    run=entry.run,
                    i=entry.i,
                    seq=entry.seq,
                )
            previous = entry
        self.report.entries = len(self.entries)

    def check_proofs(self) -> None:
        proofs = self.parsed.proofs
        if proofs is None or ENTRIES not in self.files:
            return
        if not proofs.complete:
            self.fail("proof.format", "the file does not end with a newline (truncated?)", file=PROOFS)
        entry_lines = len(self.parsed.entry_lines)
        if len(proofs.lines) != entry_lines:
            self.fail("proof.format", f"{len(proofs.lines)} proofs for {entry_lines} entries", file=PROOFS)
        by_number = {item.number: item.entry for item in self.entries}
        checkpoint = self.checkpoint
        inclusion = InclusionVerifier(checkpoint.size, checkpoint.root) if checkpoint else None
        for number, proof in enumerate(proofs.lines, 1):
            entry = by_number.get(number)
            if entry is None:
                continue
            where = {"run": entry.run, "i": entry.i, "seq": entry.seq}
            if proof is None:
                self.fail(
                    "proof.format",
                    f"line {number}: not the canonical JSON of {{hash, proof, seq}} with hex hashes",
                    file=PROOFS,
                    **where,
                )
                continue
            if proof.seq != entry.seq or proof.digest != entry.hash:
                self.fail(
                    "entry.hash",
                    f"line {number}: the proof is for seq {proof.seq} with entry hash "
                    f"{proof.digest[:16]}..., the entry is seq {entry.seq} with hash "
                    f"{entry.hash[:16]}...",
                    file=PROOFS,
                    **where,
                )
                continue
            if checkpoint is None or inclusion is None:
                continue
            if entry.seq >= checkpoint.size:
                self.fail(
                    "entry.inclusion",
                    f"seq {entry.seq} is not covered by the checkpoint (size {checkpoint.size})",
                    file=ENTRIES,
                    **where,
                )
                continue
            try:
                inclusion.verify(entry.seq, leaf_hash(entry.line), proof.nodes)
            except ProofError as exc:
                self.fail(
                    "entry.inclusion",
                    f"the entry is not in the checkpoint's tree: {exc.message}",
                    file=ENTRIES,
                    code=exc.code,
                    **where,
                )

    # -- runs, admin entries, payloads ----------------------------------------------------
    def check_admin(self) -> None:
        for line in self.parsed.entry_lines:
            entry = line.entry
            if entry is None or entry.run != ADMIN_RUN:
                continue
            if entry.kind in (POLICY_KIND, PROVENANCE_KIND):
                continue
            if entry.kind != REDACTION_KIND:
                self.fail(
                    "admin.kind",
                    f"admin entry of kind {entry.kind!r} (a bundle carries only "
                    f"{POLICY_KIND}, {PROVENANCE_KIND} and {REDACTION_KIND})",
                    file=ENTRIES,
                    run=entry.run,
                    i=entry.i,
                    seq=entry.seq,
                )
                continue
            redaction = line.redaction
            if isinstance(redaction, EvidenceError):
                self.fail(
                    "redaction.format", redaction.message, file=ENTRIES, run=entry.run, i=entry.i,
                    seq=entry.seq, code=redaction.code,
                )
                continue

    def check_payloads(self) -> None:
        referenced: dict[str, Entry] = {}
        for item in self.entries:
            if item.entry.payload is not None:
                referenced.setdefault(item.entry.payload, item.entry)
        present = self.parsed.present
        for name, payload in self.parsed.payloads.items():
            digest = payload.digest
            if not payload.intact:
                user = referenced.get(digest)
                self.fail(
                    "payload.hash",
                    f"the file's bytes hash to {payload.actual}, not to its name",
                    file=name,
                    run=user.run if user else None,
                    i=user.i if user else None,
                    seq=user.seq if user else None,
                )
                continue
            if digest not in referenced:
                self.fail("payload.unreferenced", "no entry of the bundle refers to this payload", file=name)
        self.report.payloads = len(present & set(referenced))
        redacted = 0
        for digest, entry in referenced.items():
            if digest in present:
                continue
            if digest in self.redactions:
                redacted += 1
                continue
            self.fail(
                "payload.missing",
                f"payload {digest} is neither in the bundle nor redacted by a redaction entry",
                file=f"{PAYLOAD_DIR}/{digest}.json",
                run=entry.run,
                i=entry.i,
                seq=entry.seq,
            )
        self.report.redacted = redacted

    def check_runs(self) -> None:
        self.report.runs = RunChecks(
            self.parsed, self.fail, self.report.notes, allow_open=self.allow_open, required_runs=self.required_runs
        ).check()

    # -- the manifest's summary ------------------------------------------------------------
    def check_summary(self) -> None:
        manifest = self.manifest
        if manifest is None:
            return
        if self.checkpoint is not None:
            expected = {
                "origin": self.checkpoint.origin,
                "size": self.checkpoint.size,
                "root": self.checkpoint.root.hex(),
            }
            if manifest.get("checkpoint") != expected:
                self.fail(
                    "manifest.summary",
                    f"the manifest's checkpoint {manifest.get('checkpoint')!r} is not the one in "
                    f"checkpoint.note {expected!r}",
                    file=MANIFEST,
                )
        runs = manifest.get("runs")
        derived = {run.run: run.summary() for run in self.report.runs}
        if not isinstance(runs, list):
            self.fail("manifest.summary", "runs must be a list", file=MANIFEST)
        else:
            claimed: dict[str, Any] = {
                str(run.get("run")): run for run in runs if isinstance(run, dict)
            }
            for name in sorted(set(claimed) | set(derived), key=str):
                if claimed.get(name) != derived.get(name):
                    self.fail(
                        "manifest.summary",
                        f"the manifest describes run {name} as {claimed.get(name)!r}, the entries "
                        f"say {derived.get(name)!r}",
                        file=MANIFEST,
                        run=str(name),
                    )
        policies = sorted(
            {
                item.entry.payload
                for item in self.entries
                if item.entry.run == ADMIN_RUN and item.entry.kind == POLICY_KIND and item.entry.payload
            }
        )
        if manifest.get("policies") != policies:
            self.fail(
                "manifest.summary",
                f"the manifest lists policies {manifest.get('policies')!r}, the bundle holds {policies!r}",
                file=MANIFEST,
            )
        redacted = sorted(
            (
                {"payload": digest, "redactions": [e.seq for e, _ in self.redactions[digest]]}
                for digest in {
                    item.entry.payload for item in self.entries if item.entry.payload
                }
                if digest in self.redactions and digest not in self.parsed.present
            ),
            key=lambda item: str(item["payload"]),
        )
        if manifest.get("redacted") != redacted:
            self.fail(
                "manifest.summary",
                "the manifest's list of redacted payloads differs from the bundle's",
                file=MANIFEST,
            )

    def run(self, progress: Callable[[int, int], None] | None = None) -> BundleReport:
        checks = [
            self.check_container, self.check_manifest, self.check_checkpoint, self.check_entries,
            self.check_proofs, self.check_admin, self.check_payloads, self.check_runs, self.check_summary,
        ]
        for done, check in enumerate(checks, 1):
            check()
            if progress is not None:
                progress(done, len(checks))
        return self.report


def verify_bundle(
    bundle: Path | BundleFiles,
    pinned: Sequence[PinnedKey],
    *,
    origin: str | None = None,
    allow_open: bool = False,
    required_runs: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> BundleReport:
    """Verify a bundle (a path: directory, ``.zip`` or ``.tar``; or files already read)
    against the pinned keys. Never raises for a bad bundle: everything found is in the
    report. ``origin`` additionally pins the log's origin; ``allow_open`` accepts runs that
    have not ended; ``required_runs`` must all be in the bundle. ``progress`` is called with
    (checks done, checks) after each of the checks."""
    files = bundle if isinstance(bundle, BundleFiles) else read_bundle_files(Path(bundle))
    return _Checker(parse_bundle(files), pinned, origin, allow_open, required_runs).run(progress)
