"""The journal entry: its canonical line layout, its hash, and the per-run chain rules.

An entry is one line of canonical JSON (RFC 8785) with exactly these members::

    {"i": <index within the run>, "kind": <entry kind>, ["meta": {...},]
     "payload": <hex SHA-256 of the payload's canonical bytes> | null,
     "prev": <hex hash of the run's previous entry> | null,
     "run": <run id>, "seq": <position in the store's journal>, "ts": <wall clock, ms>, "v": 1}

The entry hash is ``SHA-256(line)`` (the line without its newline). Entries of one run form
a hash chain through ``prev``; ``seq`` numbers every entry of the store from 0 without gaps.
``ts`` is covered by the chain (it cannot be altered unnoticed) but by no determinism hash.
This module is pure: it builds, parses and checks lines; it never touches a file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from tracelock.core.canonical import dumps
from tracelock.errors import CanonicalError, StoreError

__all__ = [
    "ADMIN_RUN",
    "FORMAT_VERSION",
    "POLICY_KIND",
    "PROVENANCE_KIND",
    "REDACTION_KIND",
    "TERMINAL_KINDS",
    "ChainChecker",
    "ChainIssue",
    "Entry",
    "EntryFormatError",
    "build_entry",
    "build_next",
    "claimed_position",
    "encode_entry",
    "entry_hash",
    "parse_entry",
    "split_line",
    "valid_run_id",
]

FORMAT_VERSION = 1

#: Kinds that close a run's chain: no entry of that run may follow.
TERMINAL_KINDS = frozenset({"run.end"})

#: The store's own chain (redactions and other store-level records). It never terminates and
#: is not a run: user run ids may not take this value.
ADMIN_RUN = "tracelock:admin"

#: Kind of the admin entry that records a payload's removal; ``meta`` names the payload.
REDACTION_KIND = "payload.redact"

#: Kinds of the admin entries that keep a document once for every run that names its hash
#: (a ``run.start`` payload's ``policy`` and ``provenance`` members).
POLICY_KIND = "policy.register"
PROVENANCE_KIND = "provenance.register"

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_KIND = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEYS = frozenset({"i", "kind", "payload", "prev", "run", "seq", "ts", "v"})
# Strings already known to pass the patterns above (a bounded memo: validation is pure, the
# memo only saves repeating it for every entry of the same run).
_VALID_RUNS: set[str] = set()
_VALID_KINDS: set[str] = set()
_KEYS_META = _KEYS | {"meta"}
_MAX = MAX_INTEGER = 2**53 - 1


class EntryFormatError(StoreError):
    """A journal line is not a well-formed, canonical version-1 entry."""

    code = "JOURNAL_MALFORMED_ENTRY"


def valid_run_id(run: str) -> bool:
    """Run ids are 1-128 characters of ``A-Z a-z 0-9 . _ : -``, starting alphanumeric."""
    return _RUN_ID.fullmatch(run) is not None


class Entry(NamedTuple):
    """One journal entry, with its canonical line and that line's hash.

    A named tuple rather than a frozen dataclass: as immutable, and several times cheaper to
    build, which matters on the append path (one per entry).
    """

    seq: int
    run: str
    i: int
    kind: str
    payload: str | None
    prev: str | None
    ts: int
    meta: dict[str, Any] | None
    line: bytes
    hash: str

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "seq": self.seq,
            "run": self.run,
            "i": self.i,
            "kind": self.kind,
            "payload": self.payload,
            "prev": self.prev,
            "ts": self.ts,
        }
        if self.meta:
            doc["meta"] = self.meta
        return doc


def encode_entry(
    *,
    seq: int,
    run: str,
    i: int,
    kind: str,
    payload: str | None,
    prev: str | None,
    ts: int,
    meta: dict[str, Any] | None = None,
) -> Entry:
    """Build the canonical line of an entry and hash it.

    The members are written in RFC 8785 order by a fixed template: run ids and kinds are
    restricted to characters JSON never escapes, hashes are hex and numbers are integers, so
    the template's output is exactly ``canonical.dumps`` of the entry object (a test checks
    this against the general encoder).
    """
    if payload is not None and not _HEX64.fullmatch(payload):
        raise EntryFormatError(f"payload must be a hex SHA-256 digest, got {payload!r}")
    if prev is not None and not _HEX64.fullmatch(prev):
        raise EntryFormatError(f"prev must be a hex SHA-256 digest, got {prev!r}")
    return build_entry(seq, run, i, kind, payload, prev, ts, meta)


_new_tuple = tuple.__new__


def build_next(
    seq: int, run: str, head: tuple[int, str] | None, kind: str, payload: str | None, ts: int, meta: dict[str, Any] | None
) -> Entry:
    """:func:`build_entry` for the entry after ``head``, the run's last (index, hash), or
    the run's first entry when ``head`` is None."""
    if head is None:
        return build_entry(seq, run, 0, kind, payload, None, ts, meta)
    return build_entry(seq, run, head[0] + 1, kind, payload, head[1], ts, meta)


def build_entry(
    seq: int,
    run: str,
    i: int,
    kind: str,
    payload: str | None,
    prev: str | None,
    ts: int,
    meta: dict[str, Any] | None = None,
) -> Entry:
    """:func:`encode_entry` for a caller whose ``payload`` and ``prev`` are hex digests it
    computed itself (a store's append path): everything else is still checked. Positional,
    unlike ``encode_entry``: it runs once per append."""
    if run not in _VALID_RUNS:
        if not _RUN_ID.fullmatch(run):
            raise EntryFormatError(f"invalid run id {run!r}")
        if len(_VALID_RUNS) >= 4096:
            _VALID_RUNS.clear()
        _VALID_RUNS.add(run)
    if kind not in _VALID_KINDS:
        if not _KIND.fullmatch(kind):
            raise EntryFormatError(f"invalid entry kind {kind!r}")
        if len(_VALID_KINDS) < 256:
            _VALID_KINDS.add(kind)
    if not (
        type(seq) is int and type(i) is int and type(ts) is int
        and 0 <= seq <= _MAX and 0 <= i <= _MAX and 0 <= ts <= _MAX
    ):
        for name, number in (("seq", seq), ("i", i), ("ts", ts)):
            if type(number) is not int or not 0 <= number <= _MAX:
                raise EntryFormatError(f"{name} must be a non-negative safe integer, got {number!r}")
    if (i == 0) != (prev is None):
        raise EntryFormatError("prev is null exactly for the first entry of a run")
    # One formatted ASCII string: every member but meta is ASCII by the checks above, and
    # meta is canonical JSON (UTF-8) spliced in as bytes.
    payload_text = "null" if payload is None else f'"{payload}"'
    prev_text = "null" if prev is None else f'"{prev}"'
    head = f'{{"i":{i},"kind":"{kind}",'
    tail = f'"payload":{payload_text},"prev":{prev_text},"run":"{run}","seq":{seq},"ts":{ts},"v":{FORMAT_VERSION}}}'
    if meta:
        line = head.encode() + b'"meta":' + dumps(meta) + b"," + tail.encode()
    else:
        line = (head + tail).encode()
    # ``tuple.__new__`` directly: the named tuple's own ``__new__`` is a Python function, and
    # skipping that frame saves about a tenth of this function's cost outside the hash.
    return _new_tuple(Entry, (seq, run, i, kind, payload, prev, ts, meta or None, line, hashlib.sha256(line).hexdigest()))


def split_line(entry: Entry) -> tuple[bytes, bytes, bytes]:
    """The entry's line around the values of its ``prev`` and ``seq`` members: ``(a, b, c)``
    with ``line == a + prev + b + seq + c``, where ``prev`` is that member's JSON text (a
    quoted hash or ``null``) and ``seq`` its digits. A store that numbers entries where it
    commits them (PostgreSQL's append function) builds the line from these. The top-level
    members are the last of their names in the line: only ``run``, ``seq``, ``ts`` and ``v``
    follow them, and none of those can hold a quote."""
    line = entry.line
    prev = b"null" if entry.prev is None else b'"' + entry.prev.encode() + b'"'
    seq = str(entry.seq).encode()
    at_prev = line.rindex(b',"prev":') + 8
    at_seq = line.rindex(b',"seq":') + 7
    if line[at_prev : at_prev + len(prev)] != prev or line[at_seq : at_seq + len(seq)] != seq:
        raise EntryFormatError(f"entry {entry.seq} of run {entry.run!r} is not in its canonical layout")
    return line[:at_prev], line[at_prev + len(prev) : at_seq], line[at_seq + len(seq) :]


def entry_hash(line: bytes) -> str:
    """The hash of an entry: SHA-256 of its canonical line (no newline), hex."""
    return hashlib.sha256(line).hexdigest()


# The canonical layout of an entry, as one pattern: JCS member order, no whitespace, integers
# without leading zeros or signs, lowercase hex hashes, restricted run ids and kinds. A line
# this matches (with a canonical ``meta`` object, checked separately) is exactly what
# ``encode_entry`` writes for the same fields, so matching it proves the canonical form
# without re-serializing the whole line.
ENTRY_LINE = _LINE = re.compile(
    rb'\{"i":(0|[1-9][0-9]{0,15}),"kind":"([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)",'
    rb'(?:"meta":(\{.*\}),)?"payload":(?:null|"([0-9a-f]{64})"),'
    rb'"prev":(?:null|"([0-9a-f]{64})"),"run":"([A-Za-z0-9][A-Za-z0-9._:-]{0,127})",'
    rb'"seq":(0|[1-9][0-9]{0,15}),"ts":(0|[1-9][0-9]{0,15}),"v":([0-9]+)\}'
)


#: Meta texts already found canonical (a pure function of the bytes): most entries of a
#: store share a few (``{"status":"completed"}``...), and checking one re-serializes it.
_CANONICAL_METAS: set[bytes] = set()
_CANONICAL_METAS_KEPT = 4096


def parse_entry(line: bytes) -> Entry:
    """Parse one journal line (without newline) and check it is a canonical v1 entry."""
    match = _LINE.fullmatch(line)
    if match is None:
        return _diagnose(line)
    i_text, kind, meta_text, payload, prev, run, seq_text, ts_text, version = match.groups()
    if version != b"1":
        raise EntryFormatError(f"unsupported entry format version {version.decode()}")
    i, seq, ts = int(i_text), int(seq_text), int(ts_text)
    if i > _MAX or seq > _MAX or ts > _MAX:
        raise EntryFormatError("an integer member exceeds 2**53-1")
    if (i == 0) != (prev is None):
        raise EntryFormatError("prev is null exactly for the first entry of a run")
    meta = None
    if meta_text is not None:
        try:
            meta = orjson.loads(meta_text)
        except orjson.JSONDecodeError as exc:
            raise EntryFormatError(f"meta is not JSON: {exc}") from None
        if meta_text not in _CANONICAL_METAS:
            try:
                canonical = isinstance(meta, dict) and bool(meta) and dumps(meta) == meta_text
            except CanonicalError as exc:  # e.g. an integer outside the I-JSON range
                raise EntryFormatError(f"meta cannot be canonical: {exc.message}") from None
            if not canonical:
                raise EntryFormatError("meta must be a non-empty object in canonical form")
            if len(_CANONICAL_METAS) >= _CANONICAL_METAS_KEPT:
                _CANONICAL_METAS.clear()
            _CANONICAL_METAS.add(meta_text)
    return Entry(
        seq,
        run.decode("ascii"),
        i,
        kind.decode("ascii"),
        None if payload is None else payload.decode("ascii"),
        None if prev is None else prev.decode("ascii"),
        ts,
        meta,
        line,
        hashlib.sha256(line).hexdigest(),
    )


def claimed_position(line: bytes) -> tuple[str | None, int | None]:
    """The ``run`` and ``seq`` a malformed entry line claims, when it says (to name it in a
    report; nothing is decided on them)."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    run = doc.get("run")
    seq = doc.get("seq")
    return (
        run if isinstance(run, str) else None,
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
    )


def _diagnose(line: bytes) -> Entry:
    """Explain why a line is not a canonical entry (the slow path, for error messages)."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise EntryFormatError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise EntryFormatError("an entry must be a JSON object")
    keys = doc.keys()
    if keys not in (_KEYS, _KEYS_META):
        missing = sorted(_KEYS - keys)
        extra = sorted(keys - _KEYS_META)
        raise EntryFormatError(f"wrong members (missing {missing}, unexpected {extra})")
    if doc["v"] != FORMAT_VERSION:
        raise EntryFormatError(f"unsupported entry format version {doc['v']!r}")
    for name in ("run", "kind"):
        if not isinstance(doc[name], str):
            raise EntryFormatError(f"{name} must be a string")
    for name in ("payload", "prev"):
        if doc[name] is not None and not isinstance(doc[name], str):
            raise EntryFormatError(f"{name} must be a string or null")
    try:
        entry = encode_entry(
            seq=doc["seq"],
            run=doc["run"],
            i=doc["i"],
            kind=doc["kind"],
            payload=doc["payload"],
            prev=doc["prev"],
            ts=doc["ts"],
            meta=doc.get("meta"),
        )
    except CanonicalError as exc:  # parse_entry raises EntryFormatError only, as above
        raise EntryFormatError(f"meta cannot be canonical: {exc.message}") from None
    if entry.line != line:
        raise EntryFormatError("entry is not in canonical form")
    raise EntryFormatError("entry does not match the version-1 layout")


@dataclass(frozen=True, slots=True)
class ChainIssue:
    """Why an entry breaks the journal's rules."""

    code: str
    seq: int
    run: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "seq": self.seq, "run": self.run, "message": self.message}


class ChainChecker:
    """Checks, entry by entry in journal order, the store-wide numbering and each run's chain.

    Memory is bounded by the number of runs still open (a run's state is dropped at its
    terminal entry), not by the length of the journal.
    """

    def __init__(
        self,
        first_seq: int = 0,
        lookup: Callable[[str], tuple[int, str] | None] | None = None,
        closed: Callable[[str], bool] | None = None,
    ) -> None:
        self.next_seq = first_seq
        self._heads: dict[str, tuple[int, str]] = {}
        # Runs whose chain a run.end closed (chain rule 4: closed for good), as the first 16
        # bytes of the SHA-256 of the id: memory grows with the number of runs, not entries.
        self._closed: set[bytes] = set()
        # When checking from the middle of a journal, heads of runs opened earlier come from
        # ``lookup`` (the index); None there means the run is unknown or already closed, and
        # ``closed`` tells the two apart for runs that ended before the checked part.
        self._lookup = lookup
        self._closed_before = closed

    @classmethod
    def resume(
        cls,
        next_seq: int,
        heads: dict[str, tuple[int, str]],
        closed: Callable[[str], bool] | None = None,
    ) -> ChainChecker:
        """A checker that continues from a known position (used after a fast pre-check)."""
        checker = cls(next_seq, closed=closed)
        checker._heads = dict(heads)
        return checker

    def check(self, entry: Entry) -> ChainIssue | None:
        """Advance over ``entry``; return the first rule it breaks, or None."""
        expected_seq = self.next_seq
        self.next_seq = entry.seq + 1
        if entry.seq != expected_seq:
            return ChainIssue(
                "JOURNAL_SEQ_GAP",
                entry.seq,
                entry.run,
                f"expected seq {expected_seq}, found {entry.seq} "
                "(an entry was deleted, inserted, reordered or duplicated)",
            )
        head = self._heads.get(entry.run)
        if head is None and entry.i != 0 and self._lookup is not None:
            head = self._lookup(entry.run)
        if head is None:
            if self._has_ended(entry.run):
                return ChainIssue(
                    "JOURNAL_CHAIN_BROKEN",
                    entry.seq,
                    entry.run,
                    f"run {entry.run} continues after its run.end (a run's chain is closed for good)",
                )
            if entry.i != 0:
                return ChainIssue(
                    "JOURNAL_CHAIN_BROKEN",
                    entry.seq,
                    entry.run,
                    f"run {entry.run} starts at index {entry.i}, not 0 "
                    "(its first entries are missing, or it continues after its end)",
                )
        else:
            last_i, last_hash = head
            if entry.i != last_i + 1:
                return ChainIssue(
                    "JOURNAL_CHAIN_BROKEN",
                    entry.seq,
                    entry.run,
                    f"run {entry.run}: expected index {last_i + 1}, found {entry.i}",
                )
            if entry.prev != last_hash:
                return ChainIssue(
                    "JOURNAL_CHAIN_BROKEN",
                    entry.seq,
                    entry.run,
                    f"run {entry.run} index {entry.i}: prev does not match the hash of "
                    "the run's previous entry",
                )
        if entry.kind in TERMINAL_KINDS:
            self._heads.pop(entry.run, None)
            self._closed.add(_run_key(entry.run))
        else:
            self._heads[entry.run] = (entry.i, entry.hash)
        return None

    def _has_ended(self, run: str) -> bool:
        if _run_key(run) in self._closed:
            return True
        return self._closed_before is not None and self._closed_before(run)


def _run_key(run: str) -> bytes:
    return hashlib.sha256(run.encode()).digest()[:16]
