"""Redaction: recorded before the erase, verified afterwards, field copies, shared payloads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from click.testing import CliRunner
from evidence_helpers import record_support_runs

from tracelock.cli.main import cli
from tracelock.core.entry import ADMIN_RUN, REDACTION_KIND
from tracelock.evidence.redaction import (
    RedactedPayloadError,
    RedactTargetError,
    is_field_marker,
    parse_step,
    redact,
)
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_store


def H(value: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    record_support_runs(path)
    return path


def _llm_effect(store: DirectoryStore, run: str) -> Any:
    entry = store.entries(run)[1]
    assert entry.kind == "effect"
    return entry


def test_whole_redaction_is_recorded_then_erased_and_the_store_still_verifies(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        target = _llm_effect(store, "run-a")
        before = store.size()
        result = redact(store, "run-a", 0, by="dpo@example.com", reason="prompt held a name")
        assert store.payload_state(target.payload) == "redacted"
        record = store.entry_at(before)
        assert (record.run, record.kind, record.meta) == (ADMIN_RUN, REDACTION_KIND, {"payload": target.payload})
        doc = store.get_payload(record.payload)
        assert doc == {
            "v": 1, "payload": target.payload, "run": "run-a", "step": 0, "kind": "effect",
            "fields": None, "copy": None, "by": "dpo@example.com", "reason": "prompt held a name",
        }
        assert result.redactions[0]["redaction_seq"] == before
        report = verify_store(store)
        assert report.ok and report.redacted == 1


def test_a_field_redaction_keeps_a_readable_copy_with_the_hash(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        target = _llm_effect(store, "run-a")
        original = store.get_payload(target.payload)
        result = redact(store, "run-a", 0, fields=["args"], by="dpo", reason="GDPR")
        record = store.entry_at(result.redactions[0]["redaction_seq"])
        copy = store.get_payload(record.payload)["copy"]
        assert is_field_marker(copy["args"]) and copy["args"]["hash"] == H(original["args"])
        assert {k: v for k, v in copy.items() if k != "args"} == {
            k: v for k, v in original.items() if k != "args"
        }


def test_identical_bytes_are_redacted_everywhere_and_the_result_says_so(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        shared = _llm_effect(store, "run-b")
        result = redact(store, "run-a", 0, by="dpo", reason="r")
        assert store.payload_state(shared.payload) == "redacted"
    assert result.shared
    assert {(a["run"], a["i"]) for a in result.affected} == {("run-a", 1), ("run-b", 1)}


def test_an_interrupted_redaction_is_completed_not_recorded_twice(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DirectoryStore(store_dir) as store:
        target = _llm_effect(store, "run-a")

        def crash(digest: str) -> bool:
            raise KeyboardInterrupt

        monkeypatch.setattr(store, "erase_payload", crash)
        with pytest.raises(KeyboardInterrupt):
            redact(store, "run-a", 0, by="dpo", reason="r")
        monkeypatch.undo()
        # Recorded, not yet erased: the store verifies and the bytes are still there.
        assert store.payload_state(target.payload) == "present"
        assert verify_store(store).ok
        size = store.size()
        result = redact(store, "run-a", 0, by="dpo", reason="r")
        assert store.size() == size
        assert result.redactions[0]["completed_earlier_redaction"]
        assert store.payload_state(target.payload) == "redacted"


def test_bad_targets_are_refused(store_dir: Path) -> None:
    with DirectoryStore(store_dir) as store:
        with pytest.raises(RedactTargetError):
            redact(store, "run-a", 99, by="a", reason="b")
        with pytest.raises(RedactTargetError) as caught:
            redact(store, "run-a", 0, fields=["nope"], by="a", reason="b")
        assert "args" in caught.value.details["available"]
        with pytest.raises(RedactTargetError):
            redact(store, "run-a", 0, by=" ", reason="b")
        with pytest.raises(RedactTargetError):
            redact(store, ADMIN_RUN, 0, by="a", reason="b")
        redact(store, "run-a", "end", fields=["output"], by="a", reason="b")
        with pytest.raises(RedactedPayloadError):
            redact(store, "run-a", "end", by="a", reason="b")
        redact(store, "run-a", 1, by="a", reason="b")
        with pytest.raises(RedactedPayloadError):
            redact(store, "run-a", 1, by="a", reason="b")
        assert verify_store(store).ok
    assert parse_step("start") == "start" and parse_step("12") == 12
    with pytest.raises(RedactTargetError):
        parse_step("-1")


def test_intent_and_result_of_one_step(tmp_path: Path) -> None:
    """An irreversible or idempotent step is two entries: --field picks the one that holds
    the member, no field takes both."""
    store_dir = tmp_path / "store"
    record_support_runs(store_dir, ("run-a",))
    with DirectoryStore(store_dir) as store:
        kinds = [(e.kind, store.get_payload(e.payload).get("step")) for e in store.entries("run-a") if e.kind.startswith("effect.")]
        step = kinds[0][1]
        result = redact(store, "run-a", step, fields=["result"], by="a", reason="b")
        assert [r["kind"] for r in result.redactions] == ["effect.result"]
        result = redact(store, "run-a", step, fields=["args"], by="a", reason="b")
        assert [r["kind"] for r in result.redactions] == ["effect.intent"]
        assert verify_store(store).ok


def test_a_redacted_run_can_still_be_loaded_and_retrieved(store_dir: Path) -> None:
    from tracelock.runtime.records import load_run

    with DirectoryStore(store_dir) as store:
        before = load_run(store, "run-a")
        redact(store, "run-a", 0, fields=["args"], by="dpo", reason="r")
        redact(store, "run-a", 1, by="dpo", reason="r")
        after = load_run(store, "run-a")
    # The field redaction is read through its copy: everything but the prompt is there.
    assert is_field_marker(after.effects[0]["args"])
    assert after.effects[0]["result"] == before.effects[0]["result"]
    # The wholly redacted step is simply absent; the run's end is intact.
    assert 1 not in after.effects and after.end == before.end
    assert len(after.redacted) == 2


def test_show_reads_a_shared_field_redaction_through_its_copy(store_dir: Path) -> None:
    """``show`` of another run sharing a field-redacted payload still shows the completed
    step (through the redaction's readable copy), never an unfinished intent."""
    with DirectoryStore(store_dir) as store:
        redact(store, "run-a", 0, by="dpo", reason="r", fields=["args"])
    runner = CliRunner()
    shown = runner.invoke(cli, ["show", "run-b", "--store", str(store_dir), "--payloads", "--json"])
    assert shown.exit_code == 0, shown.output
    step = json.loads(shown.output)["entries"][1]
    assert step["summary"].startswith("step 0 llm") and step["summary"].endswith("SUCCESS")
    assert "intent recorded" not in step["summary"]
    assert is_field_marker(step["payload_value"]["args"])
    assert step["payload_value"]["outcome"] == "SUCCESS"
    with DirectoryStore(store_dir) as store:
        redact(store, "run-b", 1, by="dpo", reason="whole")
    whole = runner.invoke(cli, ["show", "run-b", "--store", str(store_dir)])
    assert whole.exit_code == 0, whole.output
    assert "payload redacted" in whole.output and "intent recorded" not in whole.output
