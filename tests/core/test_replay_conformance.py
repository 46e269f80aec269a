"""The golden replay divergence report (``conformance/replay/``), checked against its
recording with code independent of the runtime (stdlib json), and recomputed by replaying
the recording again."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
VECTORS = sorted((CONFORMANCE / "replay").glob("*.json"))


def _leaf_changes(recorded: Any, requested: Any, path: str = "") -> list[str]:
    """JSON pointers of every leaf that differs (RFC 6901 escaping)."""
    if isinstance(recorded, dict) and isinstance(requested, dict):
        changes = []
        for key in sorted(set(recorded) | set(requested)):
            pointer = f"{path}/{key.replace('~', '~0').replace('/', '~1')}"
            changes.extend(_leaf_changes(recorded.get(key), requested.get(key), pointer))
        return changes
    return [] if recorded == requested else [path]


def _recorded_effect(journal: list[str], run: str, step: int) -> dict[str, Any]:
    payloads = {text[1:65]: json.loads(text[66:]) for text in journal if text.startswith("=")}
    for text in journal:
        if text.startswith("{"):
            entry = json.loads(text)
            if entry["run"] == run and entry["kind"] in ("effect", "effect.intent") and entry["payload"]:
                doc = payloads[entry["payload"]]
                if doc["step"] == step:
                    return dict(doc)
    raise AssertionError(f"no effect of step {step}")


def test_vectors_exist() -> None:
    assert {path.stem for path in VECTORS} >= {"divergence-prompt"}


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_the_report_names_the_first_difference_of_the_recording(path: Path) -> None:
    vector = json.loads(path.read_text())
    recording = json.loads((CONFORMANCE / vector["recording"]).read_text())
    report = vector["report"]
    assert report["run_id"] == recording["run"] and report["matched"] is False
    assert report["recorded_fingerprint"] == recording["fingerprint"] and report["replayed_fingerprint"] is None
    divergence = report["divergence"]
    effect = _recorded_effect(recording["journal"], recording["run"], divergence["step"])
    assert divergence["recorded"] == {"kind": effect["kind"], "name": effect["name"], "args": effect["args"]}
    requested = divergence["requested"]
    assert (requested["kind"], requested["name"]) == (effect["kind"], effect["name"])
    pointers = _leaf_changes({"args": effect["args"]}, {"args": requested["args"]})
    assert [change["path"] for change in divergence["diff"]] == pointers and pointers
    assert divergence["fields"] == sorted({pointer.split("/")[1] for pointer in pointers})
    for change in divergence["diff"]:
        keys = change["path"].split("/")[2:]
        was, now = effect["args"], requested["args"]
        for key in keys:
            was, now = was[key], now[key]
        assert (change["recorded"], change["requested"]) == (was, now)


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_replaying_again_gives_the_same_report(path: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(CONFORMANCE))
    try:
        from fingerprint_cases import replay_case
    finally:
        sys.path.remove(str(CONFORMANCE))
    assert json.loads(json.dumps(replay_case(path.stem, tmp_path / "store"))) == json.loads(path.read_text())["report"]
