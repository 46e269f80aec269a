"""Golden step-rule vectors (``conformance/steps/``, docs/spec.md 3.9), judged by code of its
own written from the spec (stdlib json and hashlib), and by the reference verifiers on a store
holding each journal; every golden fingerprint journal (runs the runtime wrote, a gather's
members out of order among them) passes both."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tracelock.storage.directory import DirectoryStore
from tracelock.storage.verify import verify_run, verify_store

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
VECTORS = sorted((CONFORMANCE / "steps").glob("*.json"))
FINGERPRINT_VECTORS = sorted((CONFORMANCE / "fingerprint").glob("*.json"))
CODE = "JOURNAL_STEP_SEQUENCE_BROKEN"


def _entries(journal: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The journal's entries, each checked against its run's chain (section 3.2), and its
    payload documents by hash (each checked against its hash; erased ones left out)."""
    payloads: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    heads: dict[str, tuple[int, str]] = {}
    for text in journal:
        if text.startswith("="):
            digest, data = text[1:65], text[66:].encode("utf-8")
            assert hashlib.sha256(data).hexdigest() == digest
            payloads[digest] = json.loads(data)
        elif text.startswith("{"):
            entry = json.loads(text)
            assert entry["seq"] == len(entries)
            head = heads.get(entry["run"])
            assert (entry["i"], entry["prev"]) == ((0, None) if head is None else (head[0] + 1, head[1]))
            heads[entry["run"]] = (entry["i"], hashlib.sha256(text.encode("utf-8")).hexdigest())
            entries.append(entry)
    return entries, payloads


def judge(journal: list[str]) -> dict[str, Any] | None:
    """The step rule of docs/spec.md 3.9, as the spec states it: the first entry that breaks
    it, with the rule it breaks; None when every run keeps it."""
    entries, payloads = _entries(journal)
    runs: dict[str, dict[str, Any]] = {}
    for entry in entries:
        meta = entry.get("meta") or {}
        if entry["i"] == 0 and entry["kind"] == "run.start" and isinstance(meta.get("agent"), str):
            runs[entry["run"]] = {"steps": {}, "unseen": False}
            continue
        state = runs.get(entry["run"])
        if state is None:
            continue
        verdict = {"seq": entry["seq"], "i": entry["i"], "kind": entry["kind"]}
        if entry["kind"] in ("effect", "effect.intent", "effect.result"):
            doc = payloads.get(entry["payload"])
            step = doc.get("step") if isinstance(doc, dict) else None
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                state["unseen"] = True
                continue
            seen = state["steps"].get(step)  # the kinds that recorded it, in order
            if entry["kind"] == "effect.result":
                if seen is None:
                    if not state["unseen"]:
                        return verdict | {"rule": "result-without-intent"}
                    continue
                if seen != ["effect.intent"]:
                    return verdict | {"rule": "recorded-twice"}
                seen.append("effect.result")
            elif seen is not None:
                return verdict | {"rule": "recorded-twice"}
            else:
                state["steps"][step] = [entry["kind"]]
        elif entry["kind"] == "run.end":
            del runs[entry["run"]]
            numbers = sorted(state["steps"])
            if meta.get("status") != "aborted" and not state["unseen"] and numbers != list(range(len(numbers))):
                return verdict | {"rule": "step-skipped"}
    return None


def store_of(journal: list[str], directory: Path) -> DirectoryStore:
    """A directory store whose journal is ``journal`` (its index and synced mark rebuilt)."""
    DirectoryStore(directory).close()
    for name in ("index.sqlite", "journal.synced"):
        (directory / name).unlink(missing_ok=True)
    (directory / "journal.log").write_bytes("".join(line + "\n" for line in journal).encode("utf-8"))
    return DirectoryStore(directory, read_only=True)


def test_vectors_exist() -> None:
    assert {path.stem for path in VECTORS} == {"duplicated-step", "skipped-step", "result-without-intent"}


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_the_verdict_follows_from_the_spec(path: Path) -> None:
    vector = json.loads(path.read_text())
    verdict = vector["verdict"]
    assert verdict["code"] == CODE
    assert judge(vector["journal"]) == {key: verdict[key] for key in ("seq", "i", "kind", "rule")}


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_the_reference_verifiers_refuse_the_run_where_the_vector_says(path: Path, tmp_path: Path) -> None:
    vector = json.loads(path.read_text())
    with store_of(vector["journal"], tmp_path / "store") as store:
        for report in (verify_store(store), verify_run(store, vector["run"])):
            assert report.issue is not None, report.to_dict()
            assert (report.issue.code, report.issue.seq, report.issue.run) == (CODE, vector["verdict"]["seq"], vector["run"])
        assert verify_store(store, steps=False).ok  # the chain itself is intact


@pytest.mark.parametrize("path", FINGERPRINT_VECTORS, ids=lambda p: p.stem)
def test_the_runs_the_runtime_wrote_keep_the_rule(path: Path, tmp_path: Path) -> None:
    vector = json.loads(path.read_text())
    assert judge(vector["journal"]) is None
    with store_of(vector["journal"], tmp_path / "store") as store:
        assert verify_store(store).ok
        # verify_run looks payloads up through the index, and an index rebuilt from a journal
        # has no row for an erased record (it reports the redacted payload missing, with or
        # without the step rule): judged here on the journals without one.
        if not any(line.startswith("-") for line in vector["journal"]):
            assert verify_run(store, vector["run"]).ok


def test_generating_the_vectors_again_gives_the_same_bytes() -> None:
    sys.path.insert(0, str(CONFORMANCE))
    try:
        from generate_steps import all_files
    finally:
        sys.path.remove(str(CONFORMANCE))
    files: dict[str, bytes] = all_files()
    assert sorted(files) == sorted(f"steps/{path.name}" for path in VECTORS)
    for name, content in files.items():
        assert (CONFORMANCE / name).read_bytes() == content, f"{name} is out of date: run conformance/generate_steps.py"
