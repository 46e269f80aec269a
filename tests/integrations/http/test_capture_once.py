"""A captured exchange flows once: the request's body is parsed once and serialized once
(in the step's arguments), the response's body is parsed once and serialized once (the
bytes the record is written around and the caller reads), and the request is matched to
the policy's ``http.allow`` rules once. One transport class serves both libraries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest

from tests.integrations.capture_helpers import API_KEY, record_of, runtime_at
from tests.serialization_spy import Serializations
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import (
    AsyncHttpx2Transport,
    AsyncHttpxTransport,
    CaptureTransport,
    Httpx2Transport,
    HttpxTransport,
    capture,
)
from tracelock.runtime.policy.policy import Policy

REQUEST = "request-marker-3e9a"
RESPONSE = "chatcmpl-1"  # the loopback server's completion id: only in its answers


def _ask(server: LLMServer, *, stream: bool) -> Any:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, http_client=capture(openai.DefaultHttpx2Client()))

    def agent(ctx: Any, input: Any) -> Any:
        messages = [{"role": "system", "content": REQUEST}, {"role": "user", "content": "hello"}]
        if stream:
            return "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(model="gpt-test", max_tokens=50, messages=messages, stream=True)
                if chunk.choices
            )
        return client.chat.completions.create(model="gpt-test", max_tokens=50, messages=messages).choices[0].message.content

    return agent


@pytest.mark.parametrize("stream", [False, True])
def test_a_captured_llm_call_parses_and_serializes_each_body_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: LLMServer, stream: bool
) -> None:
    runtime = runtime_at(tmp_path)
    agent = _ask(server, stream=stream)
    assert runtime.run(agent, None).output.startswith("echo: hello")  # once per process: warm
    spy = Serializations(monkeypatch, REQUEST, RESPONSE)

    result = runtime.run(agent, None)

    assert result.output.startswith("echo: hello")
    assert spy.parsed[REQUEST] == 1
    assert spy.dumped[REQUEST] == 1
    step = record_of(runtime, result.run_id).effects[0]
    assert step["args"]["body"]["messages"][0]["content"] == REQUEST
    if not stream:
        assert (spy.parsed[RESPONSE], spy.dumped[RESPONSE]) == (1, 1)
        assert step["result"]["body"]["id"] == RESPONSE
    spy.reset()
    server.stop()
    report = runtime.replay(result.run_id, agent)
    assert (report.matched, report.replayed_fingerprint) == (True, result.fingerprint)


def test_a_captured_post_meets_the_policy_rules_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matched: list[tuple[str, str, str]] = []
    match = Policy._match_http

    def counted(self: Policy, method: str, name: str, path: str) -> int:
        matched.append((method, name, path))
        return match(self, method, name, path)

    monkeypatch.setattr(Policy, "_match_http", counted)
    spy = Serializations(monkeypatch, REQUEST, RESPONSE)
    answer = httpx2.MockTransport(lambda request: httpx2.Response(201, json={"id": RESPONSE}))
    client = httpx2.Client(transport=CaptureTransport(answer))
    runtime = runtime_at(tmp_path)

    answers: list[Any] = []
    # The run's output is not the step's result: it is journaled on its own.
    result = runtime.run(lambda ctx, input: answers.append(client.post("http://127.0.0.1:9/plain/orders", json={"sku": REQUEST}).json()), None)

    assert answers == [{"id": RESPONSE}]
    assert matched == [("POST", "127.0.0.1:9", "/plain/orders")]
    assert (spy.parsed[REQUEST], spy.dumped[REQUEST]) == (1, 1)
    assert (spy.parsed[RESPONSE], spy.dumped[RESPONSE]) == (1, 1)
    step = record_of(runtime, result.run_id).effects[0]
    assert (step["class"], step["args"]["body"], step["result"]["body"]) == ("irreversible", {"sku": REQUEST}, {"id": RESPONSE})


def test_one_transport_class_serves_both_libraries_sync_and_async(tmp_path: Path) -> None:
    assert Httpx2Transport is AsyncHttpx2Transport is HttpxTransport is AsyncHttpxTransport is CaptureTransport

    def answer(request: Any) -> Any:
        return type(request).__module__.partition(".")[0], request.url.path

    def old(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer(request))

    def new(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=answer(request))

    sync_old = httpx.Client(transport=CaptureTransport(httpx.MockTransport(old)))
    sync_new = httpx2.Client(transport=CaptureTransport(httpx2.MockTransport(new)))
    async_old = httpx.AsyncClient(transport=CaptureTransport(httpx.MockTransport(old)))
    async_new = httpx2.AsyncClient(transport=CaptureTransport(httpx2.MockTransport(new)))

    async def agent(ctx: Any, input: Any) -> Any:
        return [
            sync_old.post("http://127.0.0.1:9/plain/a", json={}).json(),
            sync_new.post("http://127.0.0.1:9/plain/b", json={}).json(),
            (await async_old.post("http://127.0.0.1:9/plain/c", json={})).json(),
            (await async_new.post("http://127.0.0.1:9/plain/d", json={})).json(),
        ]

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, None)
    assert result.output == [["httpx", "/plain/a"], ["httpx2", "/plain/b"], ["httpx", "/plain/c"], ["httpx2", "/plain/d"]]
    report = runtime.replay(result.run_id, agent)
    assert (report.matched, report.replayed_fingerprint) == (True, result.fingerprint)
