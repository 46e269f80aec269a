"""The run checks of bundle verification (``docs/spec.md`` 8.3, checks 9 to 11): each run's
chain, end and steps, the policy and provenance its start names, and its fingerprint
recomputed from its entries (spec 5.4, redaction copies included) and compared with the
one its ``run.end`` records. Over a :class:`ParsedBundle`; no store, no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tracelock.core.entry import ADMIN_RUN, POLICY_KIND, PROVENANCE_KIND, TERMINAL_KINDS, Entry
from tracelock.core.fingerprint import PROJECTED_KINDS, NotRecomputable, fingerprint_of_documents
from tracelock.core.steps import STEP_SEQUENCE_BROKEN, run_step_issue
from tracelock.evidence.bundle_files import ENTRIES
from tracelock.evidence.bundle_parse import ParsedBundle

__all__ = ["RunChecks", "RunReport"]


class Fail(Protocol):
    """Reports one failed check, and where."""

    def __call__(self, check: str, message: str, **where: Any) -> None: ...


@dataclass
class RunReport:
    """What the bundle says about one run."""

    run: str
    entries: int
    first_seq: int
    last_seq: int
    status: str
    ended: bool
    fingerprint: str | None = None
    recomputed: str | None = None
    fingerprint_status: str = "unavailable"
    fingerprint_detail: str | None = None
    redacted: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The fields a manifest's ``runs`` list holds."""
        return {
            "run": self.run,
            "entries": self.entries,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "status": self.status,
            "ended": self.ended,
            "fingerprint": self.fingerprint,
        }

    def to_dict(self) -> dict[str, Any]:
        return self.summary() | {
            "recomputed": self.recomputed,
            "fingerprint_status": self.fingerprint_status,
            "fingerprint_detail": self.fingerprint_detail,
            "redacted": self.redacted,
        }


def _recompute(entries: Sequence[Entry], docs: dict[int, Any]) -> str:
    """The fingerprint of a run from its entries; ``docs`` maps seq to the payload document
    (with :class:`HiddenValue` members for redacted fields; absent when wholly redacted)."""
    documents = []
    for entry in entries:
        if entry.kind not in PROJECTED_KINDS:
            continue
        if entry.seq not in docs:
            raise NotRecomputable(f"the payload of entry {entry.i} ({entry.kind}) is redacted")
        documents.append((entry.kind, docs[entry.seq]))
    recomputed = fingerprint_of_documents(documents)
    if recomputed is None:
        raise KeyError("run.start or run.end")
    return recomputed


class RunChecks:
    """The checks of every run of a parsed bundle; failures go to ``fail``, notes (a run
    accepted open) to ``notes``."""

    def __init__(
        self,
        parsed: ParsedBundle,
        fail: Fail,
        notes: list[str],
        *,
        allow_open: bool,
        required_runs: Sequence[str],
    ) -> None:
        self.parsed = parsed
        self.fail = fail
        self.notes = notes
        self.allow_open = allow_open
        self.required_runs = list(required_runs)
        self.runs: list[RunReport] = []

    def check(self) -> list[RunReport]:
        """Check every run; what each says, in run order."""
        by_run: dict[str, list[Entry]] = {}
        for _, entry in self.parsed.entries:
            if entry.run != ADMIN_RUN:
                by_run.setdefault(entry.run, []).append(entry)
        registered = {
            (entry.kind, entry.payload)
            for _, entry in self.parsed.entries
            if entry.run == ADMIN_RUN and entry.kind in (POLICY_KIND, PROVENANCE_KIND)
        }
        if not by_run and ENTRIES in self.parsed.files.files:
            self.fail("run.missing", "the bundle holds no run", file=ENTRIES)
        for run in self.required_runs:
            if run not in by_run:
                self.fail("run.missing", f"run {run} is not in the bundle", run=run)
        for run in sorted(by_run):
            entries = by_run[run]
            report = self._check_run(run, entries)
            self.runs.append(report)
            start = entries[0]
            if start.kind == "run.start":
                _, doc, _ = self.parsed.payload_state(start)
                for member, kind in (("policy", POLICY_KIND), ("provenance", PROVENANCE_KIND)):
                    named = doc.get(member) if isinstance(doc, dict) else None
                    if isinstance(named, str) and (kind, named) not in registered:
                        self.fail(
                            f"{member}.missing",
                            f"the run's start names {member} {named}, whose {kind} entry is not "
                            "in the bundle",
                            run=run,
                            i=0,
                            seq=start.seq,
                        )
        return self.runs

    def _check_run(self, run: str, entries: list[Entry]) -> RunReport:
        ended_at = next((k for k, e in enumerate(entries) if e.kind in TERMINAL_KINDS), None)
        status = "created"
        for entry in entries:
            value = (entry.meta or {}).get("status")
            if isinstance(value, str):
                status = value
        report = RunReport(
            run=run,
            entries=len(entries),
            first_seq=entries[0].seq,
            last_seq=entries[-1].seq,
            status=status,
            ended=ended_at is not None,
        )
        chain_ok = True
        previous: Entry | None = None
        for position, entry in enumerate(entries):
            problem = None
            if entry.i != position:
                problem = (
                    f"expected entry {position}, found entry {entry.i} "
                    + ("(the run's first entries are missing)" if position == 0 else "(entries are missing, inserted or reordered)")
                )
            elif previous is not None and entry.prev != previous.hash:
                problem = f"prev does not match the hash of entry {previous.i}"
            elif previous is not None and previous.kind in TERMINAL_KINDS:
                problem = "an entry follows the run's run.end"
            if problem is not None:
                chain_ok = False
                self.fail("run.chain", problem, file=ENTRIES, run=run, i=entry.i, seq=entry.seq)
                break
            previous = entry
        if ended_at is None:
            if self.allow_open:
                self.notes.append(f"run {run} has not ended (status {status}): accepted (--allow-open)")
            else:
                self.fail(
                    "run.open",
                    f"the run has no run.end (status {status}): its last entries may have been "
                    "removed; pass --allow-open to accept runs that have not ended",
                    file=ENTRIES,
                    run=run,
                    i=entries[-1].i,
                    seq=entries[-1].seq,
                )
        docs: dict[int, Any] = {}
        missing = False
        steps: list[tuple[Entry, Any]] = []
        for entry in entries:
            state, doc, redaction = self.parsed.payload_state(entry)
            if state in ("none", "present", "copy"):
                docs[entry.seq] = doc
            # A step hidden by a field redaction is a HiddenValue: a step not seen.
            steps.append((entry, doc if state in ("present", "copy") else None))
            missing = missing or state == "missing"
            if redaction is not None:
                records = self.parsed.redactions.get(entry.payload or "", [])
                report.redacted.append(
                    {
                        "i": entry.i,
                        "seq": entry.seq,
                        "kind": entry.kind,
                        "payload": entry.payload,
                        "fields": list(redaction.fields) if redaction and redaction.fields else None,
                        "redactions": [r_entry.seq for r_entry, _ in records],
                        "by": redaction.by if redaction else None,
                        "reason": redaction.reason if redaction else None,
                    }
                )
        if chain_ok:
            issue = run_step_issue(steps)
            if issue is not None:
                i = next(entry.i for entry in entries if entry.seq == issue.seq)
                self.fail(
                    "run.steps", issue.message, file=ENTRIES, run=run, i=i, seq=issue.seq,
                    code=STEP_SEQUENCE_BROKEN,
                )
        if ended_at is None or not chain_ok or missing:
            report.fingerprint_status = "not_ended" if ended_at is None else "unavailable"
            return report
        end = entries[ended_at]
        end_doc = docs.get(end.seq)
        recorded = end_doc.get("fingerprint") if isinstance(end_doc, dict) else None
        report.fingerprint = recorded if isinstance(recorded, str) else None
        if report.fingerprint is None:
            report.fingerprint_status = "redacted"
            report.fingerprint_detail = "the run.end payload (with the recorded fingerprint) is redacted"
            return report
        try:
            report.recomputed = _recompute(entries, docs)
        except NotRecomputable as exc:
            report.fingerprint_status = "redacted"
            report.fingerprint_detail = f"not recomputable: {exc}"
            return report
        except (KeyError, TypeError, AttributeError) as exc:
            report.fingerprint_status = "mismatch"
            self.fail(
                "fingerprint.recompute",
                f"the run's payloads do not have the members a fingerprint needs ({exc!r})",
                run=run,
            )
            return report
        if report.recomputed == report.fingerprint:
            report.fingerprint_status = "match"
        else:
            report.fingerprint_status = "mismatch"
            self.fail(
                "fingerprint.mismatch",
                f"the fingerprint recomputed from the entries is {report.recomputed}, run.end "
                f"records {report.fingerprint}",
                file=ENTRIES,
                run=run,
                i=end.i,
                seq=end.seq,
            )
        return report
