"""Several processes on one directory store: the writer lock is held per commit.

Real processes throughout: two writers appending and a third verifying, with ``kill -9``
of either writer at random instants (nothing acknowledged is lost, the store verifies, the
chains hold); two processes appending to the same run (their entries serialize on the
run's true head: the chain never forks); and a service process running agents while the
operator's CLI commands (``run``, ``approve``, ``resume``, ``resolve``, ``checkpoint``)
work on the same store.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_store

REPO = Path(__file__).resolve().parents[2]
TRACELOCK = Path(sys.executable).parent / "tracelock"
#: Bounds on waiting for a child (a hung child fails the test instead of hanging it).
_PATIENCE_S = 120.0


@dataclass
class Child:
    """A child process whose stdout lines are collected by a thread as they come."""

    process: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def start_reading(self) -> None:
        def read() -> None:
            assert self.process.stdout is not None
            for raw in self.process.stdout:
                self.lines.append(raw.decode().rstrip("\n"))

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def wait_for(self, predicate: Callable[[list[str]], bool], what: str) -> None:
        deadline = time.monotonic() + _PATIENCE_S
        while not predicate(list(self.lines)):
            if self.process.poll() is not None:
                self.finish()
                if predicate(self.lines):
                    return
                raise AssertionError(f"child exited ({self.process.returncode}) before {what}: {self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"child never got to {what}")
            time.sleep(0.002)

    def count(self, prefix: str) -> int:
        return sum(1 for line in list(self.lines) if line.startswith(prefix))

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.finish()

    def finish(self) -> None:
        self.process.wait(timeout=_PATIENCE_S)
        if self.reader is not None:
            self.reader.join(timeout=_PATIENCE_S)

    def stderr(self) -> str:
        return self.process.stderr.read().decode() if self.process.stderr else ""


def spawn(*args: str | Path, cwd: Path = REPO) -> Child:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = Child(
        subprocess.Popen(
            [sys.executable, "-m", "tests.storage._multiprocess_children", *map(str, args)],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    )
    child.start_reading()
    child.wait_for(lambda lines: "READY" in lines, "READY")
    return child


def at_least(count: int, prefix: str = "ACK") -> Callable[[list[str]], bool]:
    """A ``wait_for`` predicate: ``count`` lines starting with ``prefix`` have come."""

    def reached(lines: list[str]) -> bool:
        return sum(1 for line in lines if line.startswith(prefix)) >= count

    return reached


def spawn_appender(store_dir: Path, seed: int) -> Child:
    """The kill tests' appender (``_appender``): runs of five entries, ``ACK seq hash``."""
    child = Child(
        subprocess.Popen(
            [sys.executable, "-m", "tests.storage._appender", str(store_dir), str(seed)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    )
    child.start_reading()
    child.wait_for(lambda lines: "READY" in lines, "READY")
    return child


def acknowledged(child: Child) -> dict[int, str]:
    acked = {}
    for line in child.lines:
        parts = line.split(" ")
        if parts[0] == "ACK" and len(parts) == 3 and len(parts[2]) == 64:
            acked[int(parts[1])] = parts[2]
    return acked


def _two_writers_trial(store_dir: Path, rng: random.Random, trial: int) -> tuple[int, int]:
    stop = store_dir.parent / f"stop-{trial}"
    writers = [spawn_appender(store_dir, 2 * trial), spawn_appender(store_dir, 2 * trial + 1)]
    verifier = spawn("verify", store_dir, stop)
    try:
        # Both append for a while, then one is killed at a random instant; the other goes
        # on (its next commits read and, if torn, repair what the victim left), then it is
        # killed too.
        first = rng.randint(3, 60)
        for writer in writers:
            writer.wait_for(at_least(first), f"{first} acks")
        time.sleep(rng.uniform(0, 0.05))
        victim = rng.randrange(2)
        writers[victim].kill()
        survivor = writers[1 - victim]
        more = survivor.count("ACK") + rng.randint(5, 40)
        survivor.wait_for(at_least(more), "acks after the kill")
        time.sleep(rng.uniform(0, 0.02))
        survivor.kill()
    finally:
        for writer in writers:
            if writer.process.poll() is None:
                writer.kill()
        stop.touch()
        verifier.finish()
    for writer in writers:
        assert "Traceback" not in writer.stderr()
    issues = [line for line in verifier.lines if line.startswith("ISSUE")]
    assert not issues, issues
    assert verifier.count("VERIFIED") > 0, verifier.stderr()
    acked = [acknowledged(writer) for writer in writers]
    with DirectoryStore(store_dir) as store:
        entries = {entry.seq: entry for entry in store.iter_entries()}
        for number, mine in enumerate(acked):
            for seq, digest in mine.items():
                assert seq in entries and entries[seq].hash == digest, f"trial {trial}: writer {number}'s acknowledged entry {seq} lost"
        # The two writers' commits interleave in the journal (the lock is not held for life).
        owners = [entries[seq].run.split("-")[0] for seq in sorted(entries) if entries[seq].run.startswith("p")]
        assert len(set(owners)) >= 2
        report = verify_store(store)
        assert report.ok, report.issue
        assert verify_store(store, compare_index=True).ok
        return sum(map(len, acked)), len(store.repairs)


def test_two_writers_and_a_verifier_survive_kill_minus_nine(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    DirectoryStore(store_dir).close()
    rng = random.Random(20)
    total = 0
    for trial in range(6):
        acked, _ = _two_writers_trial(store_dir, rng, trial)
        total += acked
    assert total > 0
    with DirectoryStore(store_dir, read_only=True) as reader:
        runs = {info.run.split("-")[0] for info in reader.runs()}
        assert {f"p{seed}" for seed in range(12)} <= runs


def test_writers_interleave_their_commits(tmp_path: Path) -> None:
    """Two long-lived writer processes each commit many times while the other is open: the
    journal holds their entries interleaved, in one numbering, every run's chain intact."""
    store_dir = tmp_path / "store"
    DirectoryStore(store_dir).close()
    writers = [spawn_appender(store_dir, seed) for seed in (1, 2)]
    try:
        for writer in writers:
            writer.wait_for(at_least(200), "200 acks")
    finally:
        for writer in writers:
            writer.kill()
    with DirectoryStore(store_dir) as store:
        seqs = [entry.run.split("-")[0] for entry in store.iter_entries()]
        switches = sum(1 for before, after in itertools.pairwise(seqs) if before != after)
        assert switches >= 10, "the writers did not take turns"
        assert verify_store(store, compare_index=True).ok


def test_coroutines_sharing_commits_and_another_process_take_turns(tmp_path: Path) -> None:
    """Two processes, each with eight coroutines appending through ``append_async`` (their
    commits shared on one event loop, the lock let go after each): both finish, every
    acknowledged entry is in the journal, which verifies."""
    store_dir = tmp_path / "store"
    DirectoryStore(store_dir).close()
    go = tmp_path / "go"
    children = [spawn("tasks", store_dir, name, "8", "60", go) for name in ("a", "b")]
    go.touch()
    for child in children:
        child.wait_for(lambda lines: "DONE" in lines, "DONE")
        child.finish()
        assert child.process.returncode == 0, child.stderr()
    with DirectoryStore(store_dir) as store:
        entries = {entry.seq: entry for entry in store.iter_entries()}
        assert len(entries) == 2 * 8 * 60
        for child in children:
            for seq, digest in acknowledged(child).items():
                assert entries[seq].hash == digest
        owners = [entries[seq].run[0] for seq in sorted(entries)]
        assert sum(1 for x, y in itertools.pairwise(owners) if x != y) >= 2
        assert verify_store(store, compare_index=True).ok


def test_a_torn_commit_of_a_killed_process_is_repaired_by_the_next_writer(tmp_path: Path) -> None:
    """A writer process dies in the middle of a commit, holding the lock. Another process
    whose handle was open all along commits next: it reads the dead writer's entries
    (they continue the chains), cuts its torn record by the repair rule (kept aside in
    quarantine/), and appends after them."""
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir) as store:
        mine = store.append("mine", "run.start", payload={"input": 0}, meta={"status": "running"})
        dead = Child(
            subprocess.Popen(
                [sys.executable, "-m", "tests.storage._multiprocess_children", "torn", str(store_dir), "theirs"],
                cwd=REPO,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        dead.start_reading()
        dead.finish()
        assert dead.process.returncode == 9, dead.stderr()
        acked = acknowledged(dead)
        assert len(acked) == 2
        assert not store.repairs
        after = store.append("mine", "effect", payload={"n": 1})
        assert (after.seq, after.i, after.prev) == (3, 1, mine.hash)
        assert len(store.repairs) == 1
        repair = store.repairs[0]
        assert Path(repair.saved_to or "").read_bytes() == b'{"i":2,"kind":"effect","meta":null,"pay'
        theirs = store.append("theirs", "effect", payload={"n": 2})
        assert (theirs.i, theirs.prev) == (2, acked[2])
        for seq, digest in acked.items():
            assert store.entry_at(seq).hash == digest
        store.sync()
        assert verify_store(store, compare_index=True).ok
    with DirectoryStore(store_dir, read_only=True) as reader:
        assert verify_store(reader, compare_index=True).ok
        assert [entry.seq for entry in reader.entries("theirs")] == [1, 2, 4]


def test_two_processes_appending_to_one_run_serialize(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir) as store:
        start = store.append("shared", "run.start", payload={"input": 1}, meta={"status": "running"})
    go = tmp_path / "go"
    children = [spawn("same-run", store_dir, "shared", "150", go, name) for name in ("a", "b")]
    go.touch()
    for child in children:
        child.finish()
        assert child.process.returncode == 0, child.stderr()
    acked = [
        {int(parts[1]): (int(parts[2]), parts[3]) for parts in (line.split(" ") for line in child.lines) if parts[0] == "ACK"}
        for child in children
    ]
    assert all(len(mine) == 150 for mine in acked)
    with DirectoryStore(store_dir) as store:
        entries = store.entries("shared")
        # One chain: indexes 0..300 in order, each entry continuing the one before it, the
        # two writers' entries interleaved in it.
        assert [entry.i for entry in entries] == list(range(301))
        assert entries[0].hash == start.hash
        for before, after in itertools.pairwise(entries):
            assert after.prev == before.hash
        by_seq = {entry.seq: entry for entry in entries}
        for mine in acked:
            for seq, (index, digest) in mine.items():
                assert (by_seq[seq].i, by_seq[seq].hash) == (index, digest)
        writers = [store.get_payload(entry.payload or "")["writer"] for entry in entries[1:]]
        assert sum(1 for x, y in itertools.pairwise(writers) if x != y) >= 2
        assert verify_store(store, compare_index=True).ok


MODULE = '''
import os

from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()


class Crash(BaseException):
    pass


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.upper()


@kit.tool(side_effect="irreversible", timeout=None)
def pay(amount: int) -> str:
    if os.environ.get("CRASH_PAY"):
        os._exit(9)  # dies inside the irreversible effect: its outcome is unknown
    return "paid"


@kit.agent("payer")
def agent(ctx, task):
    found = ctx.call("lookup", key=task["key"])
    return {"found": found, "paid": ctx.call("pay", amount=task["amount"])}
'''
POLICY = 'version = 1\n[[tools]]\nname = "lookup"\n[[tools]]\nname = "pay"\n'
APPROVAL_POLICY = POLICY + "approval = true\n"


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "mp_payer.py").write_text(MODULE)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "approval.toml").write_text(APPROVAL_POLICY)
    (tmp_path / "task.json").write_text(json.dumps({"key": "k", "amount": 3}))
    yield tmp_path


def cli(workdir: Path, *args: str | Path, env: dict[str, str] | None = None, expect: int = 0) -> dict[str, Any]:
    done = subprocess.run(
        [str(TRACELOCK), *map(str, args), "--json"],
        cwd=workdir,
        env=dict(os.environ, PYTHONPATH=f"{workdir}{os.pathsep}{REPO}", **(env or {})),
        capture_output=True,
        text=True,
        timeout=_PATIENCE_S,
        check=False,
    )
    assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
    if expect != 0:
        return {}
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


def test_operator_commands_work_while_a_service_runs_agents(workdir: Path) -> None:
    store = workdir / "store"
    DirectoryStore(store).close()
    # Before the service starts: a run killed inside its irreversible effect, which
    # `recover` blocks on that step (recover continues every unfinished run, so it is not
    # run beside a service whose runs are in flight).
    cli(workdir, "run", "mp_payer:agent", "--input", "task.json", "--policy", "policy.toml", "--store", store, env={"CRASH_PAY": "1"}, expect=9)
    blocked = cli(workdir, "recover", "--store", store)["runs"]
    assert [(row["to"], row["waiting_step"]) for row in blocked] == [("blocked", 1)]
    stop = workdir / "stop"
    service = spawn("service", store, "mp_payer", stop, cwd=workdir)
    try:
        service.wait_for(at_least(3, "RUN"), "3 runs")
        # A second `tracelock run`, waiting for approval, then approved and resumed.
        waiting = cli(workdir, "run", "mp_payer:agent", "--input", "task.json", "--policy", "approval.toml", "--store", store)
        assert (waiting["status"], waiting["waiting_step"]) == ("awaiting_approval", 1)
        approved = cli(workdir, "approve", waiting["run_id"], "1", "--by", "alice", "--store", store)
        assert approved["decision"] == "approved"
        resumed = cli(workdir, "resume", waiting["run_id"], "--policy", "approval.toml", "--store", store)
        assert resumed["output"] == {"found": "K", "paid": "paid"}
        # The blocked run: resolve says what happened, resume completes it.
        (workdir / "actual.json").write_text('"paid (confirmed)"')
        resolved = cli(workdir, "resolve", blocked[0]["run"], "1", "--result", "actual.json", "--by", "ops", "--store", store)
        assert resolved["action"] == "result recorded"
        completed = cli(workdir, "resume", blocked[0]["run"], "--policy", "policy.toml", "--store", store)
        assert completed["output"] == {"found": "K", "paid": "paid (confirmed)"}
        # Checkpoints of a store that grows while they are signed.
        keys = cli(workdir, "keys", "generate", "--out", workdir / "keys", "--name", "example.com/mp")
        first = cli(workdir, "checkpoint", "--key", keys["files"]["private_key"], "--store", store)
        service.wait_for(at_least(service.count("RUN") + 2, "RUN"), "more runs")
        second = cli(workdir, "checkpoint", "--key", keys["files"]["private_key"], "--store", store)
        assert second["created"] and second["checkpoint"]["size"] > first["checkpoint"]["size"]
        assert second["consistency_proof"] is not None
        ran_before = service.count("RUN")
        service.wait_for(at_least(ran_before + 1, "RUN"), "a run after the commands")
    finally:
        stop.touch()
        service.finish()
    assert service.process.returncode == 0, service.stderr()
    statuses = {line.split(" ")[2] for line in service.lines if line.startswith("RUN")}
    assert statuses == {"completed"}
    verified = cli(workdir, "verify", "--store", store)
    assert verified["ok"] is True


# -- a reader opening while writers commit -------------------------------------------------


def _store_with_runs(path: Path, runs: int) -> None:
    with DirectoryStore(path) as store:
        for number in range(runs):
            run = f"r{number}"
            store.append(run, "run.start", payload={"input": number}, meta={"status": "running"})
            store.append(run, "run.end", payload={"output": number}, meta={"status": "completed"})
    (path / "index.sqlite").unlink()  # so that what the reader's open does with it shows


def test_a_reader_waits_out_a_commit_and_uses_the_store_s_index(tmp_path: Path) -> None:
    """A reader that finds the writer lock taken tries again for a while (a writer holds it
    for one commit): it then catches up the store's own index, instead of building a private
    one from the whole journal."""
    _store_with_runs(tmp_path, 20)
    other = os.open(tmp_path / "lock", os.O_RDWR)  # another open file: another holder
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        releaser = threading.Timer(0.03, fcntl.flock, (other, fcntl.LOCK_UN))
        releaser.start()
        with DirectoryStore(tmp_path, read_only=True) as reader:
            assert [run.run for run in reader.runs()] == [f"r{n}" for n in reversed(range(20))]
        releaser.join()
    finally:
        os.close(other)
    assert (tmp_path / "index.sqlite").exists()  # rebuilt under the lock, for every reader


def test_a_reader_that_never_gets_the_lock_reads_through_a_private_index(tmp_path: Path) -> None:
    _store_with_runs(tmp_path, 20)
    other = os.open(tmp_path / "lock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        with DirectoryStore(tmp_path, read_only=True) as reader:
            assert len(reader.runs()) == 20
            assert reader.get_payload(reader.entries("r7")[1].payload or "") == {"output": 7}
    finally:
        os.close(other)
    assert not (tmp_path / "index.sqlite").exists()  # it wrote nothing
