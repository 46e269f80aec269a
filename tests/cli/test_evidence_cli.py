"""``keys``, ``checkpoint``, ``prove``, ``export``, ``redact`` and ``verify BUNDLE`` through
click's CliRunner, on runs of the example support agent recorded with ``tracelock run``."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.main import cli
from tracelock.evidence.keys import PrivateKey
from tracelock.examples import support

TICKET = {"id": "T-7", "text": "The keyboard from order A-1001 arrived broken."}


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def ok_json(*args: str | Path) -> dict:  # type: ignore[type-arg]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store with two recorded runs, a key pair and a first checkpoint."""
    root = tmp_path_factory.mktemp("cli")
    store = root / "store"
    (root / "ticket.json").write_text(json.dumps(TICKET))
    for run_id in ("r1", "r2"):
        result = invoke(
            "run", "tracelock.examples.support:agent", "--input", root / "ticket.json",
            "--policy", support.POLICY_FILE, "--sandbox", root / "sandbox",
            "--run-id", run_id, "--store", store,
        )
        assert result.exit_code == 0, result.output
    generated = ok_json("keys", "generate", "--out", root / "keys", "--name", "example.com/agents")
    checkpoint = ok_json("checkpoint", "--key", generated["files"]["private_key"], "--store", store)
    assert checkpoint["created"] and checkpoint["checkpoint"]["origin"] == "example.com/agents"
    return {
        "root": root,
        "store": store,
        "key": Path(generated["files"]["private_key"]),
        "pub": Path(generated["files"]["public_key"]),
        "vkey": Path(generated["files"]["verifier_key"]),
    }


def test_keys_generate_writes_0600_and_never_prints_the_private_key(tmp_path: Path) -> None:
    for as_json in (False, True):
        out = tmp_path / f"k{as_json}"
        result = invoke("keys", "generate", "--out", out, "--name", "ci", *(["--json"] if as_json else []))
        assert result.exit_code == 0
        key_file = out / "ci.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        pem = key_file.read_text()
        secret = PrivateKey.from_pem(pem.encode())
        body = [line for line in pem.splitlines() if not line.startswith("-----")]
        printed = result.stdout + result.stderr
        assert all(line not in printed for line in body)
        assert secret.seed_bytes().hex() not in printed
        assert "PRIVATE KEY" not in printed
        assert secret.public_key.hex() in printed
        assert (out / "ci.vkey").read_text().startswith("ci+")
    again = invoke("keys", "generate", "--out", tmp_path / "kFalse", "--name", "ci")
    assert again.exit_code == 2 and "EVIDENCE_KEY_EXISTS" in again.stderr
    assert invoke("keys", "generate", "--name", "has space", "--out", tmp_path).exit_code == 2


def test_keys_show_reads_private_public_and_verifier_files(world: dict[str, Path]) -> None:
    shown = [ok_json("keys", "show", world[kind])["key"] for kind in ("key", "pub", "vkey")]
    assert shown[0] == shown[1] == shown[2]
    assert shown[0]["name"] == "example.com/agents"
    assert shown[0]["vkey"] == world["vkey"].read_text().strip()
    private = invoke("keys", "show", world["key"])
    assert "PRIVATE KEY" not in private.stdout and shown[0]["key_id"] in private.stdout
    other = ok_json("keys", "show", world["pub"], "--name", "other")["key"]
    assert other["key_id"] != shown[0]["key_id"]


def test_checkpoint_prove_export_verify(world: dict[str, Path]) -> None:
    store, root = world["store"], world["root"]
    again = ok_json("checkpoint", "--key", world["key"], "--store", store)
    assert not again["created"]
    proofs = ok_json("prove", "r1", "--store", store)
    assert proofs["ok"] and len(proofs["proofs"]) == 8 and all(p["verified"] for p in proofs["proofs"])
    text = invoke("prove", "r1", "--store", store)
    assert text.exit_code == 0 and "8 inclusion proofs" in text.stdout
    for name in ("b", "b.zip", "b.tar"):
        exported = ok_json("export", "r1", "r2", "-o", root / name, "--store", store)
        assert exported["entries"] == 18 and exported["kind"] == ("dir" if name == "b" else name[2:])
        verified = ok_json("verify", root / name, "--key", world["vkey"])
        assert verified["ok"] and verified["integrity"]["ok"] and verified["trust"]["ok"]
        assert [r["fingerprint_status"] for r in verified["runs"]] == ["match", "match"]
    result = invoke("verify", root / "b.zip", "--key", world["pub"])
    assert result.exit_code == 0 and "RESULT: OK" in result.stdout
    assert "integrity: OK" in result.stdout and "trust: OK" in result.stdout
    result = invoke("verify", root / "b", "--key", world["vkey"], "--replay", "tracelock.examples.support:agent")
    assert result.exit_code == 0, result.output
    assert "replay r1: matched" in result.stdout


def test_verify_never_needs_the_store(world: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    shutil.copytree(world["store"], store)
    assert invoke("export", "r2", "-o", tmp_path / "only.zip", "--store", store).exit_code == 0
    shutil.rmtree(store)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACELOCK_STORE", str(tmp_path / "does-not-exist"))
    result = invoke("verify", "only.zip", "--key", world["vkey"], "--run", "r2")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "does-not-exist").exists()


def test_verify_exit_codes(world: dict[str, Path], tmp_path: Path) -> None:
    store = world["store"]
    bundle = tmp_path / "b"
    assert invoke("export", "r1", "-o", bundle, "--store", store).exit_code == 0
    # 2: usage -- no pinned key, a private key, a small-order key, a missing bundle.
    for args in (
        [bundle],
        [bundle, "--key", world["key"]],
        [bundle, "--key", (1).to_bytes(32, "little").hex()],
        [tmp_path / "missing.zip", "--key", world["vkey"]],
    ):
        result = invoke("verify", *args)
        assert result.exit_code == 2, (args, result.output)
    small = invoke("verify", bundle, "--key", (1).to_bytes(32, "little").hex(), "--json")
    assert json.loads(small.stdout)["error"]["code"] == "EVIDENCE_KEY_SMALL_ORDER"
    # 1: a check failed -- another key (trust), a tampered payload (integrity).
    other = tmp_path / "other.pub"
    other.write_text(PrivateKey.from_seed(bytes(32)).public_key.hex())
    result = invoke("verify", bundle, "--key", other, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["integrity"]["ok"] and not report["trust"]["ok"]
    assert report["checks_failed"] == ["checkpoint.trust"]
    payload = next(p for p in sorted((bundle / "payloads").iterdir()) if b"A-1001" in p.read_bytes())
    payload.write_bytes(payload.read_bytes().replace(b"A-1001", b"A-9999"))
    result = invoke("verify", bundle, "--key", world["vkey"])
    assert result.exit_code == 1
    assert "[payload.hash]" in result.stdout and "[manifest.hash]" in result.stdout
    assert f"payloads/{payload.name}" in result.stdout and "trust: OK" in result.stdout


def test_verify_still_verifies_runs_and_the_store(world: dict[str, Path]) -> None:
    store = world["store"]
    assert ok_json("verify", "r1", "--store", store)["scope"] == "run r1"
    assert ok_json("verify", "--store", store)["scope"] == "store"
    result = invoke("verify", "no-such-bundle.zip", "--key", "abc", "--store", store)
    assert result.exit_code == 2 and "no bundle at" in result.stderr


def test_redact_then_export_and_verify(world: dict[str, Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(world["store"], store)
    result = invoke("redact", "r1", "0", "--field", "args", "--by", "dpo@example.com", "--reason", "GDPR art. 17", "--store", store)
    assert result.exit_code == 0, result.output
    assert "run r2 entry 1" in result.stdout and "redacted there too" in result.stdout
    again = invoke("redact", "r1", "0", "--field", "args", "--by", "x", "--reason", "y", "--store", store, "--json")
    assert again.exit_code == 2 and json.loads(again.stdout)["error"]["code"] == "EVIDENCE_REDACT_ALREADY"
    stale = invoke("export", "r1", "-o", tmp_path / "b", "--store", store)
    assert stale.exit_code == 2 and "EVIDENCE_CHECKPOINT_STALE" in stale.stderr
    exported = ok_json("export", "r1", "r2", "-o", tmp_path / "b", "--key", world["key"], "--store", store)
    assert exported["signed_checkpoint"] and len(exported["redacted"]) == 1
    result = invoke("verify", tmp_path / "b", "--key", world["vkey"])
    assert result.exit_code == 0, result.output
    assert "redacted: entry 1 (effect)" in result.stdout and "GDPR art. 17" in result.stdout
    consistency = ok_json("prove", "--consistency", "1", "2", "--store", store)
    assert consistency["ok"] and consistency["proof"]
    assert ok_json("verify", "--store", store)["redacted"] == 1


def test_prove_reports_entries_after_the_checkpoint(world: dict[str, Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(world["store"], store)
    ticket = world["root"] / "ticket.json"
    result = invoke(
        "run", "tracelock.examples.support:agent", "--input", ticket, "--policy", support.POLICY_FILE,
        "--sandbox", tmp_path / "sb", "--run-id", "r3", "--store", store,
    )
    assert result.exit_code == 0
    result = invoke("prove", "r3", "--store", store, "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["uncovered"]
    assert invoke("prove", "--store", store).exit_code == 2
    env_key = {"TRACELOCK_KEY": str(world["key"])}
    runner = CliRunner(env=env_key)
    signed = runner.invoke(cli, ["checkpoint", "--store", str(store), "--json"], catch_exceptions=False)
    assert signed.exit_code == 0 and json.loads(signed.stdout)["checkpoint"]["number"] == 2
    assert ok_json("prove", "r3", "--store", store)["ok"]
    assert os.environ.get("TRACELOCK_KEY") is None
