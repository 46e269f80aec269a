"""Shared helpers of the HTTP capture tests: a policy that allows the loopback server, a
runtime in a temporary store, and the server itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracelock.runtime.records import RunRecord, load_run
from tracelock.runtime.runtime import Runtime

API_KEY = "sk-test-0123456789abcdefSECRET"
ANTHROPIC_KEY = "sk-ant-test-ABCDEF9876543210SECRET"


def policy(**extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "version": 1,
        "llm": {"allow": True, "models": ["gpt-test", "claude-test", "cut"]},
        "http": {"allow": [{"host": "127.0.0.1", "methods": ["POST", "GET"], "paths": ["/v1/**", "/plain/*"]}]},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    return document


class Ticks:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000

    def __call__(self) -> int:
        self.now += 5
        return self.now


class Ids:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"run-{self.count}"


def runtime_at(directory: Path, document: Any = None) -> Runtime:
    return Runtime(directory / "store", document if document is not None else policy(), clock=Ticks(), ids=Ids())


def record_of(runtime: Runtime, run_id: str) -> RunRecord:
    return load_run(runtime.store, run_id)


def store_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted((directory / "store").rglob("*")) if path.is_file())
