"""Verification of a store (``tracelock verify --store``, ``verify RUN``), whatever its backend:
:func:`verify_store` hands the whole journal to the backend's own verifier (the directory
store's journal file: :mod:`tracelock.storage.directory.verify`; PostgreSQL's rows:
:mod:`tracelock.storage.postgres.verify`), both giving a :class:`VerifyReport` with the same
checks and issue codes where they apply; :func:`verify_run` checks one run through the
``Store`` protocol alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracelock.core.entry import ChainIssue
from tracelock.core.steps import StepChecker
from tracelock.storage.backend import Store
from tracelock.storage.errors import JournalCorruptError
from tracelock.storage.merkle_stream import MerkleStream
from tracelock.storage.verify_report import INDEX_TAMPERED, VerifyReport

__all__ = ["INDEX_TAMPERED", "VerifyReport", "verify_run", "verify_store"]


def _issue(code: str, seq: int, run: str | None, message: str) -> ChainIssue:
    return ChainIssue(code, seq, run, message)


def verify_store(
    store: Store,
    *,
    progress: Callable[[int], None] | None = None,
    merkle: MerkleStream | None = None,
    compare_index: bool = False,
    steps: bool = True,
) -> VerifyReport:
    """Verify the whole journal: record shapes, canonical form, seq numbering, every run's
    chain, every payload against its hash, every reference to a payload, that every erased
    payload has a recorded redaction, and that every run's steps form one sequence.

    The journal is read up to its data end (free space the writer keeps at the end of the
    file, all NUL bytes, is not data) in blocks of whole lines, each checked by the fast path
    (``_StoreScan``). The first record it cannot accept is handed to the detailed checker
    (``_check_record``), which states exactly what is wrong.

    ``merkle``, when given, receives the leaf hash of every entry that passed, in ``seq``
    order: after a pass with no issue it holds the journal's Merkle root (section 6).

    ``compare_index``: also compare the store's index with the journal (when this handle
    reads the on-disk index); a contradiction is the report's issue when the journal passed.
    ``verify --store`` (``tracelock.evidence.store_verify``) asks for it.

    ``steps``: also check the step rule of every run (docs/spec.md 3.9,
    ``JOURNAL_STEP_SEQUENCE_BROKEN``). The checkpoint signer leaves it out: a run that breaks
    it is a recorded fact, and the log that holds it stays signable.

    A PostgreSQL store is verified from its rows instead
    (:func:`tracelock.storage.postgres.verify.verify_postgres_store`: the same checks and
    issue codes where they apply; its other columns are always compared with the lines).
    """
    if store.backend == "postgresql":
        from tracelock.storage.postgres.store import PostgresStore
        from tracelock.storage.postgres.verify import verify_postgres_store

        assert isinstance(store, PostgresStore)
        return verify_postgres_store(store, progress=progress, merkle=merkle, steps=steps)
    from tracelock.storage.directory import DirectoryStore
    from tracelock.storage.directory.verify import verify_directory_store

    if not isinstance(store, DirectoryStore):
        raise TypeError(f"no verification for {type(store).__name__} stores")
    return verify_directory_store(store, progress=progress, merkle=merkle, compare_index=compare_index, steps=steps)


def verify_run(store: Store, run: str) -> VerifyReport:
    """Verify one run: its chain from its first entry to its last, its payloads, and its
    steps (docs/spec.md 3.9)."""
    report = VerifyReport(scope=f"run {run}")
    entries = store.entries(run)
    previous_hash: str | None = None
    previous_seq = -1
    steps = StepChecker()
    for position, entry in enumerate(entries):
        problem: str | None = None
        if entry.i != position:
            problem = f"expected index {position}, found {entry.i}"
        elif entry.prev != previous_hash:
            problem = "prev does not match the hash of the run's previous entry"
        elif entry.seq <= previous_seq:
            problem = f"seq {entry.seq} does not follow seq {previous_seq}"
        if problem is not None:
            report.issue = _issue("JOURNAL_CHAIN_BROKEN", entry.seq, run, f"run {run}: {problem}")
            return report
        doc: Any = None
        if entry.payload is not None:
            state = store.payload_state(entry.payload)
            if state == "missing":
                report.issue = _issue(
                    "PAYLOAD_MISSING",
                    entry.seq,
                    run,
                    f"run {run} index {entry.i} references payload {entry.payload}, "
                    "which is not stored",
                )
                return report
            if state == "redacted":
                report.redacted += 1
            else:
                try:
                    data = store.get_payload_bytes(entry.payload)
                except JournalCorruptError as exc:
                    report.issue = _issue(
                        "PAYLOAD_HASH_MISMATCH", entry.seq, run, f"run {run}: {exc}"
                    )
                    return report
                report.payloads += 1
                if steps.wants_payload(entry):
                    doc = _document(data)
        issue = steps.check(entry, doc)
        if issue is not None:
            report.issue = issue
            return report
        previous_hash = entry.hash
        previous_seq = entry.seq
        report.entries += 1
    report.runs = 1
    return report


def _document(data: bytes) -> Any:
    """A payload's document (None when its bytes are not JSON: it names no step)."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
