"""Child process of the PostgreSQL concurrency test: appends to its own runs and to a run
shared with the other writers, then prints what it appended."""

from __future__ import annotations

import sys

from tracelock.storage.postgres import PostgresStore


def main(url: str, name: str, count: int) -> None:
    acknowledged = 0
    with PostgresStore(url) as store:
        for number in range(count):
            own = f"{name}-{number // 5}"
            if number % 5 == 0:
                store.append(own, "run.start", payload={"input": own}, meta={"status": "running"})
            elif number % 5 == 4:
                store.append(own, "run.end", payload={"n": number}, meta={"status": "completed"})
            else:
                store.append(own, "effect", payload={"shared": "same in every process"})
            store.append("shared", "effect", payload={"from": name, "n": number})
            acknowledged += 2
    sys.stdout.write(f"{acknowledged}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
