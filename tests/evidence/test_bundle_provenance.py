"""Provenance in evidence bundles (issue 25, items 1 and 2): the ``run.start`` payload a
bundle carries says which engine, environment, modules and tool definitions produced the
run; ``verify BUNDLE --replay`` reports what differs now, and fails on another engine or
environment only under ``--strict-environment``."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tracelock.cli.main import cli
from tracelock.core.canonical import loads
from tracelock.examples import support
from tracelock.runtime.provenance.identity import (
    current_engine,
    distributions_digest,
    engine_identity,
)
from tracelock.runtime.provenance.record import Provenance
from tracelock.runtime.runtime import Runtime

TICKET = {"id": "T-9", "text": "The keyboard from order A-1001 arrived broken."}
OLD_ENGINE = engine_identity(
    tracelock="0.0.1", python="3.10.0", implementation="cpython", platform="linux-x86_64",
    distributions=distributions_digest([("tracelock", "0.0.1")]),
)


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def ok_json(*args: str | Path) -> dict:  # type: ignore[type-arg]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A bundle of two runs of the support agent: ``now`` recorded by this engine, ``old``
    recorded under an older engine (simulated by its version strings)."""
    root = tmp_path_factory.mktemp("prov")
    store = root / "store"
    (root / "ticket.json").write_text(json.dumps(TICKET))
    result = invoke(
        "run", "tracelock.examples.support:agent", "--input", root / "ticket.json",
        "--policy", support.POLICY_FILE, "--sandbox", root / "sandbox", "--run-id", "now", "--store", store,
    )
    assert result.exit_code == 0, result.output
    with Runtime(
        store, support.POLICY_FILE, toolkits=(support.support,), sandbox=root / "sandbox-old",
        ids=lambda: "old", provenance=Provenance(OLD_ENGINE),
    ) as runtime:
        assert runtime.run(support.agent, TICKET).ok
    keys = ok_json("keys", "generate", "--out", root / "keys", "--name", "example.com/agents")
    ok_json("checkpoint", "--key", keys["files"]["private_key"], "--store", store)
    ok_json("export", "now", "old", "-o", root / "b.zip", "--store", store)
    return {"bundle": root / "b.zip", "vkey": Path(keys["files"]["verifier_key"])}


def _start_payloads(path: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    """Each run's start document, its ``provenance`` hash replaced by the document of the
    bundle's ``provenance.register`` entry with that payload (docs/spec.md 3.6, 8.2)."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    payloads = {name[len("payloads/"):-len(".json")]: data for name, data in files.items() if name.startswith("payloads/")}
    entries = [loads(line) for line in files["entries.jsonl"].splitlines()]
    registered = {e["payload"] for e in entries if e["run"] == "tracelock:admin" and e["kind"] == "provenance.register"}
    starts = {}
    for entry in entries:
        if entry["kind"] == "run.start":
            start = loads(payloads[entry["payload"]])
            digest = start["provenance"]
            assert digest in registered and hashlib.sha256(payloads[digest]).hexdigest() == digest
            starts[entry["run"]] = {**start, "provenance": loads(payloads[digest])}
    return starts


def test_a_bundle_proves_what_produced_each_run(bundle: dict[str, Path]) -> None:
    starts = _start_payloads(bundle["bundle"])
    assert starts["now"]["provenance"]["engine"] == current_engine()
    assert starts["old"]["provenance"]["engine"] == OLD_ENGINE
    for start in starts.values():
        provenance = start["provenance"]
        assert set(provenance) == {"engine", "code", "tools"}
        assert set(support.support.tools) <= set(provenance["tools"])  # and the sandbox's fs tools
        assert provenance["tools"] == starts["now"]["provenance"]["tools"]  # same definitions in both
        assert len(provenance["code"]["digest"]) == 64
    verified = ok_json("verify", bundle["bundle"], "--key", bundle["vkey"])
    assert verified["ok"] and [r["fingerprint_status"] for r in verified["runs"]] == ["match", "match"]


def test_verify_replay_reports_the_environment(bundle: dict[str, Path]) -> None:
    agent = "tracelock.examples.support:agent"
    text = invoke("verify", bundle["bundle"], "--key", bundle["vkey"], "--replay", agent)
    assert text.exit_code == 0, text.output
    assert "replay old: matched" in text.stdout and "recorded under 0.0.1" in text.stdout
    strict = invoke("verify", bundle["bundle"], "--key", bundle["vkey"], "--replay", agent, "--strict-environment", "--json")
    assert strict.exit_code == 1
    document = json.loads(strict.stdout)
    failures = document["replay"]["failures"]
    assert [(f["check"], f["run"]) for f in failures] == [("replay.environment", "old")]
    assert all(run["matched"] for run in document["replay"]["runs"])
