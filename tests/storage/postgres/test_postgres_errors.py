"""Bad connection strings, unreachable servers, missing privileges: typed errors that never
hold the password, exit 2 from the CLI; and the driver is imported only when needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from tests.pg_server import LIMITED_ROLE, PASSWORD, PASSWORD_ROLE, Cluster, admin
from tracelock import open_store
from tracelock.cli.main import cli
from tracelock.storage.errors import StoreConnectionError, StorePermissionError
from tracelock.storage.postgres import PostgresStore

WRONG = "wr0ng-Secret!Pw"


def shown(exc: BaseException) -> str:
    error = getattr(exc, "to_dict", lambda: {})()
    return f"{exc} {json.dumps(error)} {exc!r}"


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text
        assert quote(secret, safe="") not in text


def test_a_wrong_password_is_a_connection_error_without_the_password(pg_cluster: Cluster, pg_database: str) -> None:
    url = pg_cluster.url(pg_database, PASSWORD_ROLE, WRONG)
    with pytest.raises(StoreConnectionError) as caught:
        open_store(url)
    assert caught.value.code == "STORE_CONNECTION_FAILED"
    assert "password authentication failed" in caught.value.message
    assert_no_secret(shown(caught.value), WRONG)
    # The same with the password as a parameter of the connection string.
    query_url = f"postgresql://{PASSWORD_ROLE}@/{pg_database}?host={pg_cluster.socket_dir}&password={quote(WRONG, safe='')}"
    with pytest.raises(StoreConnectionError) as caught:
        open_store(query_url)
    assert_no_secret(shown(caught.value), WRONG)


def test_the_right_password_opens_and_the_location_hides_it(pg_cluster: Cluster, pg_database: str) -> None:
    admin(pg_cluster, f"GRANT CREATE ON SCHEMA public TO {PASSWORD_ROLE}", database=pg_database)
    url = pg_cluster.url(pg_database, PASSWORD_ROLE, PASSWORD)
    with PostgresStore(url) as store:
        store.append("r", "run.start")
        assert_no_secret(store.location, PASSWORD)
        assert store.location.startswith(f"postgresql://{PASSWORD_ROLE}:***@/")


def test_an_unreachable_server_is_a_connection_error(tmp_path: Path) -> None:
    url = f"postgresql://someone:{quote(WRONG, safe='')}@/db?host={tmp_path}&connect_timeout=2"
    with pytest.raises(StoreConnectionError) as caught:
        open_store(url)
    assert str(tmp_path) in caught.value.message  # says where it tried
    assert_no_secret(shown(caught.value), WRONG)


def test_a_malformed_connection_string_is_a_connection_error() -> None:
    url = f"postgresql://u:{quote(WRONG, safe='')}@/db?nonsense_option=1"
    with pytest.raises(StoreConnectionError) as caught:
        open_store(url)
    assert "nonsense_option" in caught.value.message
    assert_no_secret(shown(caught.value), WRONG)


def test_missing_privileges_are_a_permission_error(pg_cluster: Cluster, pg_database: str) -> None:
    with pytest.raises(StorePermissionError) as caught:
        open_store(pg_cluster.url(pg_database, LIMITED_ROLE))
    assert caught.value.code == "STORE_PERMISSION_DENIED"
    assert "permission denied" in caught.value.message


def test_the_cli_exits_2_and_its_json_holds_no_password(pg_cluster: Cluster, pg_database: str) -> None:
    url = pg_cluster.url(pg_database, PASSWORD_ROLE, WRONG)
    for args in (["log", "--store", url, "--json"], ["show", "r", "--store", url, "--json"]):
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 2
        document = json.loads(result.stdout)
        assert document["error"]["code"] == "STORE_CONNECTION_FAILED"
        assert_no_secret(result.output, WRONG)
    result = CliRunner(env={"TRACELOCK_STORE": url}).invoke(cli, ["log"], catch_exceptions=False)
    assert result.exit_code == 2
    assert "STORE_CONNECTION_FAILED" in result.output
    assert_no_secret(result.output, WRONG)


def test_the_evidence_commands_exit_2_without_the_password(pg_cluster: Cluster, pg_database: str, tmp_path: Path) -> None:
    made = CliRunner().invoke(cli, ["keys", "generate", "--out", str(tmp_path), "--json"], catch_exceptions=False)
    assert made.exit_code == 0, made.output
    key = next(path for path in tmp_path.iterdir() if path.suffix not in (".pub", ".vkey"))
    url = pg_cluster.url(pg_database, PASSWORD_ROLE, WRONG)
    for args in (
        ["verify"], ["verify", "r"], ["checkpoint", "--key", str(key)], ["prove", "r"],
        ["prove", "--consistency", "1", "2"], ["export", "r", "--out", str(tmp_path / "x")],
        ["redact", "r", "0", "--by", "me", "--reason", "test"], ["demo"],
    ):
        result = CliRunner().invoke(cli, [*args, "--store", url, "--json"], catch_exceptions=False)
        assert result.exit_code == 2, (args, result.output)
        assert json.loads(result.stdout)["error"]["code"] == "STORE_CONNECTION_FAILED", args
        assert_no_secret(result.output, WRONG)
    assert not (tmp_path / "x").exists()


def test_the_driver_is_imported_only_for_a_postgres_store(tmp_path: Path) -> None:
    script = (
        "import sys, tracelock, tracelock.cli.main\n"
        "from tracelock import open_store\n"
        f"open_store({str(tmp_path / 'd')!r}).close()\n"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
