from __future__ import annotations

from collections.abc import Iterator

import pytest

from tracelock.examples.llm_server import LLMServer


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as running:
        yield running
