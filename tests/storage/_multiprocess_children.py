"""Child processes for the multi-process tests of the directory store (one store, several
processes at once). Each reports on stdout, one line per event, flushed at once, so that
the test reads what was acknowledged before it killed the child:

* ``verify STORE STOP``: verifies the store read-only, again and again, until the file
  STOP exists; prints ``VERIFIED <entries>`` or ``ISSUE <code> <message>`` each time.
* ``same-run STORE RUN COUNT GO NAME``: waits for the file GO, then appends COUNT durable
  entries to the existing run RUN; prints ``ACK <seq> <i> <hash>`` for each.
* ``tasks STORE NAME TASKS COUNT GO``: once the file GO exists, TASKS coroutines of one
  event loop each append COUNT durable entries (``append_async``: they share each commit); prints ``ACK <seq> <hash>``
  for each, then ``DONE``.
* ``torn STORE RUN``: appends a run's first entries, durably, then dies as a writer killed
  in the middle of its next commit does: the start of a record written at the end of the
  data, no newline, the writer lock held, no clean-up (``os._exit``).
* ``service STORE MODULE STOP``: a service: runs the agent ``MODULE:agent`` with the
  policy ``policy.toml`` of the working directory, run after run, on one open runtime,
  until STOP exists; prints ``RUN <id> <status>`` for each.
* ``sealing STORE NAME RUNS SEAL_BYTES``: appends RUNS runs named ``NAME-<k>`` of six
  durable entries each (never ended), sealing every SEAL_BYTES; prints
  ``ACK <seq> <hash> <run> <payload>`` for each (``SEAL-ERROR <why>`` if a seal failed),
  then ``DONE``.
* ``sealing-forever STORE SEED SEAL_BYTES [PAUSE_MS]``: appends forever, sealing every
  SEAL_BYTES: runs of eight entries, five of them durable, then a pause and a read of an
  entry 40 back; prints ``ACK <seq> <hash>`` for the durable ones.
* ``reader-forever STORE STOP``: one read-only handle kept open, reading every run it knows
  of (entries and payloads) until STOP exists; prints ``READ <entries>`` per pass, or
  ``ERR <code> <message>`` and stops.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def verify(store_path: str, stop: str) -> None:
    from tracelock.storage.directory import DirectoryStore
    from tracelock.storage.verify import verify_store

    _say("READY")
    while not Path(stop).exists():
        with DirectoryStore(store_path, read_only=True) as store:
            report = verify_store(store)
        if report.ok:
            _say(f"VERIFIED {report.entries}")
        else:
            issue = report.issue
            _say(f"ISSUE {issue.code if issue else '?'} {issue.message if issue else ''}")


def same_run(store_path: str, run: str, count: str, go: str, name: str) -> None:
    from tracelock.storage.directory import DirectoryStore

    with DirectoryStore(store_path) as store:
        _say("READY")
        while not Path(go).exists():
            pass  # spin: both children start appending at the same instant
        for step in range(int(count)):
            entry = store.append(run, "effect", payload={"step": step, "writer": name})
            _say(f"ACK {entry.seq} {entry.i} {entry.hash}")


def tasks(store_path: str, name: str, count_tasks: str, count: str, go: str) -> None:
    import asyncio

    from tracelock.storage.directory import DirectoryStore

    async def work(store: DirectoryStore, number: int) -> None:
        for step in range(int(count)):
            run = f"{name}{number}-{step // 10}"
            if step % 10 == 0:
                entry = await store.append_async(run, "run.start", payload={"task": number}, new_run=True)
            else:
                entry = await store.append_async(run, "effect", payload={"step": step})
            _say(f"ACK {entry.seq} {entry.hash}")

    async def main(store: DirectoryStore) -> None:
        await asyncio.gather(*(work(store, number) for number in range(int(count_tasks))))

    with DirectoryStore(store_path) as store:
        _say("READY")
        while not Path(go).exists():
            pass  # spin: both children start appending at the same instant
        asyncio.run(main(store))
    _say("DONE")


def torn(store_path: str, run: str) -> None:
    import fcntl
    import os

    from tracelock.storage.directory import DirectoryStore
    from tracelock.storage.directory.journal import data_end

    store = DirectoryStore(store_path)
    first = store.append(run, "run.start", payload={"input": run}, meta={"status": "running"})
    second = store.append(run, "effect", payload={"n": 1})
    _say(f"ACK {first.seq} {first.hash}")
    _say(f"ACK {second.seq} {second.hash}")
    lock = os.open(Path(store_path) / "lock", os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    fd = os.open(Path(store_path) / "journal.log", os.O_RDWR)
    os.pwrite(fd, b'{"i":2,"kind":"effect","meta":null,"pay', data_end(fd))
    os._exit(9)


def service(store_path: str, module: str, stop: str) -> None:
    from tracelock.runtime.runtime import Runtime

    sys.path.insert(0, str(Path.cwd()))
    agent = importlib.import_module(module)
    runtime = Runtime(store_path, policy="policy.toml", toolkits=(agent.kit,))
    try:
        _say("READY")
        number = 0
        while not Path(stop).exists():
            result = runtime.run(agent.agent, {"key": f"k{number}", "amount": number})
            _say(f"RUN {result.run_id} {result.status}")
            number += 1
    finally:
        runtime.close()
        runtime.store.close()


def sealing(store_path: str, name: str, runs: str, seal_bytes: str) -> None:
    from tracelock.storage.directory import DirectoryStore

    with DirectoryStore(store_path, seal_bytes=int(seal_bytes)) as store:
        _say("READY")
        for number in range(int(runs)):
            run = f"{name}-{number}"
            for step in range(6):
                kind = "run.start" if step == 0 else "effect"
                payload = {"run": run, "step": step, "pad": "s" * 300 * step}
                entry = store.append(run, kind, payload=payload)
                _say(f"ACK {entry.seq} {entry.hash} {run} {entry.payload}")
        if store.seal_error is not None:
            _say(f"SEAL-ERROR {store.seal_error}")
    _say("DONE")


def sealing_forever(store_path: str, seed: str, seal_bytes: str, pause_ms: str = "0") -> None:
    import time

    from tracelock.storage.directory import DirectoryStore

    store = DirectoryStore(store_path, seal_bytes=int(seal_bytes))
    _say("READY")
    for number in itertools.count():
        run = f"k{seed}-{number}"
        entry = store.append(run, "run.start", payload={"input": run}, meta={"status": "running"})
        _say(f"ACK {entry.seq} {entry.hash}")
        for step in range(1, 4):
            padded = {"n": step, "pad": "q" * (step * 211)}
            store.append(run, "effect", payload=padded, durable=False)
            entry = store.append(run, "effect", payload={"run": run, "step": step})
            _say(f"ACK {entry.seq} {entry.hash}")
        entry = store.append(run, "run.end", payload={"output": run}, meta={"status": "completed"})
        _say(f"ACK {entry.seq} {entry.hash}")
        # A slow writer falls behind the other one; then a read, as an operator's command
        # makes between commits, may meet blocks the other sealed and freed meanwhile.
        time.sleep(int(pause_ms) / 1000)
        store.entry_at(max(0, entry.seq - 40))


def reader_forever(store_path: str, stop: str) -> None:
    """One read-only handle, kept open while others append and seal: reads every run it
    knows of, entries and payloads, again and again; prints ``READ <entries>`` per pass, or
    ``ERR <code> <message>`` and stops."""
    from tracelock.errors import TracelockError
    from tracelock.storage.directory import DirectoryStore

    with DirectoryStore(store_path, read_only=True) as store:
        _say("READY")
        while not Path(stop).exists():
            count = 0
            try:
                for info in store.runs():
                    for entry in store.entries(info.run):
                        if entry.payload is not None:
                            store.get_payload_bytes(entry.payload)
                        count += 1
            except TracelockError as exc:
                _say(f"ERR {exc.code} {exc.message}")
                return
            _say(f"READ {count}")


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "verify":
        verify(*arguments)
    elif command == "same-run":
        same_run(*arguments)
    elif command == "tasks":
        tasks(*arguments)
    elif command == "torn":
        torn(*arguments)
    elif command == "service":
        service(*arguments)
    elif command == "reader-forever":
        reader_forever(*arguments)
    elif command == "sealing":
        sealing(*arguments)
    elif command == "sealing-forever":
        sealing_forever(*arguments)
    else:
        raise SystemExit(f"unknown command {command}")
