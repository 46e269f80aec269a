"""Child process of the PostgreSQL concurrency test: THREADS threads of one handle append
EACH entries to a run of their own and EACH to a run shared with every other writer, then
print how many appends were made and how many transactions they took."""

from __future__ import annotations

import sys
import threading

from tracelock.storage.postgres import PostgresStore


def main(url: str, name: str, threads: int, each: int) -> None:
    with PostgresStore(url) as store:
        failures: list[BaseException] = []

        def work(number: int) -> None:
            own = f"{name}-t{number}"
            try:
                for step in range(each):
                    store.append(own, "effect", payload={"step": step}, new_run=step == 0)
                    store.append("shared", "effect", payload={"from": own, "step": step})
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if failures:
            raise failures[0]
        sys.stdout.write(f"{store.append_calls} {store.transactions}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
