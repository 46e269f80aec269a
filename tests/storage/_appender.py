"""Child process for the kill tests: appends forever, printing each durable acknowledgement."""

from __future__ import annotations

import sys

from tracelock.storage.directory import DirectoryStore


def main(path: str, seed: int) -> None:
    store = DirectoryStore(path)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    run_number = 0
    step = 0
    while True:
        run = f"p{seed}-{run_number}"
        if step == 0:
            entry = store.append(run, "run.start", payload={"input": run}, meta={"status": "running"})
        elif step == 4:
            entry = store.append(run, "run.end", payload={"n": step}, meta={"status": "completed"})
        else:
            # Two non-durable effects, then a durable one that makes them durable too.
            store.append(run, "effect", payload={"n": step, "pad": "p" * (step * 97)}, durable=False)
            entry = store.append(run, "effect", payload={"shared": "same for every run"})
        sys.stdout.write(f"ACK {entry.seq} {entry.hash}\n")
        sys.stdout.flush()
        step += 1
        if step == 5:
            step = 0
            run_number += 1


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
