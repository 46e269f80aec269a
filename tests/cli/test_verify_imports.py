"""``tracelock verify BUNDLE`` is offline: in a fresh process it loads no storage module
(no directory store, no PostgreSQL backend, no index...) and no runtime module, whether the
bundle passes or fails. And the command map that loads each command's module when it runs
names every command of every module."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import tracelock.cli.main as cli_main
from tracelock.cli.main import cli
from tracelock.examples import support

REPO = Path(__file__).resolve().parents[2]

#: Runs the ``tracelock`` command (argv after the output file) and writes the names of the
#: modules loaded, at exit, to the output file.
WRAPPER = """
import atexit, json, sys

out = sys.argv[1]

def dump():
    with open(out, "w") as handle:
        json.dump(sorted(sys.modules), handle)

atexit.register(dump)
sys.argv = ["tracelock", *sys.argv[2:]]
from tracelock.cli.main import main
main()
"""


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An exported bundle of one recorded run, and the signer's verifier key."""
    root = tmp_path_factory.mktemp("offline")
    store = root / "store"
    (root / "ticket.json").write_text(json.dumps({"id": "T-1", "text": "The keyboard from order A-1001 arrived broken."}))
    result = invoke(
        "run", "tracelock.examples.support:agent", "--input", root / "ticket.json", "--policy", support.POLICY_FILE,
        "--sandbox", root / "sandbox", "--run-id", "r1", "--store", store,
    )
    assert result.exit_code == 0, result.output
    assert invoke("keys", "generate", "--out", root / "keys", "--name", "example.com/agents").exit_code == 0
    assert invoke("checkpoint", "--key", root / "keys" / "example.com_agents.key", "--store", store).exit_code == 0, (
        sorted(p.name for p in (root / "keys").iterdir())
    )
    assert invoke("export", "r1", "-o", root / "b.zip", "--store", store).exit_code == 0
    assert invoke("export", "r1", "-o", root / "b", "--store", store).exit_code == 0
    return {"root": root, "zip": root / "b.zip", "dir": root / "b", "vkey": root / "keys" / "example.com_agents.vkey"}


def loaded_by(tmp_path: Path, *args: str | Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(out), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO), TRACELOCK_STORE=str(tmp_path / "no-store")),
        check=False,
        timeout=120,
    )
    modules = json.loads(out.read_text())
    assert isinstance(modules, list)
    return done, modules


def forbidden(modules: list[str]) -> list[str]:
    return [name for name in modules if name.startswith(("tracelock.storage", "tracelock.runtime"))]


def test_verify_bundle_loads_no_storage_and_no_runtime(bundle: dict[str, Path], tmp_path: Path) -> None:
    for target in (bundle["zip"], bundle["dir"]):
        done, modules = loaded_by(tmp_path, "verify", target, "--key", bundle["vkey"], "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["ok"] is True
        assert "tracelock.evidence.verify" in modules  # the wrapper saw the verifier run
        assert forbidden(modules) == []
    assert not (tmp_path / "no-store").exists()


def test_a_failing_bundle_loads_no_storage_and_no_runtime_either(bundle: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(bundle["dir"], copy)
    payload = next(p for p in sorted((copy / "payloads").iterdir()) if b"A-1001" in p.read_bytes())
    payload.write_bytes(payload.read_bytes().replace(b"A-1001", b"A-9999"))
    done, modules = loaded_by(tmp_path, "verify", copy, "--key", bundle["vkey"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[payload.hash]" in done.stdout and "RESULT: FAILED" in done.stdout
    assert forbidden(modules) == []


def test_verifying_a_store_does_load_the_store(bundle: dict[str, Path], tmp_path: Path) -> None:
    """The check above can fail: the same wrapper sees the storage modules a store needs."""
    done, modules = loaded_by(tmp_path, "verify", "--store", bundle["root"] / "store")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tracelock.storage.verify" in forbidden(modules)


def test_the_command_map_names_every_command_of_every_module() -> None:
    mapped = cli_main._COMMAND_MODULES
    for module in sorted(set(mapped.values())):
        names = {command.name for command in importlib.import_module(module).COMMANDS}
        assert names == {name for name, where in mapped.items() if where == module}, module
