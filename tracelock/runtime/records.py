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

import contextlib
import threading
import traceback as traceback_module
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tracelock.core.canonical import Encoded, dumps, dumps_with
from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND, Entry
from tracelock.errors import StoreError
from tracelock.runtime import bridge
from tracelock.storage.backend import NO_PAYLOAD, NewEntry, Store
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
    result is written at once (a process crash cannot lose it) and is durable before
    anything outside the journal can see it: before the next effect that leaves the
    process (:meth:`settle`), a lifecycle state, or the run's end; every lifecycle state
    and the run's end are durable before they are reported.

    Entries that need no durability of their own (effects that cannot change the world:
    read-only tools, LLM calls, the clock, randomness; gather orders, routes, marks,
    tracebacks) are *held in the run*: serialized at once (a payload that is not canonical
    JSON fails the call that made it), and written in front of the run's next write (an
    intent, an irreversible result, an approval, a state, the end) in one
    ``Store.append_many``: one writer-lock hold, one write and, where that write is a
    durability point, one sync. A crash before that loses them, which only means recovery
    runs them again, as their class allows; nothing written after them in the run is
    written without them, so a durable entry still covers everything the run recorded
    before it. Held entries are stamped when written (the entries of one write share its
    ``ts``). The run's start is not held in the run (see :meth:`start`): a run is in the
    store, for other processes and for ``recover``, from its first instant. A run leaving
    by an exception that ends nothing (:meth:`interrupted`) writes what it holds.

    The run's writes are ordered: one thread (or bridged task) at a time takes the held
    entries and hands them to the store with its own, so a gather's members, appending from
    several threads, never write an entry before one that was held before it.
    """

    def __init__(self, store: Store, run_id: str, *, strict: bool = False, batch: bool = False) -> None:
        self.store = store
        self.run_id = run_id
        self.strict = strict
        # In a batch (recovery), state changes and ends are made durable together by the
        # caller's final sync, before anything is reported; effects keep their own rules.
        self.batch = batch
        # Which irreversible result is owed durability, told by the journal's own count of
        # entries recorded (``_returned``: held or appended): the newest one not yet known
        # durable (None: none). A durable append (or a sync) covers every entry recorded
        # before it began, since the store makes a prefix durable and the held ones ride in
        # the append itself; counting records, not seqs, stays right when a gather's
        # members append from several threads at once.
        self._returned = 0
        self._owed: int | None = None
        self._owed_lock = threading.Lock()
        #: Entries held in the run, in record order, not yet handed to the store.
        self._held: list[NewEntry] = []
        # Orders the run's writes: held entries are taken and written under it. A sync
        # write holds it across the store call; a bridged one only while the store queues
        # the entries (their place is fixed then), never across a wait (bridge's rule).
        # An entry held meanwhile (``_held_lock``, never held across a call) waits for the
        # next write: it was recorded after this one's entries were taken.
        self._write_lock = threading.Lock()
        self._held_lock = threading.Lock()

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
        durable = durable or self.strict
        return self._write(NewEntry(self.run_id, kind, payload, meta, new_run), durable, owed and not self.strict)

    def _write(self, item: NewEntry | None, durable: bool, owed: bool = False, *, blocking: bool = False) -> Entry:
        """Write the held entries, then ``item`` (None: the held entries alone, not durable),
        in one append; return the last entry written. On a failure nothing of it was
        written, and the held entries stay held. ``blocking``: never through the event loop
        (the run is being torn down, and its loop may be gone)."""
        store = self.store
        with self._write_lock:
            with self._held_lock:
                held = self._held
                self._held = []
            items = held + [item] if item is not None else held
            if not items:
                raise AssertionError("nothing to write")
            before = self._returned
            bridged = not blocking and bridge.active()
            try:
                if bridged:
                    # An async caller's run: queued now, in order; the commit is awaited
                    # below, outside the lock (the loop goes on meanwhile, and the runs
                    # waiting on one commit share it).
                    pending = store.append_many_async(items, durable=durable)
                else:
                    entries = store.append_many(items, durable=durable)
            except BaseException:
                with self._held_lock:
                    self._held = held + self._held  # those held meanwhile come after
                raise
        if bridged:
            # A batch refused here (a backend that fails the awaitable, not the call) has
            # taken the held entries with it: lost as a crash would lose them, never
            # written out of their order.
            entries = bridge.wait(pending)
        if item is not None:
            self._returning(covers=before if durable else None, owed=owed)
        return entries[-1]

    def _hold(
        self, kind: str, payload: Any = NO_PAYLOAD, *, meta: dict[str, Any] | None = None, new_run: bool = False
    ) -> None:
        """An entry that needs no durability of its own: held in the run until its next
        write (see the class). Its payload is serialized now: a document that is not
        canonical JSON fails here, and a caller changing it later changes nothing."""
        if self.strict:
            self._append(kind, payload, meta=meta, durable=True, new_run=new_run)
            return
        if payload is not NO_PAYLOAD and type(payload) is not Encoded:
            payload = Encoded(payload, dumps(payload))
        item = NewEntry(self.run_id, kind, payload, meta, new_run)
        with self._held_lock:
            self._held.append(item)
        self._returning()

    def _returning(self, *, covers: int | None = None, owed: bool = False) -> None:
        """Count an entry recorded (held or appended); ``covers``: it was durable, and covers
        every entry recorded when it began (that many); ``owed``: it is an irreversible
        result."""
        with self._owed_lock:
            self._returned += 1
            if covers is not None and self._owed is not None and self._owed <= covers:
                self._owed = None
            if owed:
                self._owed = self._returned

    @property
    def held(self) -> int:
        """How many entries wait in the run for its next write."""
        return len(self._held)

    def write_held(self) -> None:
        """Write the held entries now (not durably, and without the event loop), if there
        are any."""
        if self._held:
            self._write(None, durable=False, blocking=True)

    def interrupted(self) -> None:
        """The run leaves this call unfinished, by an exception that ends no run (a
        cancelled task, ``KeyboardInterrupt``, a divergence): its held entries are written,
        so that ``recover``/``resume`` in a process that goes on finds what it recorded.
        A write that fails here is left to recovery, as a crash would be: the exception
        being raised is the one the caller gets."""
        if self._held:
            with contextlib.suppress(Exception):
                self.write_held()

    def settle(self) -> None:
        """Make an irreversible result durable before an effect that leaves the process runs
        (it could carry what the result told the agent to the world). Held entries stay
        held: none of them is an irreversible result, and each is written in front of the
        next entry that could depend on it."""
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
        """The run's start; returns its timestamp (the run's start time). Not held in the
        run: ``Store.append_held`` writes it at once on the directory store (from then on
        the run is in the store, where other processes and ``recover`` see it), and the
        PostgreSQL backend, where every write is a commit, commits it with the handle's
        next append."""
        meta: dict[str, Any] = {"agent": agent, "status": "running"}
        if parent is not None:
            meta["parent"] = parent
        # The runtime gives every run a fresh id (generated, or checked when it was chosen).
        if self.strict:
            return self._append(START, doc, meta=meta, durable=True, new_run=True).ts
        with self._write_lock:
            ts = self.store.append_held(self.run_id, START, payload=doc, meta=meta, new_run=True)
        self._returning()
        return ts

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
