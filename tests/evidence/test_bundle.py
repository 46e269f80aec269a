"""Exporting evidence bundles and verifying them offline."""

from __future__ import annotations

import io
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from evidence_helpers import (
    ORIGIN,
    build_store,
    evil_key,
    log_key,
    pinned,
    record_support_runs,
    verify_files,
)

from tracelock.evidence.bundle import (
    BundleExistsError,
    BundleFormatError,
    CheckpointStaleError,
    ExportRunOpenError,
    collect_bundle,
    export_bundle,
    read_bundle_files,
)
from tracelock.evidence.bundle_replay import replay_bundle
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.evidence.redaction import redact
from tracelock.evidence.verify import BundleInvalidError, BundleUntrustedError, verify_bundle
from tracelock.examples import support
from tracelock.storage.directory import DirectoryStore


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "store"
    build_store(path)
    return path


def _export(store_dir: Path, out: Path, runs: tuple[str, ...] = ("run-a", "run-b"), **kwargs: object) -> None:
    with DirectoryStore(store_dir, read_only=True) as store:
        export_bundle(store, runs, out, **kwargs)  # type: ignore[arg-type]


def test_directory_zip_and_tar_hold_the_same_files_and_verify(store_dir: Path, tmp_path: Path) -> None:
    for name in ("b", "b.zip", "b.tar"):
        _export(store_dir, tmp_path / name)
    contents = [read_bundle_files(tmp_path / name) for name in ("b", "b.zip", "b.tar")]
    assert [c.kind for c in contents] == ["dir", "zip", "tar"]
    assert contents[0].files == contents[1].files == contents[2].files
    assert all(not c.problems for c in contents)
    for name in ("b", "b.zip", "b.tar"):
        report = verify_bundle(tmp_path / name, pinned())
        assert report.ok, (name, [f.to_dict() for f in report.failures])


def test_the_bytes_are_deterministic(store_dir: Path, tmp_path: Path) -> None:
    for round_ in ("1", "2"):
        for name in ("b", "b.zip", "b.tar"):
            _export(store_dir, tmp_path / round_ / name)
    for name in ("b.zip", "b.tar"):
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes()
    first = sorted(p.relative_to(tmp_path / "1" / "b") for p in (tmp_path / "1" / "b").rglob("*"))
    assert first == sorted(p.relative_to(tmp_path / "2" / "b") for p in (tmp_path / "2" / "b").rglob("*"))
    for rel in first:
        a, b = tmp_path / "1" / "b" / rel, tmp_path / "2" / "b" / rel
        if a.is_file():
            assert a.read_bytes() == b.read_bytes()
            assert stat.S_IMODE(a.stat().st_mode) & 0o022 == 0
    with zipfile.ZipFile(tmp_path / "1" / "b.zip") as archive:
        infos = archive.infolist()
        assert [i.filename for i in infos] == sorted(i.filename for i in infos)
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.compress_type == zipfile.ZIP_STORED
            assert info.external_attr >> 16 == 0o100644
    with tarfile.open(tmp_path / "1" / "b.tar") as archive:
        for member in archive.getmembers():
            assert (member.mtime, member.uid, member.gid, member.mode) == (0, 0, 0, 0o644)
            assert member.uname == member.gname == "" and member.isreg()


def test_verification_never_needs_the_store(store_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store_dir, copy)
    _export(copy, tmp_path / "b.zip")
    shutil.rmtree(copy)
    report = verify_bundle(tmp_path / "b.zip", pinned())
    assert report.ok
    report.raise_for_failure()


def test_a_bundle_signed_by_another_key_fails_trust_but_passes_integrity(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    record_support_runs(store_dir)
    with DirectoryStore(store_dir, read_only=True) as store:
        export_bundle(store, ["run-a"], tmp_path / "b", key=SigningKey(evil_key(), ORIGIN))
    report = verify_bundle(tmp_path / "b", pinned())
    assert report.integrity_ok and not report.trust_ok and not report.ok
    assert report.checks_failed() == ["checkpoint.trust"]
    with pytest.raises(BundleUntrustedError):
        report.raise_for_failure()
    assert verify_bundle(tmp_path / "b", pinned(evil_key())).ok
    # A pinned key is pinned with its name when it comes as a verifier key string: the same
    # key under another name does not vouch for this log.
    assert not verify_bundle(tmp_path / "b", pinned(evil_key(), "example.org/other")).trust_ok
    # The expected origin can be pinned too.
    report = verify_bundle(tmp_path / "b", pinned(evil_key(), None), origin="example.org/other")
    assert report.checks_failed() == ["checkpoint.origin"]


def test_export_needs_a_covering_checkpoint(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    record_support_runs(store_dir, ("run-a",))
    with DirectoryStore(store_dir) as store:
        CheckpointHistory(store_dir).sign(store, SigningKey(log_key(), ORIGIN))
    record_support_runs_more(store_dir)
    with DirectoryStore(store_dir, read_only=True) as store:
        export_bundle(store, ["run-a"], tmp_path / "old-run-ok")
        with pytest.raises(CheckpointStaleError):
            export_bundle(store, ["run-c"], tmp_path / "new-run")
        result = export_bundle(
            store, ["run-c"], tmp_path / "new-run", key=SigningKey(log_key(), ORIGIN)
        )
    assert result.signed_checkpoint and result.checkpoint.number == 2
    assert verify_bundle(tmp_path / "new-run", pinned()).ok
    assert verify_bundle(tmp_path / "old-run-ok", pinned(), required_runs=["run-a"]).ok
    report = verify_bundle(tmp_path / "old-run-ok", pinned(), required_runs=["run-c"])
    assert report.checks_failed() == ["run.missing"]


def record_support_runs_more(store_dir: Path) -> None:
    from evidence_helpers import TICKET, FixedClock

    from tracelock.runtime.runtime import Runtime

    clock = FixedClock()
    clock.now += 10_000
    with DirectoryStore(store_dir, clock=clock) as store, Runtime(
        store, support.POLICY_FILE, toolkits=(support.support,),
        sandbox=store_dir.parent / "more-sandbox", clock=clock, ids=lambda: "run-c",
    ) as runtime:
        runtime.run(support.agent, TICKET)


def test_export_refuses_open_runs_and_existing_outputs(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir) as store:
        store.append("run-open", "run.start", payload={"agent": "a", "input": None, "policy": None}, meta={"status": "running"})
        history = CheckpointHistory(store_dir)
        history.sign(store, SigningKey(log_key(), ORIGIN))
        with pytest.raises(ExportRunOpenError):
            collect_bundle(store, ["run-open"], history.get())
        export_bundle(store, ["run-open"], tmp_path / "open", allow_open=True)
        with pytest.raises(BundleExistsError):
            export_bundle(store, ["run-open"], tmp_path / "open", allow_open=True)
        with pytest.raises(BundleFormatError):
            export_bundle(store, ["run-open"], tmp_path / "open.tar.gz", allow_open=True)
    report = verify_bundle(tmp_path / "open", pinned())
    assert report.checks_failed() == ["run.open"]
    report = verify_bundle(tmp_path / "open", pinned(), allow_open=True)
    assert report.ok and report.runs[0].fingerprint_status == "not_ended"
    with pytest.raises(BundleFormatError):
        read_bundle_files(tmp_path / "nowhere")


def test_a_lying_operator_is_caught_by_the_fingerprint(tmp_path: Path) -> None:
    """Entries signed by the pinned key, but a run.end whose fingerprint is not the one its
    entries give: integrity fails on the fingerprint alone."""
    store_dir = tmp_path / "store"
    with DirectoryStore(store_dir) as store:
        store.append("run-x", "run.start", payload={"agent": "a", "input": 1, "policy": None, "seed": "s", "parent": None})
        store.append(
            "run-x", "effect",
            payload={"step": 0, "kind": "random", "name": "random", "class": "read_only", "args": None,
                     "result": 0.5, "outcome": "SUCCESS", "code": None, "phase": None, "error": None,
                     "attempts": 1, "timeout_ms": None},
        )
        store.append("run-x", "run.end", payload={"outcome": "SUCCESS", "code": None, "output": 2, "fingerprint": "0" * 64, "error": None}, meta={"status": "completed"})
        export_bundle(store, ["run-x"], tmp_path / "b", key=SigningKey(log_key(), ORIGIN))
    report = verify_bundle(tmp_path / "b", pinned())
    assert report.checks_failed() == ["fingerprint.mismatch"]
    assert report.runs[0].recomputed and report.runs[0].recomputed != "0" * 64
    with pytest.raises(BundleInvalidError):
        report.raise_for_failure()


def test_field_and_whole_redactions_are_reported_not_missing(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    record_support_runs(store_dir)
    with DirectoryStore(store_dir) as store:
        redact(store, "run-a", "start", fields=["input"], by="dpo", reason="personal data")
        redact(store, "run-b", 1, by="dpo", reason="whole effect")
        export_bundle(store, ["run-a", "run-b"], tmp_path / "b.zip", key=SigningKey(log_key(), ORIGIN))
    report = verify_bundle(tmp_path / "b.zip", pinned())
    assert report.ok, [f.to_dict() for f in report.failures]
    runs = {run.run: run for run in report.runs}
    # Each run has its own seed, so its own start payload: redacting run-a's input leaves run-b's.
    assert runs["run-a"].fingerprint_status == "match"
    assert [r["kind"] for r in runs["run-a"].redacted] == ["run.start"]
    assert runs["run-a"].redacted[0]["fields"] == ["input"] and runs["run-a"].redacted[0]["by"] == "dpo"
    assert runs["run-b"].fingerprint_status == "redacted"
    assert "entry 2 (effect) is redacted" in str(runs["run-b"].fingerprint_detail)
    assert {r["kind"] for r in runs["run-b"].redacted} == {"effect"}
    assert report.redacted == 2
    files = read_bundle_files(tmp_path / "b.zip").files
    whole = next(r for r in runs["run-b"].redacted if r["kind"] == "effect")
    assert f"payloads/{whole['payload']}.json" not in files
    assert whole["fields"] is None and whole["reason"] == "whole effect"


def test_replay_from_a_bundle(store_dir: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "store"
    record_support_runs(fresh)
    with DirectoryStore(fresh) as store:
        export_bundle(store, ["run-a", "run-b"], tmp_path / "b", key=SigningKey(log_key(), ORIGIN))
    results = replay_bundle(read_bundle_files(tmp_path / "b"), support.agent, toolkits=[support.support])
    assert [r["matched"] for r in results] == [True, True]
    assert all(r["recorded_fingerprint"] == r["replayed_fingerprint"] for r in results)
    # With the LLM prompt redacted, the replay cannot compare step 0, and says why.
    _export(store_dir, tmp_path / "redacted")
    results = replay_bundle(read_bundle_files(tmp_path / "redacted"), support.agent, toolkits=[support.support])
    assert not results[0]["matched"] and "redacted" in results[0]["error"]


def test_verify_files_in_memory_and_report_shape(store_dir: Path) -> None:
    from evidence_helpers import bundle_files

    report = verify_files(bundle_files(store_dir))
    document = report.to_dict()
    assert document["ok"] and document["integrity"]["ok"] and document["trust"]["ok"]
    assert document["trust"]["trusted_by"][0]["name"] == ORIGIN
    assert document["checkpoint"]["size"] == 19
    assert {run["run"] for run in document["runs"]} == {"run-a", "run-b"}
    assert io.BytesIO  # the module imports are used above
