"""Counting how often values are serialized and parsed: a spy on the canonical JSON module's
two workers (every ``dumps`` ends in one of its serializers, every ``loads`` in its decoder),
in every thread. A serialization or a parse counts for a marker when its bytes (its text)
hold the marker: how many times the value carrying that marker went through it."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from tracelock.core import canonical


class Serializations:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, *markers: str) -> None:
        self.markers = markers
        #: Serializations (``dumps``) whose bytes hold each marker.
        self.dumped: collections.Counter[str] = collections.Counter()
        #: Parses (``loads``) whose text holds each marker.
        self.parsed: collections.Counter[str] = collections.Counter()
        fast, exact, decoder = canonical._fast_dumps, canonical._exact_dumps, canonical._DECODER
        spy = self

        def counted(out: bytes | None) -> bytes | None:
            if out is not None:  # None: the fast path declined, the exact path writes it
                spy.dumped.update(marker for marker in markers if marker.encode() in out)
            return out

        class Decoder:
            def decode(self, text: str) -> Any:
                spy.parsed.update(marker for marker in markers if marker in text)
                return decoder.decode(text)

        monkeypatch.setattr(canonical, "_fast_dumps", lambda value: counted(fast(value)))
        monkeypatch.setattr(canonical, "_exact_dumps", lambda value: counted(exact(value)))
        monkeypatch.setattr(canonical, "_DECODER", Decoder())

    def reset(self) -> None:
        self.dumped.clear()
        self.parsed.clear()
