"""A worker process of the queue fault tests: ``python -m tests.runtime._queue_worker_child
ARGS...`` is ``tracelock ARGS...`` (the real command), with the tests' agents importable.
SIGUSR1 dumps every thread's stack on stderr (to diagnose a stuck worker)."""

from __future__ import annotations

import faulthandler
import signal
import sys

from tracelock.cli.main import cli

if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    cli(sys.argv[1:])
