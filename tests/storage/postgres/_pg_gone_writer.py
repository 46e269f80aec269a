"""Child process of the server-gone tests: a writer that appends to run ``r``, printing
``ACK seq hash`` per acknowledged append (flushed before the next append), until an append
fails: then it prints ``ERROR code`` and ``OLD code`` (the failed handle tried once more).

With IDLE_AFTER > 0 it prints ``IDLE`` after that many appends and waits for a line on
stdin before the next one (the parent stops the server meanwhile). After the failure it
waits for a line on stdin (the server is back), prints ``AGAIN code`` or ``AGAIN ok`` for
one more append on the old handle, opens a new handle, appends AFTER entries to run ``s``
with it and prints ``DONE``. CONNECT_TIMEOUT (seconds) is the handles' ``connect_timeout``.

Usage: python -m tests.storage.postgres._pg_gone_writer URL IDLE_AFTER AFTER CONNECT_TIMEOUT
"""

from __future__ import annotations

import sys

from tracelock.errors import TracelockError
from tracelock.storage.postgres import PostgresStore


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def append(store: PostgresStore, run: str, step: int) -> None:
    entry = store.append(run, "effect", payload={"run": run, "step": step}, new_run=step == 0)
    say(f"ACK {entry.seq} {entry.hash}")


def main(url: str, idle_after: int, after: int, connect_timeout: float) -> None:
    store = PostgresStore(url, connect_timeout=connect_timeout)
    step = 0
    try:
        while True:
            if step == idle_after > 0:
                say("IDLE")
                sys.stdin.readline()
            append(store, "r", step)
            step += 1
    except TracelockError as exc:
        say(f"ERROR {exc.code}")
    try:
        append(store, "r", step)
        step += 1
    except TracelockError as exc:
        say(f"OLD {exc.code}")
    sys.stdin.readline()
    try:
        append(store, "r", step)
        say("AGAIN ok")
    except TracelockError as exc:
        say(f"AGAIN {exc.code}")
    with PostgresStore(url, connect_timeout=connect_timeout) as fresh:
        for number in range(after):
            append(fresh, "s", number)
    say("DONE")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
