"""``tracelock store copy``: directory -> PostgreSQL -> directory on a real server is byte
identical (entries, payloads, redaction markers, runs, roots); a non-empty destination and
a wrong connection string are clear errors (exit 2) without the password; the signed
checkpoint history goes with the copy."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from click.testing import CliRunner

from tests.pg_server import PASSWORD_ROLE, Cluster
from tests.storage.storage_helpers import TickClock, record_run
from tracelock.cli.main import cli
from tracelock.evidence.history import DEFAULT_KEY_NAME, CheckpointHistory
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.note import NoteVerifier
from tracelock.evidence.redaction import redact
from tracelock.storage.backend import NewEntry, Store
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.open import open_store

WRONG = "n0t-The-Pa55word!"


def make_source(path: Path) -> str:
    """Three runs (one ended, one open), entries sharing a timestamp, a shared payload and
    a redacted one; returns the redacted payload's digest."""
    with DirectoryStore(path, clock=TickClock()) as store:
        record_run(store, "run-a", effects=3)
        record_run(store, "run-b", effects=1, big="y" * 50)
        store.append_many(
            [
                NewEntry("run-c", "run.start", {"input": "c"}, {"agent": "demo", "status": "running"}),
                NewEntry("run-c", "effect", {"tool": "t", "n": 0, "text": "x" * 200}),
                NewEntry("run-a2", "run.start", {"input": "c"}, {"agent": "other", "parent": "run-a"}),
            ]
        )
        secret = store.entries("run-b")[0].payload
        redact(store, "run-b", "start", by="ops", reason="personal data")
        assert secret is not None and store.payload_state(secret) == "redacted"
        return secret


def snapshot(store: Store) -> dict[str, object]:
    entries = list(store.iter_entries())
    payloads = {}
    for entry in entries:
        if entry.payload:
            state = store.payload_state(entry.payload)
            payloads[entry.payload] = store.get_payload_bytes(entry.payload) if state == "present" else state
    runs = {entry.run for entry in entries}
    return {
        "lines": [entry.line for entry in entries],
        "payloads": payloads,
        "runs": {run: store.run_info(run) for run in runs},
        "root": store.tree_root(),
    }


def copy(source: str, destination: str) -> tuple[int, dict[str, object], str]:
    result = CliRunner().invoke(cli, ["store", "copy", source, destination, "--json"])
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}, result.stderr


def test_directory_to_postgres_to_directory_is_byte_identical(tmp_path: Path, pg_url: str) -> None:
    secret = make_source(tmp_path / "src")
    code, document, stderr = copy(str(tmp_path / "src"), pg_url)
    assert code == 0, document
    assert document["ok"] is True
    assert document["source_root"] == document["copy_root"]
    assert document["entries"] == 12 and document["redacted"] == 1
    assert "copy:" in stderr  # progress goes to stderr, the document alone to stdout
    code, back, _ = copy(pg_url, str(tmp_path / "back"))
    assert code == 0, back
    assert back["copy_root"] == document["source_root"]

    with (
        open_store(tmp_path / "src", create=False, read_only=True) as src,
        open_store(pg_url, create=False, read_only=True) as middle,
        open_store(tmp_path / "back", create=False, read_only=True) as final,
    ):
        original = snapshot(src)
        assert snapshot(middle) == original
        assert snapshot(final) == original
        assert middle.payload_state(secret) == "redacted"
        assert final.payload_state(secret) == "redacted"
    # The copy is a valid directory store in its own right.
    checked = CliRunner().invoke(cli, ["verify", "--store", str(tmp_path / "back"), "--json"])
    assert checked.exit_code == 0, checked.stdout
    assert json.loads(checked.stdout)["redacted"] == 1


def test_the_checkpoint_history_goes_with_the_copy(tmp_path: Path, pg_url: str) -> None:
    """Directory -> PostgreSQL -> directory: every checkpoint (note, consistency proof,
    signer keys) is kept, and each copy verifies against it with the pinned key."""
    key = PrivateKey.from_seed(b"\x07" * 32)
    vkey = NoteVerifier(DEFAULT_KEY_NAME, key.public_key).vkey
    source = tmp_path / "src"
    make_source(source)
    with DirectoryStore(source) as store:
        CheckpointHistory.of(store).sign(store, key)
        store.append("run-d", "run.start", payload={"input": "d"}, meta={"status": "running"})
        CheckpointHistory.of(store).sign(store, key)
    history = CheckpointHistory(source)
    notes = [history.load(number).note for number in (1, 2)]
    proof = history.consistency(2)
    assert proof is not None and history.signer_vkeys(2) == [vkey]

    code, document, _ = copy(str(source), pg_url)
    assert code == 0 and document["checkpoints"] == 2, document
    code, back, _ = copy(pg_url, str(tmp_path / "back"))
    assert code == 0 and back["checkpoints"] == 2, back
    text = CliRunner().invoke(cli, ["store", "copy", str(source), str(tmp_path / "again")])
    assert text.exit_code == 0 and "checkpoint history: 2 checkpoints copied" in text.stdout

    for location in (pg_url, str(tmp_path / "back")):
        with open_store(location, create=False, read_only=True) as copied:
            kept = CheckpointHistory.of(copied)
            assert [kept.load(number).note for number in (1, 2)] == notes
            assert kept.consistency(2) == proof and kept.signer_vkeys(2) == [vkey]
        checked = CliRunner().invoke(cli, ["verify", "--store", location, "--key", vkey, "--json"])
        assert checked.exit_code == 0, checked.stdout
        verdict = json.loads(checked.stdout)["checkpoint"]
        assert verdict["trust"] == "pinned_key" and verdict["checked"] == [1, 2]


def test_postgres_to_postgres_and_directory_to_directory(tmp_path: Path, pg_cluster: Cluster, pg_url: str) -> None:
    make_source(tmp_path / "src")
    assert copy(str(tmp_path / "src"), str(tmp_path / "dir2"))[0] == 0
    assert copy(str(tmp_path / "dir2"), pg_url)[0] == 0
    from tests.pg_server import admin

    admin(pg_cluster, "CREATE DATABASE copy_target")
    code, document, _ = copy(pg_url, pg_cluster.url("copy_target"))
    assert code == 0 and document["ok"] is True


def test_a_non_empty_destination_is_refused(tmp_path: Path, pg_url: str) -> None:
    make_source(tmp_path / "src")
    with open_store(pg_url) as target:
        target.append("other", "run.start")
    code, document, _ = copy(str(tmp_path / "src"), pg_url)
    assert code == 2
    assert document["error"]["code"] == "STORE_NOT_EMPTY"
    with open_store(pg_url, create=False, read_only=True) as target:
        assert target.size() == 1  # nothing was written
    code, document, _ = copy(pg_url, str(tmp_path / "src"))
    assert code == 2 and document["error"]["code"] == "STORE_NOT_EMPTY"


def test_a_wrong_connection_string_is_a_clear_error_without_the_password(
    tmp_path: Path, pg_cluster: Cluster, pg_database: str
) -> None:
    make_source(tmp_path / "src")
    url = pg_cluster.url(pg_database, PASSWORD_ROLE, WRONG)
    code, document, stderr = copy(str(tmp_path / "src"), url)
    assert code == 2
    assert document["error"]["code"] == "STORE_CONNECTION_FAILED"
    text = json.dumps(document) + stderr
    assert WRONG not in text and quote(WRONG, safe="") not in text
