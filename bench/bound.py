"""The bound: what a run of the README's workload costs on this machine with nothing but the
work its guarantees need, timed side by side with ``Runtime.run`` and the disk's sync floor in
one process: ``python -m bench.bound``.

A *bound run* writes what the runtime writes for the same task and run id: the same entries
(kinds, metadata, payload documents byte for byte, the run's fingerprint; :func:`check_faithful`
compares them with a real run before anything is timed), in canonical JSON with both hashes
and the chain (``tracelock.core``), as payload records and entry lines in one journal file
with free space ahead of its data. It takes the writer lock per commit as the directory store
does (``flock``, and the one-byte read that tells whether another process appended, docs/spec.md
3.7), makes the irreversible intent durable before the tool runs and the end durable before
it returns: two ``fdatasync``. It does nothing else: no index, no payload cache, no run
state, no policy engine or budgets (a membership test per step), no watchdog (the deadline is
compared after the call), no group commit, no error handling. No runtime that keeps this
journal and these guarantees can be much faster on the same machine: the speed targets of
docs/performance.md are weighed against it, and the runtime's distance from it is the room
its own work leaves.

Two forms, interleaved round by round with the runtime and the floor's probes:

- ``bound``: one commit per entry, as the directory store commits them (a killed process
  loses nothing written);
- ``bound_batched``: the entries of effects that cannot change the world written with the
  next commit (the way the PostgreSQL backend holds them): three commits instead of six.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import workload
from bench.stats import group_rounds, percentile, summary_us
from bench.syncs import probe
from tracelock.core.canonical import dumps
from tracelock.core.entry import build_next
from tracelock.core.fingerprint import fingerprint, run_projection
from tracelock.runtime.runs.engine import default_seed
from tracelock.runtime.runtime import Runtime
from tracelock.storage.directory import DirectoryStore

AGENT = "bench.workload:agent"
#: The workload's tools as the bound checks them: class, function, argument types.
TOOLS: dict[str, tuple[str, Callable[..., Any], dict[str, type]]] = {
    "search_orders": ("read_only", workload.search_orders, {"query": str}),
    "send_update": ("irreversible", workload.send_update, {"customer_id": str, "text": str}),
}
MODELS = frozenset({"stand-in"})
TIMEOUT_MS = 30_000  # the tools' default timeout, recorded in their effects
FORMS = ("runtime", "bound", "bound_batched")
#: Consecutive groups of rounds a figure is also given for, as a range over passes.
PASSES = 5


def _hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BoundJournal:
    """One journal file and its lock file, written as the directory store writes them."""

    def __init__(self, directory: Path, capacity: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(directory / "journal.log", os.O_RDWR | os.O_CREAT, 0o644)
        self.lock_fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        # Free space ahead of the data, as the store keeps it: NUL blocks written and synced
        # (not fallocated: an unwritten extent would make each sync change the file's
        # metadata), so that a sync overwrites blocks the file already has.
        zeros = bytes(1 << 20)
        for offset in range(0, capacity, len(zeros)):
            os.pwrite(self.fd, zeros, offset)
        os.fsync(self.fd)
        self.end = 0
        self.seq = 0
        self.held: list[bytes] = []

    def entry(self, run: str, head: tuple[int, str] | None, kind: str, doc: Any, meta: dict[str, Any] | None = None) -> tuple[int, str]:
        """Build one payload record and entry line and queue them; return the run's new head."""
        data = dumps(doc)
        digest = _hex(data)
        entry = build_next(self.seq, run, head, kind, digest, time.time_ns() // 1_000_000, meta)
        self.seq += 1
        self.held += (b"=", digest.encode(), b" ", data, b"\n", entry.line, b"\n")
        return entry.i, entry.hash

    def commit(self, *, sync: bool) -> None:
        """Write what is queued under the writer lock; ``sync``: durable before returning."""
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            if os.pread(self.fd, 1, self.end) not in (b"", b"\0"):
                raise RuntimeError("another process appended to the bound's journal")
            data = b"".join(self.held)
            self.held.clear()
            os.pwrite(self.fd, data, self.end)
            self.end += len(data)
            if sync:
                os.fdatasync(self.fd)
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.lock_fd)


class BoundRun:
    """The README's workload (``bench.workload.agent``), with only the work the guarantees need."""

    def __init__(self, journal: BoundJournal, *, policy: str, provenance: str, batched: bool) -> None:
        self.journal = journal
        self.policy = policy
        self.provenance = provenance
        self.batched = batched
        #: The last run's entries as (kind, metadata, payload document), for the check.
        self.documents: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = []

    def _write(self, run: str, head: tuple[int, str] | None, kind: str, doc: dict[str, Any], *, sync: bool, held: bool = False, meta: dict[str, Any] | None = None) -> tuple[int, str]:
        head = self.journal.entry(run, head, kind, doc, meta)
        self.documents.append((kind, meta, doc))
        if not (held and self.batched):
            self.journal.commit(sync=sync)
        return head

    def _step(self, run: str, head: tuple[int, str], step: int, kind: str, name: str, args: dict[str, Any], effects: list[dict[str, Any]], hashes: dict[int, tuple[str, str | None]]) -> tuple[Any, tuple[int, str]]:
        if kind == "llm":
            if args["model"] not in MODELS or not isinstance(args["max_tokens"], int):
                raise PermissionError(f"the policy refuses {args}")
            side_effect, function, call_args = "read_only", workload.llm_stand_in, (args,)
            call_kwargs: dict[str, Any] = {}
        else:
            side_effect, function, schema = TOOLS[name]
            if any(not isinstance(args.get(key), expected) for key, expected in schema.items()):
                raise TypeError(f"{name}: arguments {args} break its schema")
            call_args, call_kwargs = (), args
        doc: dict[str, Any] = {"args": args, "class": side_effect, "kind": kind, "name": name, "step": step}
        if kind == "tool":
            doc["timeout_ms"] = TIMEOUT_MS
        if side_effect == "irreversible":
            head = self._write(run, head, "effect.intent", dict(doc), sync=True)
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        result = function(*call_args, **call_kwargs)
        if time.monotonic() > deadline:
            raise TimeoutError(name)
        hashes[step] = (_hex(dumps(args)), _hex(dumps(result)))
        outcome = {"attempts": 1, "outcome": "SUCCESS", "result": result}
        if side_effect == "irreversible":
            head = self._write(run, head, "effect.result", {**outcome, "step": step}, sync=False)
        else:
            head = self._write(run, head, "effect", {**doc, **outcome}, sync=False, held=True)
        effects.append({**doc, **outcome, "code": None})
        return result, head

    def __call__(self, task: dict[str, Any], run: str) -> str:
        """One run; returns its fingerprint."""
        self.documents = []
        effects: list[dict[str, Any]] = []
        hashes: dict[int, tuple[str, str | None]] = {}
        start = {
            "agent": AGENT, "entry": AGENT, "input": task, "parent": None,
            "policy": self.policy, "provenance": self.provenance, "seed": default_seed(run),
        }
        head = self._write(run, None, "run.start", start, sync=False, held=True, meta={"agent": AGENT, "status": "running"})
        plan, head = self._step(run, head, 0, "llm", "llm", {"max_tokens": 64, "model": "stand-in", "prompt": task["ask"]}, effects, hashes)
        orders, head = self._step(run, head, 1, "tool", "search_orders", {"query": task["ask"]}, effects, hashes)
        update, head = self._step(run, head, 2, "tool", "send_update", {"customer_id": task["customer"], "text": plan["content"]}, effects, hashes)
        output = {"plan": plan["content"], "orders": orders, "update": update}
        digest = fingerprint(run_projection(
            agent=AGENT, input=task, policy_hash=self.policy, effects=effects, routing=[],
            output=output, outcome="SUCCESS", code=None, hashes=hashes,
        ))
        end = {"outcome": "SUCCESS", "code": None, "output": output, "fingerprint": digest, "error": None}
        self._write(run, head, "run.end", end, sync=True, meta={"status": "completed"})
        return digest


def check_faithful(runtime: Runtime, bound: BoundRun, number: int) -> None:
    """Raise unless the bound writes what ``runtime`` writes for the same task and run id:
    the same kinds and metadata in order, the same payload bytes, the same fingerprint."""
    run_id = f"run-bound-check-{number}"
    task = workload.task(number)
    result = runtime.run(workload.agent, task, run_id=run_id)
    assert result.ok, result.error
    digest = bound(task, run_id)
    store = runtime.store
    assert isinstance(store, DirectoryStore)
    real = [(entry.kind, entry.meta, store.get_payload_bytes(entry.payload)) for entry in store.entries(run_id) if entry.payload]
    mine = [(kind, meta, dumps(doc)) for kind, meta, doc in bound.documents]
    if real != mine or digest != result.fingerprint:
        raise AssertionError(f"the bound no longer writes what the runtime writes: {real} != {mine} or {digest} != {result.fingerprint}")


@contextmanager
def forms(root: Path, runs: int) -> Iterator[dict[str, Callable[[int], Any]]]:
    """The three forms of :data:`FORMS` set up under ``root`` for up to ``runs`` runs each
    (the bounds checked faithful to the runtime first), as one call per form taking a run
    number; closed on exit."""
    runtime = Runtime(root / "store", workload.POLICY, toolkits=(workload.kit,))
    probe_run = runtime.run(workload.agent, workload.task(-1))
    store = runtime.store
    assert isinstance(store, DirectoryStore)
    first = store.entries(probe_run.run_id)[0]
    start = store.get_payload(first.payload)
    capacity = (runs + 100) * 2 * 4096
    journals = {form: BoundJournal(root / form, capacity) for form in FORMS[1:]}
    bounds = {
        form: BoundRun(journals[form], policy=start["policy"], provenance=start["provenance"], batched=form == "bound_batched")
        for form in FORMS[1:]
    }
    try:
        for number, bound in enumerate(bounds.values()):
            check_faithful(runtime, bound, number)
        yield {
            "runtime": lambda n: runtime.run(workload.agent, workload.task(n)),
            "bound": lambda n: bounds["bound"](workload.task(n), f"run-bound-{n}"),
            "bound_batched": lambda n: bounds["bound_batched"](workload.task(n), f"run-batched-{n}"),
        }
    finally:
        runtime.close()
        for journal in journals.values():
            journal.close()


def run(quick: bool, *, runs: int | None = None, passes: int = PASSES, show: bool = True) -> dict[str, Any]:
    """The figures (and, with ``show``, a readable table): each form's p50 over the whole
    pass and, per consecutive group of rounds (``passes`` of them), its p50 over twice the
    floor probed during those rounds."""
    runs = runs or (300 if quick else 5_000)
    batch = 50 if quick else 100
    rounds = max(passes, runs // batch)
    batch = max(1, runs // rounds)
    samples: dict[str, list[float]] = {form: [] for form in FORMS}
    cpu: dict[str, list[float]] = {form: [] for form in FORMS}
    per_round: dict[str, list[float]] = {form: [] for form in FORMS}
    by_round: dict[str, list[list[float]]] = {form: [] for form in FORMS}
    floor_by_round: list[list[float]] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        root = Path(tmp)
        with forms(root, runs) as calls:
            for number in range(20):  # warm-up, outside the figures
                for call in calls.values():
                    call(runs + 10 + number)
            for round_number in range(rounds):
                shift = round_number % len(FORMS)
                for form in FORMS[shift:] + FORMS[:shift]:
                    call, own = calls[form], []
                    for number in range(round_number * batch, (round_number + 1) * batch):
                        cpu_started = time.process_time()
                        started = time.perf_counter()
                        call(number)
                        own.append(time.perf_counter() - started)
                        cpu[form].append(time.process_time() - cpu_started)
                    samples[form] += own
                    by_round[form].append(own)
                    per_round[form].append(percentile(own, 0.5))
                floor_by_round.append(probe(root, 20))
    floor = [sample for probes in floor_by_round for sample in probes]
    floor_us = percentile(floor, 0.5) * 1e6
    floor_by_pass = [percentile(group, 0.5) for group in group_rounds(floor_by_round, passes)]
    figures: dict[str, Any] = {
        "runs": rounds * batch,
        "passes": passes,
        "sync_floor": {**summary_us(floor), "probes": len(floor)},
        "sync_floor_p50_us_by_pass": [round(value * 1e6, 1) for value in floor_by_pass],
    }
    for form in FORMS:
        stats = summary_us(samples[form])
        pass_p50s = [percentile(group, 0.5) for group in group_rounds(by_round[form], passes)]
        figures[form] = {
            "run": stats,
            "cpu_per_run": summary_us(cpu[form]),
            "p50_vs_two_floors": round(stats["p50_us"] / (2 * floor_us), 2),
            "p50_beyond_two_floors_us": round(stats["p50_us"] - 2 * floor_us, 1),
            "p50_us_by_pass": [round(value * 1e6, 1) for value in pass_p50s],
            "p50_vs_two_floors_by_pass": [round(mine / (2 * own), 2) for mine, own in zip(pass_p50s, floor_by_pass, strict=True)],
        }
    for form in FORMS[1:]:
        figures[form]["runtime_p50_vs_this"] = round(figures["runtime"]["run"]["p50_us"] / figures[form]["run"]["p50_us"], 2)
        ratios = [mine / theirs for mine, theirs in zip(per_round["runtime"], per_round[form], strict=True)]
        figures[form]["runtime_vs_this_by_round"] = [round(min(ratios), 2), round(percentile(ratios, 0.5), 2), round(max(ratios), 2)]
    if show:
        _print(figures)
    return figures


def _print(figures: dict[str, Any]) -> None:
    floor = figures["sync_floor"]
    print(f"sync floor (small overwrite + fdatasync, {floor['probes']} probes): p50 {floor['p50_us']} us")
    for form in FORMS:
        f = figures[form]
        line = (
            f"{form:<14} p50 {f['run']['p50_us']:>7} us  p99 {f['run']['p99_us']:>7} us  CPU p50 {f['cpu_per_run']['p50_us']:>6} us  "
            f"p50 = {f['p50_vs_two_floors']}x two syncs' floor ({f['p50_beyond_two_floors_us']} us beyond them)"
        )
        if "runtime_p50_vs_this" in f:
            low, _, high = f["runtime_vs_this_by_round"]
            line += f"  runtime = {f['runtime_p50_vs_this']}x this ({low}-{high}x by round)"
        print(line)


if __name__ == "__main__":
    run(quick=False)
