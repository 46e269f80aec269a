"""Re-execute an agent against the runs of an evidence bundle (``verify --replay``).

The bundle's entries and payloads become a :class:`tracelock.runtime.records.RunRecord`
(read through a small read-only view that has the store methods ``load_run`` uses), and
:func:`tracelock.runtime.replay.replay.replay_record` replays it with a :class:`Runtime` over a
temporary store and the policy the run was recorded under. A field redaction is replayed
with its marker in place of the value, so a step whose redacted member the code compares
(its arguments) diverges, and says so; a wholly redacted effect cannot be replayed.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import orjson

from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, Entry, EntryFormatError, parse_entry
from tracelock.errors import TracelockError
from tracelock.evidence.bundle import ENTRIES, PAYLOAD_DIR, BundleFiles
from tracelock.evidence.redaction import parse_redaction
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.replay import replay_record
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.backend import Store
from tracelock.storage.errors import RunNotFoundError
from tracelock.storage.open import open_store

__all__ = ["BundleView", "replay_bundle"]


class BundleView:
    """The read methods of a store that ``load_run`` needs, answered from a bundle."""

    def __init__(self, bundle: BundleFiles) -> None:
        self._runs: dict[str, list[Entry]] = {}
        self._payloads: dict[str, Any] = {}
        self._redacted: set[str] = set()
        #: Payload hash -> members replaced by redaction markers (field redactions).
        self.hidden_fields: dict[str, tuple[str, ...]] = {}
        for line in bundle.files.get(ENTRIES, b"").splitlines():
            try:
                entry = parse_entry(line)
            except EntryFormatError:
                continue
            self._runs.setdefault(entry.run, []).append(entry)
        for name, data in bundle.files.items():
            if name.startswith(PAYLOAD_DIR + "/") and name.endswith(".json"):
                digest = name[len(PAYLOAD_DIR) + 1 : -5]
                if hashlib.sha256(data).hexdigest() == digest:
                    self._payloads[digest] = orjson.loads(data)
        for entry in self._runs.get(ADMIN_RUN, []):
            if entry.kind != REDACTION_KIND:
                continue
            try:
                redaction = parse_redaction(entry, self._payloads.get(entry.payload or ""))
            except TracelockError:
                continue
            if redaction.payload in self._payloads:
                continue
            if redaction.copy is not None:
                self._payloads[redaction.payload] = redaction.copy
                self.hidden_fields[redaction.payload] = redaction.fields or ()
            else:
                self._redacted.add(redaction.payload)

    def runs(self) -> list[str]:
        return sorted(run for run in self._runs if run != ADMIN_RUN)

    def entries(self, run: str) -> list[Entry]:
        if run not in self._runs:
            raise RunNotFoundError(f"no run {run!r} in the bundle")
        return list(self._runs[run])

    def payload_state(self, digest: str) -> str:
        if digest in self._payloads:
            return "present"
        return "redacted" if digest in self._redacted else "missing"

    def get_payload(self, digest: str) -> Any:
        return self._payloads[digest]

    def get_payloads_bytes(self, digests: Sequence[str]) -> dict[str, bytes]:
        return {digest: orjson.dumps(self._payloads[digest]) for digest in digests if digest in self._payloads}

    def policy_document(self, digest: str) -> Any:
        return self._payloads.get(digest)


def replay_bundle(
    bundle: BundleFiles,
    agent: Callable[..., Any] | str,
    *,
    toolkits: Sequence[Toolkit] = (),
    runs: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Replay every run of the bundle (or ``runs``) with ``agent``; one report per run:
    ``{"run", "matched", "recorded_fingerprint", "replayed_fingerprint", "divergence",
    "error"}``. Nothing is written anywhere but a temporary directory."""
    view = BundleView(bundle)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tracelock-replay-") as tmp:
        for index, run in enumerate(runs if runs is not None else view.runs()):
            try:
                hidden = [
                    entry for entry in view.entries(run)
                    if entry.payload is not None and view.payload_state(entry.payload) != "present"
                ]
                if hidden:
                    raise _NotReplayable(
                        "the payload of entry "
                        + ", ".join(f"{e.i} ({e.kind})" for e in hidden)
                        + " is wholly redacted or missing"
                    )
                record = load_run(cast(Store, view), run)
                policy = view.policy_document(record.policy_hash) if record.policy_hash else None
                store = open_store(Path(tmp) / f"store-{index}")
                try:
                    with Runtime(
                        store,
                        policy,
                        toolkits=tuple(toolkits),
                        sandbox=Path(tmp) / f"sandbox-{index}",
                    ) as runtime:
                        report = replay_record(runtime, record, agent)
                finally:
                    store.close()
            except (TracelockError, _NotReplayable, KeyError, TypeError) as exc:
                message = exc.message if isinstance(exc, TracelockError) else str(exc)
                results.append(
                    {"run": run, "matched": False, "recorded_fingerprint": None,
                     "replayed_fingerprint": None, "divergence": None,
                     "error": f"cannot replay: {message}"}
                )
                continue
            result = report.to_dict() | {"run": run, "error": None}
            step = (report.divergence or {}).get("step")
            hidden_members = _hidden_at(view, run, step)
            if not report.matched and hidden_members:
                result["error"] = (
                    f"cannot replay: step {step} diverged, and its {', '.join(hidden_members)} "
                    "member(s) are redacted, so the recording cannot be compared there"
                )
            results.append(result)
    return results


class _NotReplayable(Exception):
    pass


def _hidden_at(view: BundleView, run: str, step: Any) -> list[str]:
    """Members of ``step``'s payloads that a field redaction replaced by markers."""
    if not isinstance(step, int):
        return []
    hidden: list[str] = []
    for entry in view.entries(run):
        fields = view.hidden_fields.get(entry.payload or "")
        if fields:
            doc = view.get_payload(entry.payload or "")
            if isinstance(doc, dict) and doc.get("step") == step:
                hidden.extend(fields)
    return hidden
