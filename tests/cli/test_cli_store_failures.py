"""Store files the system refuses give coded errors (exit 2, ``error [CODE]``), never a
traceback, from every command: a journal that is a directory, permission denied on a store
file, a store directory that cannot be read, a read-only store (which ``log``, ``show``,
``verify`` and ``export`` still read, without claiming that another process holds it), a
full disk.

The commands run in a child process as a user the file permissions apply to: as root, the
child gives up the capabilities that bypass them (``CAP_DAC_OVERRIDE``,
``CAP_DAC_READ_SEARCH``, ``CAP_FOWNER``) before it starts, so that a file without read or
write bits refuses it as it would refuse any other user. The read-only mount and the full
disk need root to mount."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracelock.cli.main import cli
from tracelock.examples import support

REPO = Path(__file__).resolve().parents[2]
TICKET = {"id": "T-7", "text": "The keyboard from order A-1001 arrived broken."}
_PR_CAPBSET_DROP = 24
_BYPASSING_CAPABILITIES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
_NEEDS_ROOT = "mounting a file system needs root (as CI runs the suite): run the tests as root"


def _drop_bypass() -> None:
    """In the child, before it executes: no capability that ignores file permissions."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _BYPASSING_CAPABILITIES:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def tracelock(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """Run the CLI with ``--json`` in a child process subject to file permissions; its exit
    status and JSON document (never a traceback)."""
    preexec: Callable[[], None] | None = _drop_bypass if os.geteuid() == 0 else None
    proc = subprocess.run(
        [sys.executable, "-c", "from tracelock.cli.main import main; main()", *map(str, args), "--json"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=preexec,  # the test's process starts no threads that could hold a lock
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def refused(code: str, *args: str | Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    status, document = tracelock(*args, env=env)
    assert (status, document["ok"]) == (2, False), document
    assert document["error"]["code"] == code, document["error"]
    error: dict[str, Any] = document["error"]
    return error


def _invoke(*args: str | Path) -> Any:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store with a run of the support agent, a signed checkpoint covering it, and a
    second run after it (so the Merkle tree files are behind the journal: a reader that may
    not write them proves from a tree it keeps in memory)."""
    root = tmp_path_factory.mktemp("recorded")
    (root / "ticket.json").write_text(json.dumps(TICKET))
    store = root / "store"

    def run(run_id: str) -> None:
        _invoke(
            "run", "tracelock.examples.support:agent", "--input", root / "ticket.json",
            "--policy", support.POLICY_FILE, "--sandbox", root / "sandbox", "--run-id", run_id, "--store", store,
        )

    run("r1")
    keys = _invoke("keys", "generate", "--out", root / "keys", "--name", "example.com/agents", "--json")
    _invoke("checkpoint", "--key", keys["files"]["private_key"], "--store", store)
    run("r2")
    return {"store": store}


def _permissions(path: Path, mode: int) -> None:
    for folder, names, files in os.walk(path):
        for name in [*names, *files]:
            os.chmod(Path(folder) / name, mode | (0o111 if (Path(folder) / name).is_dir() else 0))
    os.chmod(path, mode | 0o111)


@pytest.fixture
def store(recorded: dict[str, Path], tmp_path: Path) -> Iterator[Path]:
    """A copy of the recorded store, its permissions given back afterwards (for clean-up)."""
    copy = tmp_path / "store"
    shutil.copytree(recorded["store"], copy)
    yield copy
    _permissions(copy, 0o644)


def test_a_journal_that_is_a_directory(store: Path) -> None:
    (store / "journal.log").unlink()
    (store / "journal.log").mkdir()
    for command in (("log",), ("show", "r1"), ("verify",), ("recover",)):
        error = refused("STORE_FORMAT", *command, "--store", store)
        assert "journal.log is a directory" in error["message"]


@pytest.mark.parametrize(
    ("name", "commands"),
    [
        ("store.json", [("log",), ("show", "r1"), ("recover",)]),
        ("journal.log", [("log",), ("show", "r1"), ("verify",), ("recover",)]),
        ("journal.synced", [("log",), ("verify",), ("recover",)]),
        ("lock", [("recover",), ("retrieve", "r1")]),
        ("index.sqlite", [("recover",)]),
        ("checkpoints", [("verify",)]),
    ],
)
def test_permission_denied_on_a_store_file(store: Path, name: str, commands: list[tuple[str, ...]]) -> None:
    os.chmod(store / name, 0)
    for command in commands:
        error = refused("STORE_PERMISSION_DENIED", *command, "--store", store)
        assert name in error["message"], error


def test_a_file_only_writers_need_leaves_reading_alone(store: Path) -> None:
    for name in ("lock", "index.sqlite"):
        os.chmod(store / name, 0)
    status, listed = tracelock("log", "--store", store)
    assert status == 0 and sorted(run["run"] for run in listed["runs"]) == ["r1", "r2"]
    status, verified = tracelock("verify", "--store", store)
    assert status == 0 and verified["ok"]
    assert not any("another process" in note for note in verified["notes"]), verified["notes"]


@pytest.mark.parametrize("mode", [0o000, 0o600], ids=["unreadable", "not-searchable"])
def test_a_store_directory_the_user_cannot_read(store: Path, mode: int) -> None:
    os.chmod(store, mode)
    for command in (("log",), ("show", "r1"), ("verify",), ("recover",)):
        refused("STORE_PERMISSION_DENIED", *command, "--store", store)


def _reads_everything(store: Path, out: Path) -> None:
    """``log``, ``show``, ``verify`` and ``export`` on a store this process can only read."""
    status, listed = tracelock("log", "--store", store)
    assert status == 0 and sorted(run["run"] for run in listed["runs"]) == ["r1", "r2"], listed
    status, shown = tracelock("show", "r1", "--store", store)
    assert status == 0 and shown["entries"][-1]["kind"] == "run.end"
    status, verified = tracelock("verify", "--store", store)
    assert status == 0 and verified["ok"] and verified["checkpoint"]["checked"] == [1], verified
    # The index was not compared because this process cannot write it, and it says so.
    assert not any("another process" in note for note in verified["notes"]), verified["notes"]
    assert any("cannot write the store's index" in note or "cannot open the store's lock file" in note for note in verified["notes"]), verified["notes"]
    status, exported = tracelock("export", "r1", "--out", out, "--store", store)
    assert status == 0 and exported["ok"], exported
    assert (out / "manifest.json").is_file()


@pytest.mark.parametrize("lock_file", [True, False], ids=["with-lock-file", "without-lock-file"])
def test_a_store_without_write_permission_is_read_by_the_reading_commands(
    store: Path, tmp_path: Path, lock_file: bool
) -> None:
    if not lock_file:
        (store / "lock").unlink()  # never written here: a reader cannot even take the lock
    _permissions(store, 0o444)
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    _reads_everything(store, out / "bundle")
    refused("STORE_PERMISSION_DENIED", "recover", "--store", store)


@pytest.fixture
def read_only_mount(store: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail(_NEEDS_ROOT)
    subprocess.run(["mount", "--bind", str(store), str(store)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(store)], check=True)
        yield store
    finally:
        subprocess.run(["umount", "--lazy", str(store)], check=True)


def test_a_read_only_file_system_is_read_by_the_reading_commands(read_only_mount: Path, tmp_path: Path) -> None:
    _reads_everything(read_only_mount, tmp_path / "bundle")
    for command in (("recover",), ("retrieve", "r1")):
        error = refused("STORE_READ_ONLY", *command, "--store", read_only_mount)
        assert "read-only" in error["message"]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail(_NEEDS_ROOT)
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def test_a_full_disk(full_disk: Path, tmp_path: Path) -> None:
    (tmp_path / "input.json").write_text(json.dumps({"size": 150_000, "steps": 30}))
    (tmp_path / "policy.yaml").write_text(json.dumps({"version": 1, "tools": [{"name": "pay"}, {"name": "look"}]}))
    store = full_disk / "store"
    env = {"TRACELOCK_LEDGER": str(tmp_path / "ledger.txt")}
    error = refused(
        "STORE_FULL",
        "run", "tests.runtime._disk_full_child:agent", "--input", tmp_path / "input.json",
        "--policy", tmp_path / "policy.yaml", "--run-id", "big", "--store", store,
        env=env,
    )
    assert "device is full" in error["message"] or "device full" in error["message"]
    # Reading still works on the full disk; the run is left unfinished, not failed.
    status, listed = tracelock("log", "--store", store)
    assert status == 0 and [(run["run"], run["status"]) for run in listed["runs"]] == [("big", "running")]
    refused("STORE_FULL", "recover", "--store", store, env=env)
