"""How a run is written to the journal, and read back.

Entry kinds of a run (payloads are JSON documents, stored content-addressed):

=================  =========================================================================
``run.start``      ``{"agent", "input", "policy", "seed", "parent"}``; meta ``status=running``
``effect``         a complete effect: intent and result in one document (effects that cannot
                   change the world: read-only tools, LLM calls, clock, randomness, and any
                   step that failed before EXECUTE)
``effect.intent``  an idempotent or irreversible effect about to run: ``{"step", "kind",
                   "name", "class", "args", "timeout_ms", "idempotency_key"}``
``effect.result``  its result: ``{"step", "outcome", "code", "phase", "result", "error",
                   "attempts"}``
``gather.order``   ``{"first", "steps"}``: completion order of a ``ctx.gather``
``route``          one routing decision of ``send_intent``
``approval``       ``{"step", "decision", "by", "reason"}``
``run.state``      a lifecycle transition (meta ``status``); payload says why (``{"step",
                   "reason"}``; a wait for an approval with a TTL adds ``ttl_ms`` and
                   ``expires_ms``, when the window closes on the journaled clock)
``run.end``        ``{"outcome", "code", "output", "fingerprint", "error"}``; meta ``status``
``patch``          ``{"id"}``: the run took the code path of a ``ctx.patched(id)`` change
``resolution``     ``{"step", "action": "retry", "by", "reason"}``: an operator allowed a blocked
                   irreversible step to run once more
``run.traceback``  ``{"step", "where", "exception", "traceback"}``: the traceback of an agent
                   (``step`` null) or a tool that raised; audit only, read by no decision
=================  =========================================================================
"""

from __future__ import annotations

import threading
import traceback as traceback_module
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tracelock.core.canonical import Encoded, dumps_with
from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, Entry
from tracelock.errors import StoreError
from tracelock.runtime import bridge
from tracelock.storage.backend import NO_PAYLOAD, Store
from tracelock.storage.errors import PayloadMissingError, PayloadRedactedError

__all__ = ["RunRecord", "load_run", "readable_payload", "redaction_copy", "RunJournal", "merge_effect", "audit_traceback"]

START = "run.start"
EFFECT = "effect"
INTENT = "effect.intent"
RESULT = "effect.result"
GATHER = "gather.order"
ROUTE = "route"
APPROVAL = "approval"
STATE = "run.state"
END = "run.end"
PATCH = "patch"
RESOLUTION = "resolution"
TRACEBACK = "run.traceback"


def audit_traceback(exc: BaseException) -> str:
    """The formatted traceback of ``exc``, as journaled in a ``run.traceback`` entry."""
    return "".join(traceback_module.format_exception(exc))


def _compact(doc: dict[str, Any]) -> dict[str, Any]:
    """An effect document without its null members (absent and null mean the same)."""
    return {key: value for key, value in doc.items() if value is not None}


def _encoded(doc: dict[str, Any], known: Mapping[str, bytes] | None) -> Any:
    """The payload of an effect document (compacted) whose members in ``known`` the step
    serialized already (its arguments and result: ``known[key] == dumps(doc[key])``): the
    document with its canonical bytes, those members' bytes written as they are."""
    compact = _compact(doc)
    if not known:
        return compact
    present = {key: data for key, data in known.items() if key in compact}
    return Encoded(compact, dumps_with(compact, present)) if present else compact


_NULLABLE = ("args", "result", "code", "phase", "error", "timeout_ms")


def _expand(doc: dict[str, Any]) -> dict[str, Any]:
    """A complete effect document with every standard member present (null when absent)."""
    for key in _NULLABLE:
        doc.setdefault(key, None)
    return doc


def merge_effect(intent: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """One complete effect document from an intent and its result."""
    merged = dict(intent)
    merged.update({key: value for key, value in result.items() if key != "step"})
    return merged


@dataclass
class RunRecord:
    """A run as its journal tells it."""

    run_id: str
    start: dict[str, Any]
    status: str
    effects: dict[int, dict[str, Any]] = field(default_factory=dict)
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)
    approvals: dict[int, dict[str, Any]] = field(default_factory=dict)
    routing: list[dict[str, Any]] = field(default_factory=list)
    gather_orders: dict[int, list[int]] = field(default_factory=dict)
    states: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    entries: list[Entry] = field(default_factory=list)
    redacted: list[str] = field(default_factory=list)
    patches: set[str] = field(default_factory=set)
    retries: set[int] = field(default_factory=set)
    #: ``run.traceback`` documents in journal order (audit only).
    tracebacks: list[dict[str, Any]] = field(default_factory=list)
    #: The journaled time (entry ``ts``, ms) of each step's approval entry.
    approval_ms: dict[int, int] = field(default_factory=dict)
    #: When each step's approval window closes (``expires_ms`` of the first waiting state
    #: that set one for the step; approvals with a TTL only).
    approval_expiry: dict[int, int] = field(default_factory=dict)

    @property
    def agent_traceback(self) -> str | None:
        """The traceback of the agent's exception, when it raised one and it is not redacted."""
        for doc in self.tracebacks:
            if doc.get("step") is None and isinstance(doc.get("traceback"), str):
                return str(doc["traceback"])
        return None

    @property
    def agent(self) -> str:
        return str(self.start.get("agent", ""))

    @property
    def entry(self) -> str:
        """Where the agent's code lives (``module:qualname``), to import it again."""
        return str(self.start.get("entry") or self.start.get("agent", ""))

    @property
    def annotations(self) -> dict[str, Any]:
        value = self.start.get("annotations")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def input(self) -> Any:
        return self.start.get("input")

    @property
    def policy_hash(self) -> str | None:
        value = self.start.get("policy")
        return value if isinstance(value, str) else None

    @property
    def parent(self) -> dict[str, Any] | None:
        value = self.start.get("parent")
        return value if isinstance(value, dict) else None

    @property
    def waiting_step(self) -> int | None:
        """The step an ``awaiting_approval`` or ``blocked`` run waits on."""
        if self.status in ("awaiting_approval", "blocked") and self.states:
            step = self.states[-1].get("step")
            return step if isinstance(step, int) else None
        return None


def readable_payload(store: Store, digest: str) -> tuple[str, Any]:
    """``(state, document)`` of a payload as a reader may show it: ``present`` and the
    document; ``copy`` and the readable copy a field redaction kept (its redacted members
    replaced by markers); or ``redacted``/``missing`` and a marker
    ``{"__tracelock__": state, "hash": digest}`` standing for the whole document."""
    try:
        return "present", store.get_payload(digest)
    except (PayloadRedactedError, PayloadMissingError) as exc:
        state = "redacted" if isinstance(exc, PayloadRedactedError) else "missing"
        copy = redaction_copy(store, digest) if state == "redacted" else None
        if copy is not None:
            return "copy", copy
        return state, {"__tracelock__": state, "hash": digest}


def _payload(store: Store, entry: Entry, record: RunRecord, present: dict[str, bytes]) -> Any:
    if entry.payload is None:
        return None
    data = present.get(entry.payload)
    if data is not None:
        return orjson.loads(data)  # a document of its own per entry, as callers may change it
    state, doc = readable_payload(store, entry.payload)
    if state != "present":
        record.redacted.append(entry.payload)
    return doc


def redaction_copy(store: Store, digest: str) -> dict[str, Any] | None:
    """The readable copy a field redaction kept of a redacted payload (its redacted members
    replaced by markers), from the admin chain's ``payload.redact`` entries; None if none."""
    try:
        admin = store.entries(ADMIN_RUN)
    except StoreError:
        return None
    for entry in reversed(admin):
        if entry.kind == REDACTION_KIND and entry.payload and (entry.meta or {}).get("payload") == digest:
            try:
                doc = store.get_payload(entry.payload)
            except StoreError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("copy"), dict):
                return dict(doc["copy"])
    return None


def provenance_document(store: Store, digest: str) -> Any:
    """The ``provenance.register`` document a run's start names by hash; None when the
    store no longer has it (redacted or missing; a damaged one raises)."""
    try:
        return store.get_payload(digest)
    except (PayloadRedactedError, PayloadMissingError):
        return None


def _with_provenance(store: Store, start: dict[str, Any]) -> dict[str, Any]:
    """A start document whose ``provenance`` names a ``provenance.register`` document by
    hash, with the document in its place (None when the store no longer has it)."""
    digest = start.get("provenance")
    if not isinstance(digest, str):
        return start
    return {**start, "provenance": provenance_document(store, digest)}


def load_run(store: Store, run_id: str, *, provenance: bool = True) -> RunRecord:
    """Read a run's entries and payloads into a :class:`RunRecord`. ``provenance=False``
    leaves the start's ``provenance`` as the hash it names (a replay on this store compares
    that hash with the current one first, and reads the document only when they differ)."""
    entries = store.entries(run_id)
    record = RunRecord(run_id=run_id, start={}, status="created", entries=entries)
    present = store.get_payloads_bytes([entry.payload for entry in entries if entry.payload is not None])
    for entry in entries:
        doc = _payload(store, entry, record, present)
        status = (entry.meta or {}).get("status")
        if entry.kind not in (START, STATE, END) and isinstance(doc, dict) and "__tracelock__" in doc:
            pass  # a wholly redacted (or missing) payload: nothing to index it by
        elif entry.kind == START:
            if not isinstance(doc, dict):
                record.start = {}
            else:
                record.start = _with_provenance(store, doc) if provenance else doc
        elif entry.kind == EFFECT:
            record.effects[doc["step"]] = _expand(doc)
        elif entry.kind == INTENT:
            record.pending[doc["step"]] = doc
        elif entry.kind == RESULT:
            intent = record.pending.pop(doc["step"], {"step": doc["step"]})
            record.effects[doc["step"]] = _expand(merge_effect(intent, doc))
        elif entry.kind == GATHER:
            record.gather_orders[doc["first"]] = list(doc["steps"])
        elif entry.kind == ROUTE:
            record.routing.append(doc)
        elif entry.kind == APPROVAL:
            record.approvals[doc["step"]] = doc
            record.approval_ms[doc["step"]] = entry.ts
        elif entry.kind == STATE:
            record.states.append(dict(doc or {}, status=status))
            if isinstance(doc, dict) and isinstance(doc.get("expires_ms"), int) and isinstance(doc.get("step"), int):
                record.approval_expiry.setdefault(doc["step"], doc["expires_ms"])
        elif entry.kind == END:
            record.end = doc
        elif entry.kind == PATCH:
            record.patches.add(str(doc.get("id")))
        elif entry.kind == RESOLUTION:
            record.retries.add(int(doc["step"]))
        elif entry.kind == TRACEBACK and isinstance(doc, dict):
            record.tracebacks.append(doc)
        if isinstance(status, str):
            record.status = status
    return record


class RunJournal:
    """Writes one run's entries with the durability the effect's class needs.

    ``strict`` makes every entry durable before the call returns. Otherwise durability is
    enforced exactly where a crash could do harm (docs/spec.md 3.4, which argues why these
    points are enough): an idempotent or irreversible effect's intent is durable before it
    executes (and with it everything the run recorded before); an irreversible effect's
    result is durable before anything outside the journal can see it: before the next
    effect that leaves the process (:meth:`settle`), a lifecycle state, or the run's end;
    every lifecycle state and the run's end are durable before they are reported. Entries of
    effects that cannot change the world (read-only tools, LLM calls, the clock, randomness)
    are *held* (``Store.append_held``): the directory store writes them at once (a process
    crash loses none) and fsyncs them with the next of those points; the PostgreSQL backend
    commits them with the handle's next append. A crash before that only means recovery
    re-runs them, which their class allows.
    """

    def __init__(self, store: Store, run_id: str, *, strict: bool = False, batch: bool = False) -> None:
        self.store = store
        self.run_id = run_id
        self.strict = strict
        # In a batch (recovery), state changes and ends are made durable together by the
        # caller's final sync, before anything is reported; effects keep their own rules.
        self.batch = batch
        # Which irreversible result is owed durability, told by the journal's own count of
        # appends that returned (``_returned``): the newest one not yet known durable (None:
        # none). A durable append (or a sync) covers every append that returned before it
        # began, since the store makes a prefix durable; counting returns, not seqs, lets a
        # result be held (no seq at hand) and stays right when a gather's members append
        # from several threads at once.
        self._returned = 0
        self._owed: int | None = None
        self._owed_lock = threading.Lock()

    def _append(
        self,
        kind: str,
        payload: Any = NO_PAYLOAD,
        *,
        meta: dict[str, Any] | None = None,
        durable: bool,
        new_run: bool = False,
        owed: bool = False,
    ) -> Entry:
        store = self.store
        before = self._returned
        durable = durable or self.strict
        if bridge.active():
            # An async caller's run: the loop goes on meanwhile (a commit to wait for is
            # awaited, and the runs waiting on one share it).
            entry = bridge.wait(
                store.append_async(self.run_id, kind, payload=payload, meta=meta, new_run=new_run, durable=durable)
            )
        else:
            entry = store.append(self.run_id, kind, payload=payload, meta=meta, durable=durable, new_run=new_run)
        self._returning(covers=before if durable else None, owed=owed and not self.strict)
        return entry

    def _hold(
        self, kind: str, payload: Any = NO_PAYLOAD, *, meta: dict[str, Any] | None = None, new_run: bool = False
    ) -> int:
        """An entry that needs no durability of its own: it may wait in the process for the
        store's next durable append or sync (``Store.append_held``); returns its timestamp."""
        if self.strict:
            return self._append(kind, payload, meta=meta, durable=True, new_run=new_run).ts
        ts = self.store.append_held(self.run_id, kind, payload=payload, meta=meta, new_run=new_run)
        self._returning()
        return ts

    def _returning(self, *, covers: int | None = None, owed: bool = False) -> None:
        """Count an append that returned; ``covers``: it was durable, and covers every append
        that had returned when it began (that many); ``owed``: it is an irreversible result."""
        with self._owed_lock:
            self._returned += 1
            if covers is not None and self._owed is not None and self._owed <= covers:
                self._owed = None
            if owed:
                self._owed = self._returned

    def settle(self) -> None:
        """Make an irreversible result durable before an effect that leaves the process runs
        (it could carry what the result told the agent to the world)."""
        if self._owed is None:
            return
        before = self._returned
        # Syncs everything appended so far, the owed result included.
        if bridge.active():
            bridge.wait(self.store.sync_async())
        else:
            self.store.sync()
        with self._owed_lock:
            if self._owed is not None and self._owed <= before:
                self._owed = None

    def start(self, doc: dict[str, Any], *, agent: str, parent: str | None) -> int:
        """The run's start; returns its timestamp (the run's start time)."""
        meta: dict[str, Any] = {"agent": agent, "status": "running"}
        if parent is not None:
            meta["parent"] = parent
        # The runtime gives every run a fresh id (generated, or checked when it was chosen).
        return self._hold(START, doc, meta=meta, new_run=True)

    # ``known``: canonical bytes of members the step serialized already (``args``,
    # ``result``), written into the payload as they are instead of serialized again.
    def effect(self, doc: dict[str, Any], known: Mapping[str, bytes] | None = None) -> None:
        self._hold(EFFECT, _encoded(doc, known))

    def intent(self, doc: dict[str, Any], known: Mapping[str, bytes] | None = None) -> Entry:
        return self._append(INTENT, _encoded(doc, known), durable=True)

    def result(self, doc: dict[str, Any], *, irreversible: bool, known: Mapping[str, bytes] | None = None) -> Entry:
        """An effect's result. An irreversible one is written at once and becomes durable at
        the next sync point (:meth:`settle`, a state, the end), not here: until then only
        this process has seen it, and a crash before it leaves the intent without a result,
        which recovery never executes again."""
        return self._append(RESULT, _encoded(doc, known), durable=False, owed=irreversible)

    def gather_order(self, first: int, steps: list[int]) -> None:
        self._hold(GATHER, {"first": first, "steps": steps})

    def route(self, doc: dict[str, Any]) -> None:
        self._hold(ROUTE, doc)

    def mark(self, kind: str, doc: dict[str, Any]) -> None:
        self._hold(kind, doc)

    def traceback(self, doc: dict[str, Any]) -> None:
        """An audit-only traceback: held like the entries of effects that cannot change the
        world, made durable with what follows."""
        self._hold(TRACEBACK, doc)

    def resolution(self, doc: dict[str, Any]) -> Entry:
        return self._append(RESOLUTION, doc, durable=True)

    def operator_result(self, doc: dict[str, Any]) -> Entry:
        """An operator's account of a step whose result was never journaled."""
        return self._append(RESULT, doc, durable=True)

    def approval(self, doc: dict[str, Any]) -> Entry:
        return self._append(APPROVAL, doc, durable=True)

    def state(self, status: str, doc: dict[str, Any]) -> Entry:
        return self._append(STATE, doc, meta={"status": status}, durable=not self.batch)

    def end(self, status: str, doc: dict[str, Any]) -> Entry:
        return self._append(END, doc, meta={"status": status}, durable=not self.batch)
