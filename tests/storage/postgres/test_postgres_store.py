"""The PostgreSQL backend against a real server: the Store contract, concurrency from
threads and processes, payloads, redaction, reopening, the schema version."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pg_server import Cluster, admin
from tracelock import open_store
from tracelock.cli.main import cli
from tracelock.core.entry import ChainChecker, Entry, build_entry
from tracelock.core.merkle import (
    ProofRequestError,
    consistency_proof_from_leaves,
    inclusion_proof_from_leaves,
    leaf_hash,
    root,
)
from tracelock.storage.backend import NewEntry, Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import (
    PayloadMissingError,
    PayloadRedactedError,
    RunNotFoundError,
    StoreClosedError,
    StoreError,
    StoreFormatError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreSchemaTooNewError,
)
from tracelock.storage.postgres import PostgresStore
from tracelock.storage.postgres.schema import MIGRATIONS, SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[3]


class Ticks:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 3
        return self.now


def assert_consistent(entries: list[Entry]) -> None:
    checker = ChainChecker()
    for entry in entries:
        issue = checker.check(entry)
        assert issue is None, issue


def record(store: Store, run: str, effects: int = 2) -> list[Entry]:
    out = [store.append(run, "run.start", payload={"input": run}, meta={"agent": "demo", "status": "running"})]
    for number in range(effects):
        out.append(store.append(run, "effect", payload={"n": number, "text": "x" * 50}, durable=False))
    out.append(store.append(run, "run.end", payload={"output": run}, meta={"status": "completed"}))
    return out


def test_open_store_selects_postgres_and_entries_chain(pg_url: str) -> None:
    with open_store(pg_url, clock=Ticks()) as store:
        assert isinstance(store, PostgresStore)
        assert isinstance(store, Store)
        written = record(store, "r1") + record(store, "r2", effects=1)
        assert [entry.seq for entry in written] == list(range(7))
        assert store.size() == 7
        assert store.entries("r1") == written[:4]
        assert list(store.iter_entries()) == written
        assert list(store.iter_entries(5)) == written[5:]
        assert_consistent(list(store.iter_entries()))
        info = store.run_info("r1")
        assert (info.agent, info.status, info.entries, info.first_seq, info.last_seq) == ("demo", "completed", 4, 0, 3)
        assert [run.run for run in store.runs()] == ["r2", "r1"]
        assert [run.run for run in store.runs(limit=1)] == ["r2"]
        assert store.runs(status="running") == []


def test_same_appends_give_the_same_bytes_as_the_directory_store(pg_url: str, tmp_path: Path) -> None:
    stores: list[Store] = [PostgresStore(pg_url, clock=Ticks()), DirectoryStore(tmp_path / "d", clock=Ticks())]
    try:
        for store in stores:
            record(store, "a")
            store.append("b", "run.start", payload=None, meta={"parent": "a", "status": "running"}, new_run=True)
            store.append_many([NewEntry("b", "effect", {"k": [1, 2.5, "é"]}), NewEntry("c", "run.start"), NewEntry("b", "effect")])
            store.append("c", "note", meta={"status": "paused"})
        pg, directory = (list(store.iter_entries()) for store in stores)
        assert [entry.line for entry in pg] == [entry.line for entry in directory]
        assert stores[0].runs() == stores[1].runs()
        for entry in directory:
            if entry.payload:
                assert stores[0].get_payload_bytes(entry.payload) == stores[1].get_payload_bytes(entry.payload)
        assert stores[0].tree_root() == stores[1].tree_root()
    finally:
        for store in stores:
            store.close()


def test_run_rules_are_enforced_all_or_nothing(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=Ticks()) as store:
        record(store, "done", effects=0)
        with pytest.raises(StoreError, match="has ended"):
            store.append("done", "effect")
        with pytest.raises(StoreError, match="already exists"):
            store.append("done", "run.start", new_run=True)
        store.append("open", "run.start")
        with pytest.raises(StoreError, match="invalid entry kind"):
            store.append_many([NewEntry("open", "effect"), NewEntry("open", "Bad Kind")])
        assert store.size() == 3  # nothing of the failed batch
        assert [entry.i for entry in store.entries("open")] == [0]
        with pytest.raises(RunNotFoundError):
            store.entries("nope")
        with pytest.raises(RunNotFoundError):
            store.run_info("nope")


def test_payloads_are_stored_once_and_redaction_erases_the_bytes(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=Ticks()) as store:
        first = store.append("a", "run.start", payload={"same": True})
        second = store.append("b", "run.start", payload={"same": True})
        assert first.payload == second.payload is not None
        digest = first.payload
        with PostgresStore(pg_url) as other:
            count = other._one("SELECT count(*) FROM tracelock_payloads")
        assert count == (1,)
        assert store.get_payload(digest) == {"same": True}
        assert store.get_payload_bytes(digest) == b'{"same":true}'
        assert hashlib.sha256(store.get_payload_bytes(digest)).hexdigest() == digest
        assert store.payload_state(digest) == "present"
        assert store.erase_payload(digest) is True
        assert store.erase_payload(digest) is False
        assert store.payload_state(digest) == "redacted"
        with pytest.raises(PayloadRedactedError):
            store.get_payload(digest)
        # Appending the same content again references the redacted payload, like the
        # directory store: redaction is never undone by a later write.
        third = store.append("c", "run.start", payload={"same": True})
        assert third.payload == digest and store.payload_state(digest) == "redacted"
        missing = "0" * 64
        assert store.payload_state(missing) == "missing"
        with pytest.raises(PayloadMissingError):
            store.get_payload_bytes(missing)
        with pytest.raises(PayloadMissingError):
            store.erase_payload(missing)


def test_a_run_s_payloads_are_read_together_on_either_backend(pg_url: str, tmp_path: Path) -> None:
    """``get_payloads_bytes``: the present ones (each once), none of the redacted or missing
    ones; a payload whose bytes no longer match its hash fails the read."""
    stores: list[Store] = [PostgresStore(pg_url, clock=Ticks()), DirectoryStore(tmp_path / "dir", clock=Ticks())]
    try:
        for store in stores:
            kept = store.append("r", "run.start", payload={"kept": 1}).payload
            gone = store.append("r", "effect", payload={"gone": 2}).payload
            other = store.append("r", "run.end", payload={"other": 3}).payload
            assert kept and gone and other
            store.append("tracelock:admin", "payload.redact", meta={"payload": gone, "reason": "test"})
            assert store.erase_payload(gone)
            missing = "0" * 64
            found = store.get_payloads_bytes([kept, gone, missing, kept, other])
            assert found == {kept: b'{"kept":1}', other: b'{"other":3}'}
            assert store.get_payloads_bytes([]) == {}
        pg, directory = stores
        pg.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE tracelock_payloads SET data = %s WHERE hash = %s",
                (b'{"other":4}', bytes.fromhex(other)),
            )
        with PostgresStore(pg_url) as reopened, pytest.raises(StoreError, match="does not match its hash"):
            reopened.get_payloads_bytes([kept, other])
        directory.close()
        journal = tmp_path / "dir" / "journal.log"
        data = journal.read_bytes()
        at = data.index(b'{"other":3}')
        journal.write_bytes(data[:at] + b'{"other":4}' + data[at + 11 :])
        with (
            DirectoryStore(tmp_path / "dir", read_only=True) as reopened_dir,
            pytest.raises(StoreError, match="does not match its hash"),
        ):
            reopened_dir.get_payloads_bytes([kept, other])
    finally:
        for store in stores:
            store.close()


def test_reopen_continues_the_journal_and_read_only_refuses_writes(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=Ticks()) as store:
        record(store, "a", effects=1)
        store.append("open", "run.start")
        store_id = store.store_id
    with PostgresStore(pg_url, clock=Ticks()) as again:
        assert again.store_id == store_id
        entry = again.append("open", "effect")
        assert (entry.seq, entry.i) == (4, 1)
        assert_consistent(list(again.iter_entries()))
    with PostgresStore(pg_url, read_only=True) as reader:
        assert reader.size() == 5
        with pytest.raises(StoreReadOnlyError):
            reader.append("open", "effect")
    store = PostgresStore(pg_url)
    store.close()
    with pytest.raises(StoreClosedError):
        store.size()


def test_missing_store_is_not_created_when_not_asked(pg_url: str) -> None:
    with pytest.raises(StoreNotFoundError):
        PostgresStore(pg_url, create=False)
    with pytest.raises(StoreNotFoundError):
        open_store(pg_url, read_only=True)


def test_a_newer_schema_is_refused_and_left_alone(pg_url: str, pg_cluster: Cluster, pg_database: str) -> None:
    PostgresStore(pg_url).close()
    newer = str(SCHEMA_VERSION + 1)
    admin(pg_cluster, f"UPDATE tracelock_meta SET value = '{newer}' WHERE key = 'schema_version'", database=pg_database)
    for read_only in (False, True):
        with pytest.raises(StoreSchemaTooNewError) as caught:
            PostgresStore(pg_url, read_only=read_only)
        assert caught.value.code == "STORE_SCHEMA_TOO_NEW"
        assert isinstance(caught.value, StoreFormatError)
        assert f"version {newer}" in caught.value.message
    result = CliRunner().invoke(cli, ["log", "--store", pg_url, "--json"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["code"] == "STORE_SCHEMA_TOO_NEW"


def test_merkle_queries_match_the_core_computation(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=Ticks()) as store:
        assert store.tree_size() == 0
        assert store.tree_root() == root([])
        for number in range(11):
            store.append(f"r{number % 3}", "effect", payload={"n": number})
        leaves = [leaf_hash(entry.line) for entry in store.iter_entries()]
        assert store.tree_size() == 11
        for size in range(1, 12):
            assert store.tree_root(size) == root(leaves[:size])
            for seq in range(size):
                assert store.inclusion_proof(seq, size) == inclusion_proof_from_leaves(seq, leaves[:size])
            for size1 in range(1, size + 1):
                assert store.consistency_proof(size1, size) == consistency_proof_from_leaves(size1, leaves[:size])
        with pytest.raises(ProofRequestError):
            store.tree_root(12)
        with pytest.raises(ProofRequestError):
            store.inclusion_proof(11)


def test_concurrent_threads_keep_seq_dense_and_chains_valid(pg_url: str) -> None:
    threads, each = 6, 15
    errors: list[BaseException] = []
    with PostgresStore(pg_url, clock=Ticks(), pool_size=3) as store:
        store.append("shared", "run.start")

        def work(number: int) -> None:
            try:
                for step in range(each):
                    store.append(f"t{number}", "effect", payload={"step": step})
                    store.append("shared", "effect", payload={"t": number, "step": step})
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        entries = list(store.iter_entries())
    assert len(entries) == 1 + threads * each * 2
    assert [entry.seq for entry in entries] == list(range(len(entries)))
    assert_consistent(entries)
    assert [entry.i for entry in entries if entry.run == "shared"] == list(range(1 + threads * each))


def test_concurrent_processes_keep_seq_dense_and_lose_nothing(pg_url: str) -> None:
    count = 25
    with PostgresStore(pg_url) as store:
        store.append("shared", "run.start")
    children = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_pg_writer.py")), pg_url, f"p{n}", str(count)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )
        for n in range(3)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == str(count * 2)
    with PostgresStore(pg_url, read_only=True) as store:
        entries = list(store.iter_entries())
        assert len(entries) == 1 + 3 * count * 2
        assert [entry.seq for entry in entries] == list(range(len(entries)))
        assert_consistent(entries)
        shared = store.entries("shared")
        assert [entry.i for entry in shared] == list(range(1 + 3 * count))
        assert sorted(store.get_payload(e.payload)["from"] for e in shared[1:] if e.payload) == sorted(
            f"p{n}" for n in range(3) for _ in range(count)
        )
        assert {run.status for run in store.runs() if run.run.startswith("p")} == {"completed"}


def test_async_appends_commit_in_call_order(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=Ticks()) as store:

        async def main() -> list[Entry]:
            pending = [store.append_async("r", "run.start")]
            pending += [store.append_async("r", "effect", payload={"n": n}) for n in range(3)]
            batch = await store.append_many_async([NewEntry("r", "effect"), NewEntry("q", "run.start")])
            return [*await asyncio.gather(*pending), *batch]

        entries = asyncio.run(main())
        assert [entry.seq for entry in entries] == list(range(6))
        assert list(store.iter_entries()) == entries
        assert_consistent(entries)


_examples = itertools.count()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["effect", "run.end"]), st.none() | st.integers(0, 3)),
        min_size=1,
        max_size=12,
    )
)
def test_any_append_sequence_matches_the_directory_store(
    pg_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, int | None]]
) -> None:
    name = f"h{next(_examples)}"
    admin(pg_cluster, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
    directory = tmp_path_factory.mktemp("prop") / "d"
    results: list[list[bytes | str]] = []
    for store in (PostgresStore(pg_cluster.url(name), clock=Ticks()), DirectoryStore(directory, clock=Ticks())):
        outcomes: list[bytes | str] = []
        with store:
            for run, kind, payload in ops:
                try:
                    entry = store.append(run, kind, payload={"p": payload} if payload is not None else None)
                    outcomes.append(entry.line)
                except StoreError as exc:
                    outcomes.append(exc.code)
            outcomes.append(store.tree_root())
        results.append(outcomes)
    assert results[0] == results[1]


def test_sessions_commit_durably_even_when_the_database_default_is_off(
    pg_url: str, pg_cluster: Cluster, pg_database: str
) -> None:
    admin(pg_cluster, f"ALTER DATABASE {pg_database} SET synchronous_commit = off")
    with PostgresStore(pg_url, pool_size=2) as store:
        assert store._one("SHOW fsync") == ("on",)
        assert store._one("SHOW synchronous_commit") == ("on",)
        store.append("r", "run.start")
        assert store._one("SHOW synchronous_commit") == ("on",)


def test_a_store_of_an_older_schema_is_migrated_by_its_first_writer(pg_url: str) -> None:
    # A version 2 store (before the append function), made by its own migrations, with a run.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statements in MIGRATIONS[:2]:
            for statement in statements:
                conn.execute(statement.encode())
        conn.execute("INSERT INTO tracelock_meta VALUES ('store_id', 'old'), ('schema_version', '2')")
    with pytest.raises(StoreFormatError, match="needs migrating"):
        PostgresStore(pg_url, read_only=True)
    with PostgresStore(pg_url, clock=Ticks()) as store:
        first = record(store, "a")
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT value FROM tracelock_meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    with PostgresStore(pg_url, read_only=True) as store:
        assert store.entries("a") == first
        assert store.store_id == "old"


def test_the_version_3_call_of_the_append_function_still_works(pg_url: str) -> None:
    """A process of an older tracelock, still running while a newer one migrates the store
    (a rolling upgrade), calls the version 3 append function: it stays, guess check
    included. Its batch is made here as version 3's clients make it (migration 3)."""
    with PostgresStore(pg_url, clock=Ticks()) as store:
        store.append("new", "run.start", payload={"x": 1}, new_run=True)
    start = build_entry(1, "old", 0, "run.start", None, None, 1_700_000_000_000, {"status": "running"})
    batch = {
        "p": [],
        "e": [[1, "old", 0, base64.b64encode(start.line).decode(), leaf_hash(start.line).hex()]],
        "u": [],
        "n": [["old", None, None, "running", start.ts, start.ts, 1, 1, 1, start.hash, False]],
    }
    call = "SELECT tracelock_append(%s::bigint, %s::bigint, %s::json)"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.SerializationFailure):
            conn.execute(call, (0, 1, json.dumps(batch)))  # next_seq is 1 now: refused
        conn.execute(call, (1, 2, json.dumps(batch)))
    with PostgresStore(pg_url, clock=Ticks()) as store:
        assert store.entries("old") == [start]
        assert store.run_info("old").status == "running"
        assert store.append("old", "run.end", meta={"status": "completed"}).seq == 2
        assert_consistent(list(store.iter_entries()))


def test_a_server_that_numbers_entries_into_other_bytes_fails_the_handle(pg_url: str) -> None:
    """The client checks the hash of the last entry the server built against its own: a
    server whose append function builds other bytes (here, one that reports another hash)
    fails the handle loudly instead of returning entries the store does not hold."""
    with PostgresStore(pg_url, clock=Ticks()) as store:
        store.append("setup", "run.start", new_run=True)
    numbered = MIGRATIONS[3][-1]
    assert "tail_hash := hashes[k];" in numbered
    with psycopg.connect(pg_url, autocommit=True) as conn:
        wrong = numbered.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
            "tail_hash := hashes[k];", "tail_hash := repeat('0', 64);"
        )
        conn.execute(wrong.encode())
    with PostgresStore(pg_url, clock=Ticks()) as store:  # a new handle's first commit is numbered
        with pytest.raises(StoreError, match="other than this handle built") as failed:
            store.append("r", "run.start", new_run=True)
        assert failed.value.code == "STORE_DURABILITY_FAILED"
        with pytest.raises(StoreError, match="accepts no more work"):
            store.append("q", "run.start", new_run=True)


def test_the_server_numbers_a_batch_that_interleaves_runs(pg_url: str, tmp_path: Path) -> None:
    """A handle that is not alone has the server number its batch: runs it knows (their
    committed head checked there), a run the batch starts, entries whose prev is an entry of
    the same batch, interleaved. The lines are the directory store's for the same appends."""
    pg_entries: list[Entry] = []
    with PostgresStore(pg_url, clock=Ticks()) as one, PostgresStore(pg_url, clock=Ticks()) as two:
        pg_entries.append(one.append("a", "run.start", payload={"a": 0}, new_run=True))
        pg_entries.append(two.append("other", "run.start", new_run=True))  # one is not alone now
        assert not one._alone
        batch = [
            NewEntry("a", "effect", {"a": 1}),
            NewEntry("b", "run.start", {"b": 0}, {"agent": "x", "status": "running"}, True),
            NewEntry("a", "effect", {"a": 2}),
            NewEntry("b", "run.end", {"b": 1}, {"status": "completed"}),
            NewEntry("a", "effect", None, {"note": ',"seq":1,"prev":null'}),
        ]
        pg_entries += one.append_many(batch)
        assert list(one.iter_entries()) == pg_entries
        assert one.run_info("b").status == "completed" and one.run_info("a").entries == 4
    # The same calls from one handle, reading the clock as the two handles did (once a call).
    readings = iter([entry.ts for entry in pg_entries[:3]])
    with DirectoryStore(tmp_path / "d", clock=lambda: next(readings)) as directory:
        directory.append("a", "run.start", payload={"a": 0}, new_run=True)
        directory.append("other", "run.start", new_run=True)
        directory_entries = list(directory.iter_entries())
        directory_entries += directory.append_many(batch)
    assert [entry.line for entry in pg_entries] == [entry.line for entry in directory_entries]
    assert_consistent(pg_entries)


def test_a_handle_that_did_not_see_another_writer_falls_back_and_appends_in_order(pg_url: str) -> None:
    with PostgresStore(pg_url, clock=Ticks()) as one, PostgresStore(pg_url, clock=Ticks()) as two:
        written = [one.append("r", "run.start", new_run=True)]
        # What each handle knows of run r's head is wrong every other time (the other one
        # appended to it since): the append functions refuse it without writing, and the
        # locked path appends instead.
        for number in range(6):
            handle = one if number % 2 else two
            written.append(handle.append("r", "effect", payload={"n": number}))
            written.append(handle.append(f"s{number}", "run.start", new_run=True))
        assert [entry.seq for entry in written] == list(range(13))
        assert list(one.iter_entries()) == written
        assert_consistent(written)
        assert one.run_info("r").entries == 7
