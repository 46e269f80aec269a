"""Verifying a bundle on disk, and replaying its runs: ``tracelock verify BUNDLE``.

:func:`read_bundle_target` reads the bundle and the pinned keys, which
:func:`tracelock.evidence.verify.verify_bundle` checks it against, offline; :func:`replay_runs` re-executes an
agent against the runs of a bundle whose integrity holds and adds the replay checks
(``replay.diverged``, ``replay.error``, ``replay.environment``) to the report;
:func:`bundle_verdict` is the :class:`Verdict` of the report. Only a replay imports the
runtime (the replay needs an engine), and only when it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracelock.errors import UsageError
from tracelock.evidence.bundle_files import BundleFiles, read_bundle_files
from tracelock.evidence.verdict import Verdict
from tracelock.evidence.verify import BundleReport, Failure, PinnedKey, load_pinned_keys

__all__ = ["bundle_verdict", "read_bundle_target", "replay_possible", "replay_runs"]


def read_bundle_target(target: Path, keys: Sequence[str]) -> tuple[list[PinnedKey], BundleFiles]:
    """The pinned ``keys`` (as ``--key`` takes them) and the files of the bundle at
    ``target``, to check with :func:`tracelock.evidence.verify.verify_bundle`. A bundle is
    never verified without a pinned key, and a store given as a bundle is a usage error."""
    if not keys:
        raise UsageError(
            "verifying a bundle needs the signer's public key, pinned: --key FILE "
            "(.vkey, .pub or hex); a key carried inside a bundle is never trusted"
        )
    if target.is_dir() and (target / "store.json").is_file() and not (target / "manifest.json").exists():
        raise UsageError(
            f"{target} is a store, not a bundle: verify a store with `tracelock verify --store {target}`"
        )
    return load_pinned_keys(keys), read_bundle_files(target)


def replay_possible(report: BundleReport) -> bool:
    """Whether the bundle's runs may be replayed: only when its integrity holds (a note in
    the report says so otherwise)."""
    if not report.integrity_ok:
        report.notes.append("replay skipped: the bundle failed integrity checks")
        return False
    return True


def replay_runs(
    report: BundleReport,
    files: BundleFiles,
    func: Callable[..., Any],
    toolkits: Any,
    *,
    strict_environment: bool = False,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Re-execute ``func`` against each run of the bundle; each result goes to
    ``report.replay``, each run that diverged, failed, or (with ``strict_environment``) was
    recorded under another engine or environment to its failures."""
    from tracelock.evidence.bundle_replay import replay_bundle

    for result in replay_bundle(files, func, toolkits=toolkits):
        report.replay.append(result)
        if progress is not None:
            progress(len(report.replay))
        engine = (result.get("provenance") or {}).get("engine")
        if strict_environment and engine:
            report.fail(
                Failure(
                    "replay.environment",
                    "recorded under another engine or environment: "
                    + ", ".join(f"{item['field']} {item['recorded']} (now {item['current']})" for item in engine),
                    run=result["run"],
                )
            )
        if not result["matched"]:
            divergence = result.get("divergence") or {}
            report.fail(
                Failure(
                    "replay.error" if result.get("error") else "replay.diverged",
                    result.get("error") or str(divergence.get("message")),
                    run=result["run"],
                )
            )


def bundle_verdict(report: BundleReport) -> Verdict:
    """The verdict of a bundle's report: its document and its text."""
    return Verdict(report.ok, report.to_dict(), _report_lines(report), list(report.failures))


def _report_lines(report: BundleReport) -> list[str]:
    lines = [
        f"bundle {report.source} ({report.kind}): {len(report.runs)} run(s), {report.entries} "
        f"entries, {report.payloads} payloads, {report.redacted} redacted"
    ]
    if report.checkpoint:
        cp = report.checkpoint
        lines.append(f"checkpoint: {cp['origin']}, size {cp['size']}, root {cp['root']}")
    integrity = report.failures_of("integrity")
    if report.integrity_ok:
        lines.append(
            "integrity: OK (manifest, entry hashes, chain links, inclusion proofs, payload "
            "hashes and fingerprints all agree)"
        )
    else:
        lines.append(f"integrity: FAILED ({report.counts.get('integrity', 0)} problem(s))")
        lines.extend(_failure_line(f) for f in integrity)
    trust = report.failures_of("trust")
    if report.trust_ok:
        signers = ", ".join(
            f"{t['name']} {t['key_id']}" + (f" ({t['source']})" if t.get("source") else "")
            for t in report.trusted_by
        )
        lines.append(f"trust: OK (signed by pinned key {signers})")
    else:
        lines.append("trust: FAILED")
        lines.extend(_failure_line(f) for f in trust)
        if not trust:
            lines.append("  the checkpoint could not be checked against the pinned keys")
    for run in report.runs:
        fp = run.fingerprint_status
        detail = {
            "match": f"fingerprint {run.fingerprint} recomputed: match",
            "mismatch": f"fingerprint MISMATCH (recorded {run.fingerprint}, recomputed {run.recomputed})",
            "redacted": f"fingerprint {run.fingerprint or '?'}: {run.fingerprint_detail}",
            "not_ended": "not ended: no fingerprint",
            "unavailable": "fingerprint not checked (see failures)",
        }.get(fp, fp)
        lines.append(f"run {run.run}: {run.status}, {run.entries} entries, {detail}")
        for item in run.redacted:
            fields = f" (fields: {', '.join(item['fields'])})" if item.get("fields") else ""
            by = f" by {item['by']}: {item['reason']}" if item.get("by") else ""
            lines.append(
                f"  redacted: entry {item['i']} ({item['kind']}) payload {str(item['payload'])[:16]}..."
                f"{fields}, redaction entry seq {item['redactions']}{by}"
            )
    for result in report.replay:
        verdict = "matched" if result.get("matched") else (result.get("error") or "DIVERGED")
        lines.append(f"replay {result['run']}: {verdict}")
        produced = result.get("provenance")
        if isinstance(produced, dict):
            from tracelock.runtime.provenance.record import describe_differences

            lines.extend(f"  {line}" for line in describe_differences(produced))
        divergence = result.get("divergence")
        if divergence:
            lines.append(f"  {divergence.get('message')}")
    lines.extend(f"note: {note}" for note in report.notes)
    if report.dropped:
        lines.append(f"({report.dropped} more failures not listed)")
    lines.append("RESULT: " + ("OK" if report.ok else "FAILED (" + ", ".join(report.checks_failed()) + ")"))
    return lines


def _failure_line(failure: Failure) -> str:
    where = failure.where()
    code = f" ({failure.code})" if failure.code else ""
    return f"  [{failure.check}] {where + ': ' if where else ''}{failure.message}{code}"
