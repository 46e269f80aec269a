"""Plain HTTP through a captured client of the legacy ``httpx`` library (the transports are
the same code over either library): a GET that is not an LLM call, a body that is not JSON,
and the durability of a POST's intent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from tests.integrations.capture_helpers import policy, record_of, runtime_at
from tracelock.integrations.http import (
    CaptureOutsideRunError,
    Httpx2Transport,
    HttpxTransport,
    capture,
)
from tracelock.integrations.http.errors import CaptureClientError
from tracelock.runtime.errors import StepError


def fixed(status: int, body: bytes, content_type: str) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type, "set-cookie": "s=abc"})

    return httpx.MockTransport(answer)


def test_a_get_through_httpx_is_an_http_step_replayed_from_the_journal(tmp_path: Path) -> None:
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(200, content=b"\x00\x01binary", headers={"content-type": "application/octet-stream", "set-cookie": "session=abc123"})

    client = httpx.Client(transport=HttpxTransport(httpx.MockTransport(answer)))

    def agent(ctx: Any, input: Any) -> Any:
        response = client.get("http://127.0.0.1:9/plain/data?x=1", headers={"cookie": "session=abc123"})
        return {"status": response.status_code, "size": len(response.content), "head": response.content[:2].hex()}

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, None)
    assert result.output == {"status": 200, "size": 8, "head": "0001"}
    step = record_of(runtime, result.run_id).effects[0]
    assert (step["kind"], step["name"], step["class"]) == ("http", "GET 127.0.0.1:9/plain/data", "read_only")
    assert step["args"]["headers"]["cookie"] == "<secret>"
    assert step["result"]["headers"]["set-cookie"] == "<secret>"
    assert step["result"]["body_bytes"]["size"] == 8
    assert len(calls) == 1
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence
    assert len(calls) == 1


def test_a_post_journals_its_intent_before_the_request_leaves(tmp_path: Path) -> None:
    runtime = runtime_at(tmp_path)
    seen: list[list[str]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        # What is durable when the request reaches the network.
        seen.append([entry.kind for entry in runtime.store.entries("run-1")])
        return httpx2.Response(201, json={"ok": True})

    client = httpx2.Client(transport=Httpx2Transport(httpx2.MockTransport(answer)))

    def agent(ctx: Any, input: Any) -> Any:
        return client.post("http://127.0.0.1:9/plain/orders", json={"sku": "A"}).json()

    result = runtime.run(agent, None)
    assert result.output == {"ok": True}
    assert seen and seen[0][-1] == "effect.intent"
    step = record_of(runtime, result.run_id).effects[0]
    assert (step["class"], step["args"]["body"], step["result"]["status"]) == ("irreversible", {"sku": "A"}, 201)


def test_pass_through_and_refusal_outside_a_run() -> None:
    refusing = httpx.Client(transport=HttpxTransport(fixed(200, b"{}", "application/json")))
    with pytest.raises(CaptureOutsideRunError):
        refusing.get("http://127.0.0.1:9/plain/x")
    passing = httpx.Client(transport=HttpxTransport(fixed(200, b'{"a":1}', "application/json"), pass_through=True))
    assert passing.get("http://127.0.0.1:9/plain/x").json() == {"a": 1}


def test_capture_refuses_what_is_not_a_client() -> None:
    with pytest.raises(CaptureClientError):
        capture(object())


def test_user_named_secret_headers_are_marked(tmp_path: Path) -> None:
    client = capture(httpx.Client(transport=fixed(200, b"{}", "application/json")), secret_headers=["X-Token"])

    def agent(ctx: Any, input: Any) -> Any:
        return client.get("http://127.0.0.1:9/plain/x", headers={"x-token": "hunter2"}).status_code

    runtime = runtime_at(tmp_path, policy())
    result = runtime.run(agent, None)
    assert result.output == 200
    assert record_of(runtime, result.run_id).effects[0]["args"]["headers"]["x-token"] == "<secret>"


def test_strict_mode_still_refuses_a_client_that_does_not_capture(tmp_path: Path, server: Any) -> None:
    import openai

    captured = openai.OpenAI(base_url=server.url + "/v1", api_key="k", http_client=capture(openai.DefaultHttpx2Client()))
    plain = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    mocked = httpx.Client(transport=fixed(200, b"{}", "application/json"))

    def ask(client: Any) -> Any:
        return client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])

    runtime = runtime_at(tmp_path)
    assert runtime.run(lambda ctx, i: ask(captured).choices[0].message.content, None).output == "echo: x"
    for agent in (lambda ctx, i: ask(plain), lambda ctx, i: mocked.get("http://127.0.0.1:9/plain/x").status_code):
        result = runtime.run(agent, None)
        assert (result.code, result.error and result.error.split("]")[0]) == ("NONDETERMINISM_DETECTED", "[TL-NET-001")
    assert len(server.requests) == 1


def test_an_emergency_stop_of_irreversible_effects_stops_a_captured_post(tmp_path: Path) -> None:
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        return httpx.Response(200, content=b"{}", headers={"content-type": "application/json"})

    client = httpx.Client(transport=HttpxTransport(httpx.MockTransport(answer)))

    def agent(ctx: Any, input: Any) -> Any:
        read = client.get("http://127.0.0.1:9/plain/data").status_code
        try:
            client.post("http://127.0.0.1:9/plain/pay", json={"amount": 5})
        except StepError as exc:
            return {"read": read, "post": exc.step_code, "stop": (exc.details or {}).get("stop", {}).get("class")}
        return {"read": read, "post": "sent"}

    runtime = runtime_at(tmp_path)
    runtime.stop_tool(side_effect="irreversible", by="ops", reason="freeze during the audit")
    stopped = runtime.run(agent, None)
    # The GET (read-only) goes out; the POST (irreversible by default) never leaves.
    assert stopped.output == {"read": 200, "post": "TOOL_STOPPED", "stop": "irreversible"}
    assert sent == ["GET"]
    assert runtime.replay(stopped.run_id, agent).matched
    runtime.lift_stop(side_effect="irreversible", by="ops", reason="audit done")
    assert runtime.run(agent, None).output == {"read": 200, "post": "sent"}
    assert sent == ["GET", "GET", "POST"]
