"""One compared system in a process of its own, timed on the harness's command.

Systems are timed in separate processes, not side by side in the harness's, because users run
one of them per process: in a shared interpreter one system's background threads (DBOS starts
several) could take the GIL from another's run while it waits for a sync, and a garbage
collection triggered by one system's objects walks every system's. (In full passes the
figures barely moved: tracelock's p50 was 378 us shared, 370 us alone; its p99 then, 5 ms,
was its own, see docs/performance.md.) The harness still makes the systems take turns, one
batch at a time, so the machine's noise falls on all alike; a worker waiting for its turn
blocks on its pipe.

Messages are tuples sent over a :func:`multiprocessing.Pipe`; every answer is
``("ok", value)`` or ``("failed", message, value)`` (``value``: what was done before the
failure, for a batch its samples).
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import workload
from bench.peers.systems import load_system
from bench.syncs import preloaded_count

#: How long the harness waits for one answer before it gives the system up (a batch of 100
#: runs of the slowest system takes about a second here).
ANSWER_TIMEOUT_S = 900.0


class WorkerFailed(Exception):
    """A worker reported a failure, or stopped answering. ``partial``: what it did before."""

    def __init__(self, message: str, partial: Any = None) -> None:
        super().__init__(message)
        self.partial = partial


class Worker:
    """The harness's side: a system in its own process (``spawn``: a fresh interpreter that
    inherits the environment, so the preloaded sync counter counts its syncs)."""

    def __init__(self, key: str, root: Path) -> None:
        context = multiprocessing.get_context("spawn")
        self.key = key
        self._conn, child = context.Pipe()
        self._process = context.Process(target=serve, args=(key, root, child), name=f"bench-{key}", daemon=True)
        self._process.start()
        child.close()

    def call(self, *message: Any) -> Any:
        self._conn.send(message)
        if not self._conn.poll(ANSWER_TIMEOUT_S):
            self.stop()
            raise WorkerFailed(f"no answer to {message[0]!r} within {ANSWER_TIMEOUT_S:.0f} s")
        try:
            answer = self._conn.recv()
        except EOFError:
            self.stop()
            raise WorkerFailed(f"the worker exited (code {self._process.exitcode}) during {message[0]!r}") from None
        if answer[0] == "failed":
            raise WorkerFailed(answer[1], answer[2])
        return answer[1]

    def stop(self) -> None:
        """Close the system (if the worker still answers) and end the process."""
        if self._process.is_alive():
            try:
                self._conn.send(("stop",))
                if self._conn.poll(60):
                    self._conn.recv()
            except (OSError, EOFError):
                pass
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._conn.close()


def serve(key: str, root: Path, conn: Connection) -> None:
    """The worker's side: answer the harness's messages until ``stop``."""
    system = load_system(key)
    while True:
        message = conn.recv()
        verb, args = message[0], message[1:]
        if verb == "stop":
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", _HANDLERS[verb](system, root, *args)))
        except _BatchFailed as failed:
            conn.send(("failed", failed.message, failed.done))
        except Exception as exc:
            conn.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", None))


class _BatchFailed(Exception):
    def __init__(self, message: str, done: Any) -> None:
        super().__init__(message)
        self.message = message
        self.done = done


def _open(system: Any, root: Path, first_warmup: int, warmup: int) -> dict[str, Any]:
    """Open a fresh store under ``root`` and run the warm-up runs (numbered from
    ``first_warmup``, past the timed ones)."""
    system.open(root)
    output = None
    for extra in range(warmup):
        output = system.run(first_warmup + extra)
    expected = workload.plain_python(workload.task(first_warmup + warmup - 1))
    return {"same_output_as_plain": output == expected, "warmup": warmup}


def _batch(system: Any, root: Path, first: int, stop: int) -> tuple[list[float], int | None]:
    """Runs ``first`` to ``stop - 1``: each one's seconds, and the syncs the batch made."""
    run, clock = system.run, time.perf_counter
    samples: list[float] = []
    synced = preloaded_count()
    try:
        for number in range(first, stop):
            before = clock()
            run(number)
            samples.append(clock() - before)
    except Exception as exc:
        raise _BatchFailed(f"run {number} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}", samples) from None
    return samples, None if synced is None else (preloaded_count() or 0) - synced


def _replay(system: Any, root: Path, limit: int) -> tuple[list[float], int]:
    replays: tuple[list[float], int] = system.replay_all(limit)
    return replays


def _close(system: Any, root: Path) -> None:
    system.close()


_HANDLERS = {"open": _open, "batch": _batch, "replay": _replay, "close": _close}
