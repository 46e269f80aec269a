"""Parsing an evidence bundle's files into what they say, before anything is checked.

:func:`parse_bundle` reads every file of a bundle once: the manifest's JSON, the signed
checkpoint note, each line of ``entries.jsonl`` and ``proofs.jsonl``, each payload file
(its SHA-256 and its JSON document) and each redaction record. It decides nothing and
reports nothing: what could not be parsed is kept beside what could (an entry line's error
and the run and seq it claims), what a payload's state is (present, a field redaction's
copy with its redacted members hidden, wholly redacted, missing) is a question to it, and :mod:`tracelock.evidence.verify` turns the parsed
bundle into the report, check by check. No store, no network.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from tracelock.core.canonical import CanonicalError, dumps
from tracelock.core.entry import (
    ADMIN_RUN,
    REDACTION_KIND,
    Entry,
    EntryFormatError,
    claimed_position,
    parse_entry,
)
from tracelock.core.fingerprint import HiddenValue
from tracelock.core.hashing import is_hex_digest
from tracelock.errors import EvidenceError
from tracelock.evidence.bundle_files import (
    CHECKPOINT,
    ENTRIES,
    MANIFEST,
    PAYLOAD_DIR,
    PROOFS,
    BundleFiles,
)
from tracelock.evidence.checkpoint import Checkpoint
from tracelock.evidence.note import NoteSignature, parse_note
from tracelock.evidence.redaction_format import Redaction, parse_redaction

__all__ = [
    "PAYLOAD_FILE_LEN",
    "EntryLine",
    "ParsedBundle",
    "ParsedCheckpoint",
    "ParsedManifest",
    "ParsedPayload",
    "ParsedProofs",
    "ProofLine",
    "parse_bundle",
    "payload_digest",
]

#: Length of a payload file's name: ``payloads/<64 hex digits>.json``.
PAYLOAD_FILE_LEN = len(PAYLOAD_DIR) + 1 + 64 + len(".json")
#: A proofs.jsonl line in canonical form: {"hash": hex, "proof": [hex, ...], "seq": int}.
_PROOF_LINE = re.compile(
    rb'\{"hash":"([0-9a-f]{64})","proof":\[((?:"[0-9a-f]{64}")(?:,"[0-9a-f]{64}")*)?\],'
    rb'"seq":(0|[1-9][0-9]{0,15})\}'
)


def split_lines(data: bytes) -> tuple[list[bytes], bool]:
    """Lines of a JSON-lines file, and whether it ended with a newline."""
    if not data:
        return [], True
    complete = data.endswith(b"\n")
    lines = data.split(b"\n")
    if complete:
        lines.pop()
    return lines, complete


def payload_digest(name: str) -> str | None:
    """The hash a payload file's name gives (``payloads/<hash>.<4 characters>``; only
    ``.json`` is a valid name, which the container check says), None for any other name."""
    if not name.startswith(PAYLOAD_DIR + "/") or len(name) != PAYLOAD_FILE_LEN:
        return None
    digest = name[len(PAYLOAD_DIR) + 1 : -5]
    return digest if is_hex_digest(digest) else None


@dataclass
class ParsedManifest:
    """``manifest.json``: its document (None when not JSON, then ``error`` says why) and
    whether its bytes are the canonical form of that document with a final newline."""

    doc: Any
    error: str | None
    canonical: bool


@dataclass
class ParsedCheckpoint:
    """``checkpoint.note``: the note's bytes and, when it parses, its checkpoint and the
    signature lines it carries (``error`` otherwise)."""

    data: bytes
    checkpoint: Checkpoint | None
    signatures: list[NoteSignature]
    error: EvidenceError | None


@dataclass
class EntryLine:
    """One line of ``entries.jsonl``: its entry, or why it is none and the run and seq the
    line claims; for an admin ``payload.redact`` entry, its redaction record (or why the
    record is malformed)."""

    number: int  # 1-based
    entry: Entry | None
    error: EntryFormatError | None = None
    claimed_run: str | None = None
    claimed_seq: int | None = None
    redaction: Redaction | EvidenceError | None = None


@dataclass
class ProofLine:
    """One line of ``proofs.jsonl`` in canonical form: the entry hash and seq it names, and
    its inclusion proof's nodes."""

    digest: str
    seq: int
    nodes: list[bytes]


@dataclass
class ParsedProofs:
    """``proofs.jsonl``: each line (None where it is not a canonical proof line)."""

    lines: list[ProofLine | None]
    complete: bool


@dataclass
class ParsedPayload:
    """A file named for a payload (:func:`payload_digest`): the hash of its bytes and, when that is its
    name, its JSON document (``parsed`` False when the bytes are not JSON)."""

    name: str
    digest: str
    actual: str
    doc: Any = None
    parsed: bool = False

    @property
    def intact(self) -> bool:
        return self.actual == self.digest


@dataclass
class ParsedBundle:
    """Everything a bundle's files say, parsed once."""

    files: BundleFiles
    manifest: ParsedManifest | None = None
    checkpoint: ParsedCheckpoint | None = None
    entry_lines: list[EntryLine] = field(default_factory=list)
    entries_complete: bool = True
    proofs: ParsedProofs | None = None
    #: Payload files by name, in name order.
    payloads: dict[str, ParsedPayload] = field(default_factory=dict)
    #: Payloads whose file exists under its name and hashes to it: a file that fails its
    #: hash counts as absent everywhere (docs/spec.md 8.3).
    present: set[str] = field(default_factory=set)
    #: The well-formed redaction records of the admin chain, by the payload each redacts,
    #: in journal order.
    redactions: dict[str, list[tuple[Entry, Redaction]]] = field(default_factory=dict)

    @property
    def entries(self) -> list[tuple[int, Entry]]:
        """(line number, entry) of every line that is an entry, in file order."""
        return [(line.number, line.entry) for line in self.entry_lines if line.entry is not None]

    def payload(self, digest: str) -> ParsedPayload | None:
        """The file ``payloads/<digest>.json``, if the bundle has it."""
        return self.payloads.get(f"{PAYLOAD_DIR}/{digest}.json")

    def doc(self, digest: str | None) -> Any:
        """The document of payload ``digest`` when its file is intact and JSON, else None."""
        payload = self.payload(digest) if digest is not None else None
        return payload.doc if payload is not None and payload.intact and payload.parsed else None

    def payload_state(self, entry: Entry) -> tuple[str, Any, Redaction | None]:
        """(state, document, redaction) of an entry's payload. States: ``none`` (no
        payload), ``present``, ``copy`` (a field redaction: its copy, redacted members
        hidden), ``redacted`` (wholly), ``missing`` (absent or damaged: reported elsewhere)."""
        digest = entry.payload
        if digest is None:
            return "none", None, None
        payload = self.payload(digest)
        if payload is not None and payload.intact and payload.parsed:
            return "present", payload.doc, None
        if digest in self.present:
            return "missing", None, None  # its bytes hash right but are not a JSON document
        records = [r for _, r in self.redactions.get(digest, [])]
        if not records:
            return "missing", None, None
        with_copy = [r for r in records if r.copy is not None and r.fields]
        if with_copy:
            redaction = with_copy[-1]
            assert redaction.copy is not None and redaction.fields is not None
            copy = dict(redaction.copy)
            for name in redaction.fields:
                copy[name] = HiddenValue(copy[name]["hash"])
            return "copy", copy, redaction
        return "redacted", None, records[-1]


def _manifest(data: bytes) -> ParsedManifest:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return ParsedManifest(None, str(exc), False)
    try:
        canonical = dumps(doc) + b"\n" == data
    except CanonicalError:
        canonical = False
    return ParsedManifest(doc, None, canonical)


def _checkpoint(data: bytes) -> ParsedCheckpoint:
    try:
        text, signatures = parse_note(data)
        checkpoint = Checkpoint.from_body(text)
    except EvidenceError as exc:
        return ParsedCheckpoint(data, None, [], exc)
    return ParsedCheckpoint(data, checkpoint, list(signatures), None)


def _entry_line(number: int, line: bytes) -> EntryLine:
    try:
        return EntryLine(number, parse_entry(line))
    except EntryFormatError as exc:
        run, seq = claimed_position(line)
        return EntryLine(number, None, exc, run, seq)


def _proof_line(line: bytes) -> ProofLine | None:
    match = _PROOF_LINE.fullmatch(line)
    if match is None:
        return None
    digest, nodes_text, seq_text = match.groups()
    raw = bytes.fromhex(nodes_text.replace(b'","', b"")[1:-1].decode()) if nodes_text else b""
    return ProofLine(digest.decode(), int(seq_text), [raw[k : k + 32] for k in range(0, len(raw), 32)])


def _payload(name: str, digest: str, data: bytes) -> ParsedPayload:
    payload = ParsedPayload(name, digest, hashlib.sha256(data).hexdigest())
    if payload.intact:
        with contextlib.suppress(orjson.JSONDecodeError):
            payload.doc, payload.parsed = orjson.loads(data), True
    return payload


def parse_bundle(bundle: BundleFiles) -> ParsedBundle:
    """Parse every file of ``bundle``; never raises for what a file holds."""
    files = bundle.files
    parsed = ParsedBundle(bundle)
    if MANIFEST in files:
        parsed.manifest = _manifest(files[MANIFEST])
    if CHECKPOINT in files:
        parsed.checkpoint = _checkpoint(files[CHECKPOINT])
    for name, data in sorted(files.items()):
        digest = payload_digest(name)
        if digest is not None:
            payload = parsed.payloads[name] = _payload(name, digest, data)
            if payload.intact:
                parsed.present.add(digest)
    if ENTRIES in files:
        lines, parsed.entries_complete = split_lines(files[ENTRIES])
        parsed.entry_lines = [_entry_line(number, line) for number, line in enumerate(lines, 1)]
        for line in parsed.entry_lines:
            entry = line.entry
            if entry is not None and entry.run == ADMIN_RUN and entry.kind == REDACTION_KIND:
                try:
                    redaction = parse_redaction(entry, parsed.doc(entry.payload))
                except EvidenceError as exc:
                    line.redaction = exc
                    continue
                line.redaction = redaction
                parsed.redactions.setdefault(redaction.payload, []).append((entry, redaction))
    if PROOFS in files:
        lines, complete = split_lines(files[PROOFS])
        parsed.proofs = ParsedProofs([_proof_line(line) for line in lines], complete)
    return parsed
