"""Many writers on one PostgreSQL store: appends from threads and coroutines of one handle
share transactions (group commit), many processes append at once, and the journal stays
one dense, chained, Merkle-consistent sequence."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Awaitable
from pathlib import Path

from tests.storage.postgres._pg_checks import check_journal, head_locked, waiting_on_lock
from tracelock.core.entry import Entry
from tracelock.storage.backend import NewEntry
from tracelock.storage.copy import ReplayClock, copy_store, verify_copy
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import StoreError
from tracelock.storage.postgres import PostgresStore

REPO = Path(__file__).resolve().parents[3]
WRITER = Path(__file__).with_name("_pg_threads_writer.py")


def test_threads_share_commits_and_the_journal_stays_one_chain(pg_url: str, tmp_path: Path) -> None:
    threads, runs_each, steps = 8, 3, 6
    errors: list[BaseException] = []
    with PostgresStore(pg_url, pool_size=3) as store:
        store.append("shared", "run.start", meta={"status": "running"})

        def work(number: int) -> None:
            try:
                for run_number in range(runs_each):
                    run = f"t{number}-{run_number}"
                    store.append(run, "run.start", payload={"input": run}, meta={"status": "running"}, new_run=True)
                    for step in range(steps):
                        store.append(run, "effect", payload={"step": step, "run": run}, durable=False)
                        store.append("shared", "effect", payload={"from": run, "step": step})
                    store.append(run, "run.end", payload={"output": run}, meta={"status": "completed"})
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        total = 1 + threads * runs_each * (2 + 2 * steps)
        entries = check_journal(store, total)
        assert store.append_calls == total
        assert store.transactions <= store.append_calls
        shared = [entry for entry in entries if entry.run == "shared"]
        assert [entry.i for entry in shared] == list(range(1 + threads * runs_each * steps))
        assert {info.status for info in store.runs() if info.run != "shared"} == {"completed"}
        # The directory store rebuilt from this journal has the same bytes and the same root.
        clock = ReplayClock()
        with DirectoryStore(tmp_path / "copy", clock=clock) as directory:
            assert copy_store(store, directory, clock) == total
            report = verify_copy(store, directory, total)
            assert report.ok, report.mismatches
            assert directory.tree_root() == store.tree_root()


def test_appends_queued_behind_a_commit_share_one_transaction(pg_url: str) -> None:
    threads = 12
    with PostgresStore(pg_url, pool_size=2) as store:
        store.append("r", "run.start")
        before = store.transactions
        with head_locked(pg_url):
            workers = [
                threading.Thread(target=store.append, args=(f"w{n}", "run.start"), kwargs={"payload": {"n": n}})
                for n in range(threads)
            ]
            for worker in workers:
                worker.start()
            # One leader waits for the lock in PostgreSQL; the others queue in the handle.
            waiting_on_lock(pg_url)
            while store.append_calls < 1 + threads:
                threading.Event().wait(0.002)
        for worker in workers:
            worker.join()
        # The first leader's transaction, then one for everything that queued behind it.
        assert store.transactions - before == 2
        check_journal(store, 1 + threads)


def test_append_async_does_not_block_the_event_loop_and_tasks_share_commits(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.append("a", "run.start")

        async def main() -> list[Entry]:
            with head_locked(pg_url) as blocker:
                pending = asyncio.ensure_future(store.append_async("a", "effect", payload={"n": 0}))
                # The loop keeps running while the commit waits for the lock.
                ticks = 0
                while store.append_calls < 2 or ticks < 20:
                    await asyncio.sleep(0)
                    ticks += 1
                assert not pending.done()
                more: list[Awaitable[Entry | list[Entry]]] = [
                    store.append_async("a", "effect", payload={"n": n}) for n in range(1, 30)
                ]
                more.append(store.append_many_async([NewEntry("b", "run.start"), NewEntry("a", "effect")]))
                await asyncio.to_thread(waiting_on_lock, pg_url)
                assert not pending.done()
                blocker.rollback()
                first = await pending
                rest = await asyncio.gather(*more)
            flat = [first]
            for item in rest:
                flat += item if isinstance(item, list) else [item]
            return flat

        transactions = store.transactions
        entries = asyncio.run(main())
        # Call order is seq order; the 31 calls queued behind the first took one transaction.
        assert [entry.seq for entry in entries] == list(range(1, 33))
        assert store.transactions - transactions == 2
        check_journal(store, 33)


def test_a_bad_append_fails_alone_within_a_shared_transaction(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.append("done", "run.start")
        store.append("done", "run.end")

        async def main() -> list[object]:
            with head_locked(pg_url) as blocker:
                calls = [
                    store.append_async("ok", "run.start"),
                    store.append_async("done", "effect"),  # the run has ended
                    store.append_async("ok", "bad kind!"),  # not a kind
                    store.append_many_async([NewEntry("ok", "effect"), NewEntry("done", "effect")]),
                    store.append_async("ok", "effect", payload={"last": True}),
                ]
                await asyncio.to_thread(waiting_on_lock, pg_url)
                blocker.rollback()
                return list(await asyncio.gather(*calls, return_exceptions=True))

        outcomes = asyncio.run(main())
        assert isinstance(outcomes[0], Entry) and isinstance(outcomes[4], Entry)
        assert isinstance(outcomes[1], StoreError) and "has ended" in outcomes[1].message
        assert isinstance(outcomes[2], Exception)
        assert isinstance(outcomes[3], StoreError)  # all or nothing: the whole call failed
        assert [(e.seq, e.i) for e in (outcomes[0], outcomes[4])] == [(2, 0), (3, 1)]
        check_journal(store, 4)


def test_processes_with_threads_append_concurrently(pg_url: str) -> None:
    processes, threads, each = 3, 4, 15
    with PostgresStore(pg_url) as store:
        store.append("shared", "run.start")
    children = [
        subprocess.Popen(
            [sys.executable, str(WRITER), pg_url, f"p{n}", str(threads), str(each)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )
        for n in range(processes)
    ]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        reports.append([int(number) for number in out.split()])
    per_process = threads * each * 2
    assert all(appended == per_process for appended, _ in reports)
    with PostgresStore(pg_url, read_only=True) as store:
        entries = check_journal(store, 1 + processes * per_process)
        shared = store.entries("shared")
        assert [entry.i for entry in shared] == list(range(1 + processes * threads * each))
        runs = {entry.run for entry in entries} - {"shared"}
        assert len(runs) == processes * threads
        assert all(store.run_info(run).entries == each for run in runs)


def test_a_thread_leader_hands_coroutines_appends_to_the_worker(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.append("t", "run.start")
        before = store.transactions

        async def main() -> list[Entry]:
            with head_locked(pg_url) as blocker:
                thread = threading.Thread(target=store.append, args=("t", "effect"))
                thread.start()  # leads, and waits for the lock in PostgreSQL
                await asyncio.to_thread(waiting_on_lock, pg_url)
                pending = [store.append_async("c", "run.start")]
                pending += [store.append_async("c", "effect", payload={"n": n}) for n in range(4)]
                blocker.rollback()
                # The thread commits its own entry and leaves; the worker commits the rest.
                entries = await asyncio.wait_for(asyncio.gather(*pending), timeout=120)
                await asyncio.to_thread(thread.join)
            return list(entries)

        entries = asyncio.run(main())
        assert [entry.seq for entry in entries] == list(range(2, 7))
        assert store.transactions - before == 2
        check_journal(store, 7)


def test_a_handle_that_guessed_the_head_wrong_commits_nothing_and_goes_on(pg_url: str) -> None:
    with PostgresStore(pg_url) as first, PostgresStore(pg_url) as second:
        start = first.append("r", "run.start")
        mine = first.append("r", "effect")  # from here `first` builds on the head it left
        theirs = second.append("r", "effect", payload={"behind": "first's back"})
        # `first`'s one-round-trip guess meets `theirs` at seq 2: the unique key refuses it,
        # nothing commits, and the append is done again on the real head.
        after = first.append("r", "effect")
        assert [(e.seq, e.i) for e in (start, mine, theirs, after)] == [(0, 0), (1, 1), (2, 2), (3, 3)]
        assert after.prev == theirs.hash
        assert first.transactions == 3
        check_journal(first, 4)
