"""Child process of the PostgreSQL fault tests: appends until stopped and prints one line
``ACK seq hash`` per acknowledged append (flushed before the next append), so the parent
knows exactly what the store promised.

``kill`` mode: THREADS threads append until the process is killed. ``restart`` mode: one
thread appends until an append fails, prints ``ERROR code``, tries the failed handle once
more (``OLD code``), then opens a new handle (retrying while the server is down), appends
``AFTER`` more entries with it and prints ``DONE``.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from tracelock.errors import TracelockError
from tracelock.storage.errors import StoreConnectionError
from tracelock.storage.postgres import PostgresStore

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def append(store: PostgresStore, run: str, step: int) -> None:
    entry = store.append(run, "effect", payload={"run": run, "step": step}, new_run=step == 0)
    say(f"ACK {entry.seq} {entry.hash}")


def kill_mode(url: str, threads: int) -> None:
    store = PostgresStore(url)

    def work(number: int) -> None:
        step = 0
        try:
            while True:
                append(store, f"k{number}", step)
                step += 1
        except BaseException as exc:  # the parent must not wait for lines that never come
            sys.stderr.write(f"append failed: {exc!r}\n")
            sys.stderr.flush()
            os._exit(3)

    for number in range(threads):
        threading.Thread(target=work, args=(number,), daemon=True).start()
    threading.Event().wait()


def restart_mode(url: str, after: int) -> None:
    store = PostgresStore(url)
    step = 0
    try:
        while True:
            append(store, "r", step)
            step += 1
    except TracelockError as exc:
        say(f"ERROR {exc.code}")
    try:
        append(store, "r", step)
    except TracelockError as exc:
        say(f"OLD {exc.code}")
    while True:
        try:
            fresh = PostgresStore(url, connect_timeout=1)
            break
        except StoreConnectionError:
            time.sleep(0.05)
    with fresh:
        for number in range(after):
            append(fresh, "s", number)
    say("DONE")


if __name__ == "__main__":
    if sys.argv[2] == "kill":
        kill_mode(sys.argv[1], int(sys.argv[3]))
    else:
        restart_mode(sys.argv[1], int(sys.argv[3]))
