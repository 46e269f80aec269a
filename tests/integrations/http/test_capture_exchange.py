"""The recorded form of a response does not depend on how the network cut its bytes, and a
compressed body is recorded decoded."""

from __future__ import annotations

import gzip
import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tracelock.integrations.http.exchange import Options, body_of, chunks_of, error_doc, make_result

EVENTS = [
    'data: {"choices": [{"delta": {"content": "h\u00e9llo "}}], "model": "m"}\n\n',
    'data: {"choices": [{"delta": {"content": "w\u00f6rld"}}], "model": "m"}\n\n',
    'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n',
    "data: [DONE]\n\n",
]
STREAM = "".join(EVENTS).encode()
SSE = [("content-type", "text/event-stream")]


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted(set(points)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def read(pairs: list[tuple[str, str]], pieces: list[bytes], api: str | None = "openai.chat.completions") -> dict[str, Any]:
    return make_result(200, pairs, iter(pieces), Options(), api, error_doc)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_a_stream_is_recorded_event_by_event_however_the_bytes_arrive(points: list[int]) -> None:
    result = read(SSE, cut(STREAM, points))
    assert result["chunks"] == EVENTS  # multi-byte characters split across reads included
    assert result["complete"] is True
    assert result["llm"] == {"content": "h\u00e9llo w\u00f6rld", "usage": {"prompt_tokens": 3, "completion_tokens": 2}, "model": "m"}
    assert b"".join(chunks_of(result) or []) == STREAM


def test_a_gzip_body_is_recorded_decoded() -> None:
    body = {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    packed = gzip.compress(json.dumps(body).encode())
    result = read([("content-type", "application/json"), ("content-encoding", "gzip")], cut(packed, [5, 9]))
    assert result["body"] == body and "content-encoding" not in result["headers"]
    assert json.loads(body_of(result)) == body
    assert result["llm"]["content"] == "hi"


def test_a_body_that_is_not_json_is_content_addressed() -> None:
    result = read([("content-type", "text/plain")], [b"plain ", b"text"], api=None)
    assert result["body_bytes"]["size"] == 10
    assert body_of(result) == b"plain text"
    assert "llm" not in result


def test_a_broken_stream_keeps_its_chunks_and_says_why() -> None:
    class Dropped(Exception):
        pass

    def pieces() -> Any:
        yield STREAM[:40]
        raise Dropped("peer closed")

    result = make_result(200, SSE, pieces(), Options(), None, error_doc)
    assert result["complete"] is False
    assert result["error"] == {"code": "HTTP_TRANSPORT_ERROR", "exception": "Dropped", "message": "Dropped: peer closed"}
    assert "".join(result["chunks"]) == STREAM[:40].decode()
