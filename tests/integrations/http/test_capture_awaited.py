"""The official ``openai.AsyncOpenAI`` SDK over a capturing client inside an awaited run
(``await runtime.arun``): a request that does not ask for a stream is a step run on the
caller's event loop (no thread of its own), which keeps running other tasks while the
exchange is in progress; a stream, and a request made while one is open, still record in
step order; the run replays (``areplay``) with the server stopped."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx2
import openai

from tests.integrations.capture_helpers import API_KEY, record_of, runtime_at
from tests.integrations.loop_helpers import (
    MIN_TICKS,
    Effect,
    Heartbeat,
    StepThreads,
    record_then_replay,
)
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import capture


class SlowTransport(httpx2.AsyncBaseTransport):
    """The library's own transport, after a pause awaited on the caller's loop: every
    exchange it makes is noted (``Effect``)."""

    def __init__(self, beat: Heartbeat) -> None:
        self.beat = beat
        self.exchanges: list[Effect] = []
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        effect = Effect(self.beat)
        self.exchanges.append(effect)
        await effect.slow()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _client(server: LLMServer, transport: SlowTransport) -> openai.AsyncOpenAI:
    http_client = capture(openai.DefaultAsyncHttpx2Client(transport=transport))
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, http_client=http_client)


def test_an_awaited_request_is_a_step_on_the_callers_loop_which_keeps_running(tmp_path: Path) -> None:
    beat = Heartbeat()
    transport = SlowTransport(beat)
    server = LLMServer().start()
    client = _client(server, transport)
    runtime = runtime_at(tmp_path)
    observer = StepThreads()
    runtime.environment.observer = observer

    async def agent(ctx: Any, input: Any) -> Any:
        reply = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}])
        return reply.choices[0].message.content

    # The server stopped between: nothing listens any more.
    loop, result, report = record_then_replay(runtime, agent, "slow hello", beat, server.stop)
    assert result.output == "echo: slow hello", result.to_dict()
    assert [(effect["kind"], effect["name"]) for effect in result.effects] == [("llm", "openai.chat.completions")]
    (exchange,) = transport.exchanges
    assert exchange.loop is loop and exchange.thread is threading.main_thread()
    assert exchange.ticks >= MIN_TICKS, exchange.ticks
    # The step itself entered the pipeline on the caller's thread: no thread of its own.
    assert observer.threads == {0: threading.main_thread().name}
    assert report.matched, report.divergence
    assert report.replayed_fingerprint == result.fingerprint
    assert len(transport.exchanges) == 1 and len(server.requests) == 1  # the replay sent nothing


def test_an_awaited_request_while_a_stream_is_open_finishes_the_stream_first(tmp_path: Path) -> None:
    """The stream keeps its step's thread; the request made while it is open is bridged on
    the loop, which reads the rest of the stream for it, so the steps are recorded in order."""
    beat = Heartbeat()
    transport = SlowTransport(beat)
    server = LLMServer().start()
    client = _client(server, transport)
    runtime = runtime_at(tmp_path)
    observer = StepThreads()
    runtime.environment.observer = observer

    async def agent(ctx: Any, input: Any) -> Any:
        stream = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                      stream=True)
        pieces: list[str] = []
        inner = None
        async for event in stream:
            if event.choices:
                pieces.append(event.choices[0].delta.content or "")
            if len(pieces) == 1 and inner is None:
                reply = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "inner"}])
                inner = reply.choices[0].message.content
        return {"stream": "".join(pieces), "inner": inner}

    _, result, report = record_then_replay(runtime, agent, "u v", beat, server.stop)
    assert result.output == {"stream": "echo: u v ", "inner": "echo: inner"}, result.to_dict()
    record = record_of(runtime, result.run_id)
    assert sorted(record.effects) == [0, 1]
    assert record.effects[0]["result"]["chunks"] and record.effects[1]["args"]["body"]["messages"][0]["content"] == "inner"
    assert observer.threads[1] == threading.main_thread().name  # the request was bridged
    assert report.matched, report.divergence
