"""Every evidence command on a PostgreSQL store: the same checkpoints, proofs and bundles as
the directory store gives for the same workload, store verification from the rows (tampered
rows found and named), redaction, the runtime's checkpointer, demo and drift; and the
Merkle node table against the core's reference at many sizes."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from tests.pg_server import Cluster, admin
from tracelock import Runtime
from tracelock.cli.main import cli
from tracelock.core import merkle as M
from tracelock.core.entry import parse_entry
from tracelock.evidence.bundle import BundleFiles, collect_bundle, read_bundle_files
from tracelock.evidence.history import Checkpointer, CheckpointHistory, SigningKey
from tracelock.evidence.keys import PrivateKey, write_private_key
from tracelock.evidence.note import NoteVerifier
from tracelock.evidence.redaction import redact
from tracelock.evidence.store_verify import verify_store_checkpoints
from tracelock.evidence.verify import PinnedKey, verify_bundle
from tracelock.examples import support
from tracelock.storage.backend import NewEntry, Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.postgres import PostgresStore
from tracelock.storage.verify import verify_run, verify_store

ORIGIN = "example.com/tracelock-pg"
SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
TICKETS = [
    {"id": "T-1042", "text": "Hello, the keyboard from order A-1001 arrived broken. Refund?"},
    {"id": "T-1043", "text": "Where is my order A-1002?"},
    {"id": "T-1044", "text": "Refund order A-1001 please, it is broken."},
]
RUN_IDS = ("run-a", "run-b", "run-c")


class FixedClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000

    def __call__(self) -> int:
        self.now += 7
        return self.now


def key() -> SigningKey:
    return SigningKey(PrivateKey.from_seed(SEED), ORIGIN)


def pins() -> list[PinnedKey]:
    return [PinnedKey(key().private_key.public_key, ORIGIN, "test")]


def sql(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def record(store: Store, sandbox: Path, clock: FixedClock) -> dict[str, Any]:
    """Three support runs, a checkpoint, a field redaction, a second checkpoint; then the
    evidence made of them."""
    ids = iter(RUN_IDS)
    with Runtime(
        store, support.POLICY_FILE, toolkits=(support.support,), sandbox=sandbox, clock=clock, ids=lambda: next(ids)
    ) as runtime:
        for ticket in TICKETS:
            assert runtime.run(support.agent, ticket).status == "completed"
    history = CheckpointHistory.of(store)
    first, _ = history.sign(store, key())
    redaction = redact(store, "run-a", 0, fields=["args"], by="dpo@example.com", reason="erasure")
    second, created = history.sign(store, key())
    assert created and second.number == 2
    files = collect_bundle(store, RUN_IDS, second, signer_vkeys=history.signer_vkeys(2))
    report, verdict = verify_store_checkpoints(store, pins(), origin=ORIGIN)
    return {
        "notes": [first.note, second.note],
        "consistency": history.consistency(2),
        "index": history.index(),
        "bundle": files,
        "redaction": redaction.to_dict(),
        "verify": report.to_dict(),
        # (The directory store's node files are written when its handle closes.)
        "verdict": verdict.to_dict() | {"newest": None, "merkle_cache": None},
        "lines": [entry.line for entry in store.iter_entries()],
    }


def test_checkpoints_and_bundles_are_byte_identical_on_both_backends(pg_url: str, tmp_path: Path) -> None:
    clock = FixedClock()
    with DirectoryStore(tmp_path / "store", clock=clock) as directory_store:
        directory = record(directory_store, tmp_path / "sandbox-d", clock)
    clock = FixedClock()
    with PostgresStore(pg_url, clock=clock) as postgres_store:
        postgres = record(postgres_store, tmp_path / "sandbox-p", clock)
    assert directory["verify"]["ok"] and directory["verify"]["redacted"] == 1, directory["verify"]
    assert postgres["verify"]["ok"], postgres["verify"]
    for name in ("notes", "consistency", "bundle", "redaction", "lines", "verdict"):
        assert postgres[name] == directory[name], name
    assert [line["root"] for line in postgres["index"]] == [line["root"] for line in directory["index"]]
    assert postgres["index"][1]["file"] == "tracelock_checkpoints/2"
    for counted in ("entries", "runs", "redacted"):
        assert postgres["verify"][counted] == directory["verify"][counted], counted
    manifest = json.loads(postgres["bundle"]["manifest.json"])
    assert len(manifest["redacted"]) == 1
    # A bundle made from PostgreSQL verifies offline.
    report = verify_bundle(BundleFiles("pg", "dir", postgres["bundle"], []), pins(), origin=ORIGIN)
    assert report.ok, [failure.to_dict() for failure in report.failures]
    assert {run.run for run in report.runs} == set(RUN_IDS)


def _cli(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    try:
        document = json.loads(result.stdout)
    except ValueError:
        document = result.output
    return result.exit_code, document


def test_every_evidence_command_works_on_a_postgres_store(pg_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "log.key"
    write_private_key(key_file, key().private_key)
    (tmp_path / "log.vkey").write_text(NoteVerifier(ORIGIN, key().private_key.public_key).vkey + "\n")
    ticket = tmp_path / "ticket.json"
    ticket.write_text(json.dumps(TICKETS[0]))
    store = ["--store", pg_url]
    for run_id in ("cli-a", "cli-b"):
        code, ran = _cli(
            "run", "tracelock.examples.support:agent", "--input", str(ticket), "--policy", str(support.POLICY_FILE),
            "--sandbox", str(tmp_path / "sandbox"), "--run-id", run_id, *store,
        )
        assert code == 0, ran
    code, signed = _cli("checkpoint", "--key", str(key_file), *store)
    assert code == 0 and signed["created"] and signed["checkpoint"]["number"] == 1, signed
    code, proved = _cli("prove", "cli-a", *store)
    assert code == 0 and proved["ok"] and all(p["verified"] for p in proved["proofs"]), proved
    code, redacted = _cli("redact", "cli-a", "0", "--field", "args", "--by", "dpo", "--reason", "erasure", *store)
    assert code == 0 and len(redacted["redactions"]) == 1, redacted
    digest = redacted["redactions"][0]["payload"]
    with PostgresStore(pg_url, read_only=True) as handle:
        assert handle.payload_state(digest) == "redacted"
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT data, redacted FROM tracelock_payloads WHERE hash = %s", (bytes.fromhex(digest),)).fetchone()
    assert row == (None, True)
    code, second = _cli("checkpoint", "--key", str(key_file), *store)
    assert code == 0 and second["checkpoint"]["number"] == 2 and len(second["consistency_proof"]) >= 1, second
    code, consistent = _cli("prove", "--consistency", "1", "2", *store)
    assert code == 0 and consistent["ok"], consistent
    code, checked = _cli("verify", "--key", str(tmp_path / "log.vkey"), *store)
    assert code == 0 and checked["ok"] and checked["redacted"] == 1, checked
    assert checked["checkpoint"]["trust"] == "pinned_key" and checked["checkpoint"]["checked"] == [1, 2]
    assert checked["checkpoint"]["merkle_cache"] == "checked"
    code, one = _cli("verify", "cli-b", *store)
    assert code == 0 and one["ok"] and one["runs"] == 1, one
    out = tmp_path / "bundle.zip"
    code, exported = _cli("export", "cli-a", "cli-b", "--out", str(out), *store)
    assert code == 0 and exported["redacted"] and exported["checkpoint"]["number"] == 2, exported
    code, offline = _cli("verify", str(out), "--key", str(tmp_path / "log.vkey"))
    assert code == 0 and offline["ok"], offline
    files = read_bundle_files(out).files
    assert json.loads(files["manifest.json"])["redacted"][0]["payload"] == digest
    # Export signs a newer checkpoint first when asked and the latest does not cover the runs.
    other = tmp_path / "other.json"
    other.write_text(json.dumps(TICKETS[2]))
    code, ran = _cli(
        "run", "tracelock.examples.support:agent", "--input", str(other), "--policy", str(support.POLICY_FILE),
        "--sandbox", str(tmp_path / "sandbox"), "--run-id", "cli-c", *store,
    )
    assert code == 0, ran
    code, fresh = _cli("export", "cli-c", "--out", str(tmp_path / "c"), "--key", str(key_file), *store)
    assert code == 0 and fresh["signed_checkpoint"] and fresh["checkpoint"]["number"] == 3, fresh
    # ... and the bundle's run replays offline against the agent's code.
    code, replayed = _cli(
        "verify", str(tmp_path / "c"), "--key", str(tmp_path / "log.vkey"), "--replay", "tracelock.examples.support:agent"
    )
    assert code == 0 and replayed["ok"] and [r["matched"] for r in replayed["replay"]["runs"]] == [True], replayed


def _workload(store: Store, count: int) -> None:
    """``count`` entries over a few interleaved runs, appended in batches of varied sizes."""
    done = 0
    batch = 1
    while done < count:
        size = min(batch, count - done)
        store.append_many(
            [NewEntry(f"r{(done + k) % 5}", "effect", payload={"n": done + k}) for k in range(size)]
        )
        done += size
        batch = batch % 7 + 1


def test_roots_and_proofs_at_many_sizes_equal_the_core_and_the_directory_store(pg_url: str, tmp_path: Path) -> None:
    with PostgresStore(pg_url, clock=FixedClock()) as pg, DirectoryStore(tmp_path / "d", clock=FixedClock()) as directory:
        _workload(pg, 45)
        _workload(directory, 45)
        # A first query grows the node table to 32 leaves; the next ones continue from there.
        assert pg.tree_root(45) == directory.tree_root(45)
        _workload(pg, 300)
        _workload(directory, 300)
        leaves = [M.leaf_hash(entry.line) for entry in pg.iter_entries()]
        assert leaves == [M.leaf_hash(entry.line) for entry in directory.iter_entries()]
        n = len(leaves)
        assert n == 345 and pg.tree_size() == n
        for size in range(n + 1):
            assert pg.tree_root(size) == M.root(leaves[:size]), size
        for size in (1, 2, 15, 16, 17, 31, 32, 33, 64, 100, 255, 256, 257, 300, n):
            for index in sorted(i for i in {0, 1, size // 3, size // 2, size - 2, size - 1} if 0 <= i < size):
                expected = M.inclusion_proof_from_leaves(index, leaves[:size])
                assert pg.inclusion_proof(index, size) == expected == directory.inclusion_proof(index, size)
            for old in sorted(o for o in {1, 2, size // 3, size // 2, size - 1, size} if 1 <= o <= size):
                expected = M.consistency_proof_from_leaves(old, leaves[:size])
                assert pg.consistency_proof(old, size) == expected == directory.consistency_proof(old, size)
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT level, count(*), max(idx) FROM tracelock_merkle_nodes GROUP BY level ORDER BY level").fetchall()
    # 345 leaves: 21 chunks of 16 stored at level 4, then 10, 5, 2 and 1 above.
    assert rows == [(4, 21, 20), (5, 10, 9), (6, 5, 4), (7, 2, 1), (8, 1, 0)]
    # Answers come from the stored nodes, not from every leaf: a leaf hash altered under a
    # stored node changes nothing that node covers, only the proofs that read it.
    sql(pg_url, "UPDATE tracelock_entries SET leaf = sha256(leaf) WHERE seq = 5")
    with PostgresStore(pg_url, read_only=True) as reader:
        assert reader.tree_root(n) == M.root(leaves) and reader.tree_root(256) == M.root(leaves[:256])
        assert reader.inclusion_proof(300, n) == M.inclusion_proof_from_leaves(300, leaves)
        assert reader.inclusion_proof(4, n) != M.inclusion_proof_from_leaves(4, leaves)
    with pytest.raises(M.ProofRequestError), PostgresStore(pg_url, read_only=True) as reader:
        reader.tree_root(n + 1)


def test_a_role_that_may_only_read_gets_the_same_proofs(pg_cluster: Cluster, pg_database: str, pg_url: str) -> None:
    with PostgresStore(pg_url, clock=FixedClock()) as store:
        _workload(store, 70)
        expected = [store.tree_root(size) for size in range(71)]
    sql(pg_url, "DELETE FROM tracelock_merkle_nodes")
    admin(pg_cluster, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO tl_limited", database=pg_database)
    with PostgresStore(pg_cluster.url(pg_database, "tl_limited"), read_only=True) as reader:
        assert [reader.tree_root(size) for size in range(71)] == expected
        assert reader.inclusion_proof(5, 70) == M.inclusion_proof_from_leaves(5, [M.leaf_hash(e.line) for e in reader.iter_entries()])
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM tracelock_merkle_nodes").fetchone() == (0,)


# -- verification of the rows: each tampering found and named ----------------------------


@pytest.fixture
def recorded(pg_url: str, tmp_path: Path) -> str:
    clock = FixedClock()
    with PostgresStore(pg_url, clock=clock) as store:
        ids = iter(RUN_IDS)
        with Runtime(
            store, support.POLICY_FILE, toolkits=(support.support,), sandbox=tmp_path / "sandbox", clock=clock,
            ids=lambda: next(ids),
        ) as runtime:
            for ticket in TICKETS:
                runtime.run(support.agent, ticket)
        report = verify_store(store)
        assert report.ok and report.entries == store.size() and report.runs >= 3, report.to_dict()
    return pg_url


def _verify(url: str) -> dict[str, Any]:
    with PostgresStore(url, read_only=True) as store:
        return verify_store(store).to_dict()


def _line_of(url: str, seq: int) -> bytes:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT line FROM tracelock_entries WHERE seq = %s", (seq,)).fetchone()
    assert row is not None
    return bytes(row[0])


def _set_line(url: str, seq: int, line: bytes) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE tracelock_entries SET line = %s WHERE seq = %s", (line, seq))


def test_an_altered_entry_line_breaks_its_run_chain(recorded: str) -> None:
    line = _line_of(recorded, 3)
    entry = parse_entry(line)
    _set_line(recorded, 3, line.replace(f'"ts":{entry.ts}'.encode(), f'"ts":{entry.ts + 1}'.encode()))
    issue = _verify(recorded)["issue"]
    assert issue["code"] == "JOURNAL_CHAIN_BROKEN" and issue["run"] == entry.run and issue["seq"] > 3, issue


def test_a_line_that_is_not_canonical_is_malformed(recorded: str) -> None:
    _set_line(recorded, 2, _line_of(recorded, 2).replace(b'{"i":', b'{ "i":', 1))
    issue = _verify(recorded)["issue"]
    assert issue["code"] == "JOURNAL_MALFORMED_ENTRY" and issue["seq"] == 2, issue


def test_a_deleted_entry_is_a_seq_gap(recorded: str) -> None:
    sql(recorded, "DELETE FROM tracelock_entries WHERE seq = 5")
    issue = _verify(recorded)["issue"]
    assert issue["code"] == "JOURNAL_SEQ_GAP" and issue["seq"] == 5, issue


def test_altered_payload_bytes_are_a_hash_mismatch(recorded: str) -> None:
    sql(recorded, "UPDATE tracelock_payloads SET data = data || ' '::bytea WHERE hash = (SELECT hash FROM tracelock_payloads ORDER BY hash LIMIT 1)")
    assert _verify(recorded)["issue"]["code"] == "PAYLOAD_HASH_MISMATCH"


def test_a_payload_erased_without_a_redaction_entry_is_named(recorded: str) -> None:
    sql(recorded, "UPDATE tracelock_payloads SET data = NULL, redacted = true WHERE hash = (SELECT hash FROM tracelock_payloads ORDER BY hash LIMIT 1)")
    assert _verify(recorded)["issue"]["code"] == "PAYLOAD_ERASED_WITHOUT_REDACTION"


def test_a_deleted_payload_is_missing(recorded: str) -> None:
    sql(recorded, "DELETE FROM tracelock_payloads WHERE hash = (SELECT hash FROM tracelock_payloads ORDER BY hash LIMIT 1)")
    assert _verify(recorded)["issue"]["code"] == "PAYLOAD_MISSING"


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("UPDATE tracelock_runs SET status = 'failed' WHERE run = 'run-b'", "status"),
        ("UPDATE tracelock_runs SET entries = entries + 1 WHERE run = 'run-a'", "entries"),
        ("UPDATE tracelock_runs SET last_hash = repeat('0', 64) WHERE run = 'run-c'", "last_hash"),
        ("UPDATE tracelock_entries SET leaf = sha256(leaf) WHERE seq = 4", "leaf hash"),
        ("UPDATE tracelock_entries SET i = i + 100 WHERE seq = 6", "index"),
        ("UPDATE tracelock_head SET next_seq = next_seq - 1", "JOURNAL_SEQ_GAP"),
        ("DELETE FROM tracelock_runs WHERE run = 'run-b'", "no run row"),
    ],
)
def test_columns_that_contradict_the_lines_are_index_tampering(recorded: str, statement: str, words: str) -> None:
    sql(recorded, statement)
    issue = _verify(recorded)["issue"]
    assert issue is not None
    if words == "JOURNAL_SEQ_GAP":
        # The head says one entry fewer: the last row is past the journal's end.
        assert issue["code"] in ("STORE_INDEX_TAMPERED", "JOURNAL_SEQ_GAP"), issue
        return
    assert issue["code"] == "STORE_INDEX_TAMPERED" and words in issue["message"], issue


def test_the_last_entry_of_a_run_rewritten_is_caught_by_its_checkpoint(recorded: str) -> None:
    with PostgresStore(recorded) as store:
        CheckpointHistory.of(store).sign(store, key())
        last = store.entries("run-c")[-1]
    rewritten = last.line.replace(f'"ts":{last.ts}'.encode(), f'"ts":{last.ts + 1}'.encode())
    sql(
        recorded,
        f"UPDATE tracelock_runs SET last_hash = '{parse_entry(rewritten).hash}', updated_ts = {last.ts + 1} "
        "WHERE run = 'run-c'",
    )
    _set_line(recorded, last.seq, rewritten)
    sql(recorded, f"UPDATE tracelock_entries SET leaf = '\\x{M.leaf_hash(rewritten).hex()}'::bytea WHERE seq = {last.seq}")
    with PostgresStore(recorded, read_only=True) as store:
        assert verify_store(store).ok  # the rows agree with each other: only the signature tells
        report, _ = verify_store_checkpoints(store, pins())
    assert report.issue is not None and report.issue.code == "EVIDENCE_CHECKPOINT_INCONSISTENT", report.to_dict()


def test_an_altered_merkle_node_is_reported_and_refused(recorded: str, tmp_path: Path) -> None:
    with PostgresStore(recorded) as store:
        CheckpointHistory.of(store).sign(store, key())
    sql(recorded, "UPDATE tracelock_merkle_nodes SET hash = sha256(hash) WHERE level = 4 AND idx = 0")
    with PostgresStore(recorded, read_only=True) as store:
        report, verdict = verify_store_checkpoints(store, pins())
        assert report.issue is not None and report.issue.code == "STORE_MERKLE_TAMPERED", report.to_dict()
        assert verdict.merkle_cache == "tampered"
        assert "tracelock_merkle_nodes" in report.issue.message
    key_file = tmp_path / "log.key"
    write_private_key(key_file, key().private_key)
    code, refused = _cli("checkpoint", "--key", str(key_file), "--store", recorded)
    assert code == 2 and refused["error"]["code"] == "STORE_MERKLE_TAMPERED", refused
    code, proved = _cli("prove", "run-a", "--store", recorded)
    assert code == 1 and proved["wrong"] == "merkle_cache", proved
    # Deleting the rows has them rebuilt from the entries.
    sql(recorded, "DELETE FROM tracelock_merkle_nodes")
    code, proved = _cli("prove", "run-a", "--store", recorded)
    assert code == 0 and proved["ok"], proved


def test_verify_run_reads_a_postgres_store(recorded: str) -> None:
    with PostgresStore(recorded, read_only=True) as store:
        report = verify_run(store, "run-a")
        assert report.ok and report.entries == len(store.entries("run-a"))


# -- the runtime's checkpointer, concurrent signers, demo, drift --------------------------


def test_a_runtime_checkpointer_keeps_its_checkpoints_in_the_database(pg_url: str, tmp_path: Path) -> None:
    checkpointer = Checkpointer(key())
    with PostgresStore(pg_url) as store:
        ids = iter(RUN_IDS)
        with Runtime(
            store, support.POLICY_FILE, toolkits=(support.support,), sandbox=tmp_path / "sandbox",
            ids=lambda: next(ids), checkpointer=checkpointer,
        ) as runtime:
            for ticket in TICKETS[:2]:
                runtime.run(support.agent, ticket)
        history = CheckpointHistory.of(store)
        assert history.numbers() == [1, 2]
        assert checkpointer.last == history.load(2)
        assert history.load(2).size == store.tree_size()
        assert history.signer_vkeys(2) == [NoteVerifier(ORIGIN, key().private_key.public_key).vkey]


def test_a_handle_with_one_connection_signs(pg_url: str) -> None:
    with PostgresStore(pg_url, pool_size=1) as store:
        _workload(store, 40)
        stored, created = CheckpointHistory.of(store).sign(store, key())
        assert created and stored.size == 40 and stored.root == store.tree_root(40)


def test_concurrent_signers_number_checkpoints_densely(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        store.append("r", "effect", payload=1)
    errors: list[BaseException] = []

    def sign(number: int) -> None:
        try:
            with PostgresStore(pg_url) as handle:
                for k in range(3):
                    handle.append(f"w{number}", "effect", payload=k)
                    CheckpointHistory.of(handle).sign(handle, key())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sign, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    with PostgresStore(pg_url, read_only=True) as store:
        history = CheckpointHistory.of(store)
        numbers = history.numbers()
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3
        sizes = [history.load(n).size for n in numbers]
        assert sizes == sorted(sizes)
        report, _ = verify_store_checkpoints(store, pins())
        assert report.ok, report.to_dict()


def test_demo_runs_on_a_postgres_store(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, document = _cli("demo", "--store", pg_url)
    assert code == 0 and document["ok"], document
    assert document["verify_store"]["ok"] and document["replay"]["matched"]
    with PostgresStore(pg_url, read_only=True) as store:
        assert [run.run for run in store.runs()] == [document["run"]["run_id"]]


def test_drift_records_its_attempts_in_stores_of_their_own(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ticket = tmp_path / "ticket.json"
    ticket.write_text(json.dumps(TICKETS[1]))
    PostgresStore(pg_url).close()
    result = CliRunner(env={"TRACELOCK_STORE": pg_url}).invoke(
        cli,
        ["drift", "tracelock.examples.support:agent", "--input", str(ticket), "--policy", str(support.POLICY_FILE),
         "--n", "2", "--in-process", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert not json.loads(result.stdout)["drifted"]
    with PostgresStore(pg_url, read_only=True) as store:
        assert store.size() == 0
