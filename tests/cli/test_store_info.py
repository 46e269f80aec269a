"""``tracelock store info``: runs, entries and the bytes a store takes by part, on both
backends; the sealed and unsealed journal of a directory store; bad input exits 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.pg_server import PASSWORD, PASSWORD_ROLE, Cluster, admin, pg_cluster, pg_database  # noqa: F401  (the PostgreSQL fixtures)
from tests.storage.storage_helpers import TickClock, record_run
from tracelock.cli.main import cli
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.postgres import PostgresStore


def info(store: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["store", "info", "--store", store, *extra], catch_exceptions=False)
    return result.exit_code, result.stdout


def info_json(store: str) -> dict[str, Any]:
    code, out = info(store, "--json")
    assert code == 0, out
    document: dict[str, Any] = json.loads(out)
    return document


def disk_bytes(path: Path) -> int:
    """What the files under ``path`` allocate (or their size, when less), counted here; the
    index's files left out (a reading handle adds its write-ahead log while it is open)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            if not name.startswith("index.sqlite"):
                status = os.stat(Path(folder) / name)
                total += min(status.st_size, status.st_blocks * 512)
    return total


def test_a_sealed_directory_store_is_described_by_part(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir, clock=TickClock(), seal_bytes=4096) as store:
        for number in range(30):
            record_run(store, f"r{number}", big=f"payload {number} " * 20)
        store.append("open", "run.start", payload={"x": 1}, meta={"status": "running"})
    document = info_json(str(store_dir))
    assert document["store"] == str(store_dir) and document["backend"] == "directory"
    assert (document["runs"], document["open_runs"], document["entries"]) == (31, 1, 30 * 4 + 1)
    sizes = document["bytes"]
    assert sizes["total"] - sizes["index"] == disk_bytes(store_dir)
    assert sizes["total"] == sum(size for name, size in sizes.items() if name != "total")
    segments = sorted((store_dir / "sealed").glob("*.seg"))
    assert document["segment_files"] == len(segments) > 0
    assert sizes["segments"] == sum(min(p.stat().st_size, p.stat().st_blocks * 512) for p in segments)
    assert sizes["index"] > 0 and sizes["journal"] > 0
    assert document["bytes_per_run"] == round(sizes["total"] / 31)
    assert document["sealed_end"] > 0
    assert document["sealed_end"] + document["unsealed_bytes"] == document["journal_bytes"]
    assert document["journal_bytes"] == len((store_dir / "journal.log").read_bytes().rstrip(b"\0"))
    assert (document["format_version"], document["index_schema"]) == (2, 5)
    code, text = info(str(store_dir))
    assert code == 0
    assert "runs: 31 (1 open); entries: 121" in text
    assert f"sealed in {len(segments)} segment" in text
    assert "note:" not in text  # sealing kept up


def test_an_unsealed_backlog_is_pointed_out(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir, clock=TickClock(), seal_bytes=None) as store:
        for number in range(40):
            record_run(store, f"r{number}", big="y" * 1000)
    # Read by a handle with the default threshold: 40 runs of about 3 KiB lie unsealed.
    document = info_json(str(store_dir))
    assert document["segment_files"] == 0 and document["sealed_end"] == 0
    assert document["unsealed_bytes"] == document["journal_bytes"] > 0
    assert document["seal_every_bytes"] == 1 << 20
    code, text = info(str(store_dir))
    assert code == 0 and "note:" not in text  # less than twice the threshold
    with DirectoryStore(store_dir, read_only=True, seal_bytes=4096) as reader:
        facts = reader.footprint().to_dict()
    assert facts["unsealed_bytes"] > 2 * 4096


def test_a_postgres_store_is_described_without_its_password(request: pytest.FixtureRequest) -> None:
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    database: str = request.getfixturevalue("pg_database")
    admin(cluster, f"GRANT CREATE ON SCHEMA public TO {PASSWORD_ROLE}", database=database)
    url = cluster.url(database, PASSWORD_ROLE, PASSWORD)
    with PostgresStore(url, clock=TickClock()) as store:
        for number in range(5):
            store.append(f"r{number}", "run.start", payload={"n": number}, meta={"status": "running"})
            store.append(f"r{number}", "run.end", payload={"out": number}, meta={"status": "completed"})
        store.append("open", "run.start", meta={"status": "running"})
    document = info_json(url)
    assert document["backend"] == "postgresql"
    assert (document["runs"], document["open_runs"], document["entries"]) == (6, 1, 11)
    sizes = document["bytes"]
    assert sizes["entries"] > 0 and sizes["runs"] > 0 and sizes["payloads"] > 0
    assert sizes["total"] == sum(size for name, size in sizes.items() if name != "total")
    assert set(document["tables"]) >= {"tracelock_entries", "tracelock_runs", "tracelock_payloads"}
    assert document["tables"]["tracelock_payloads"] == sizes["payloads"]
    code, text = info(url)
    assert code == 0 and "runs: 6 (1 open); entries: 11" in text
    for shown in (json.dumps(document), text):
        assert PASSWORD not in shown
        assert f"{PASSWORD_ROLE}:***@" in shown


def test_a_store_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    code, out = info(str(tmp_path / "nowhere"), "--json")
    assert code == 2
    document = json.loads(out)
    assert document["ok"] is False and str(tmp_path / "nowhere") in document["error"]["message"]
