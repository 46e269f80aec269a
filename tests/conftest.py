"""Shared fixtures. Vectors come from ../shared/vectors beside the repository; their absence
is a failure, never a skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VECTORS = REPO.parent / "shared" / "vectors"


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    if not VECTORS.is_dir():
        pytest.fail(f"conformance vectors not found at {VECTORS} (expected ../shared/vectors)")
    return VECTORS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TRACELOCK_SLOW") == "1":
        return
    deselected = [item for item in items if item.get_closest_marker("slow")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(autouse=True)
def _strict_mode_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict mode is on in tests: agent code that reaches for nondeterminism fails loudly.
    Tests about nondeterminism itself pass ``strict=False`` explicitly."""
    from tracelock.runtime.runs import engine as runtime

    monkeypatch.setattr(runtime, "STRICT_BY_DEFAULT", True)
