"""The official anthropic SDK, unmodified, captured at its httpx2 transport: messages as
JSON and as a stream (the ``stream(...)`` helper), sync and async; recorded, then replayed
with the server stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic

from tests.integrations.capture_helpers import ANTHROPIC_KEY, record_of, runtime_at, store_bytes
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import capture


def test_messages_and_the_stream_helper_record_and_replay(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = anthropic.Anthropic(
        base_url=server.url, api_key=ANTHROPIC_KEY, http_client=capture(anthropic.DefaultHttpxClient())
    )

    def agent(ctx: Any, input: Any) -> Any:
        message = client.messages.create(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": input}]
        )
        with client.messages.stream(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": input + " please"}]
        ) as stream:
            texts = list(stream.text_stream)
            final = stream.get_final_message()
        return {
            "text": message.content[0].text,  # type: ignore[union-attr]
            "texts": texts,
            "final_usage": final.usage.model_dump(mode="json"),
        }

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "tell me")
    assert result.output["text"] == "echo: tell me"
    assert result.output["texts"] == ["echo: ", "tell ", "me ", "please "]
    server.stop()

    record = record_of(runtime, result.run_id)
    plain, streamed = record.effects[0], record.effects[1]
    assert (plain["kind"], plain["name"]) == ("llm", "anthropic.messages")
    assert plain["result"]["llm"]["usage"] == {"input_tokens": 5, "output_tokens": 3}
    assert streamed["result"]["llm"]["content"] == "echo: tell me please "
    assert streamed["result"]["llm"]["usage"] == {"input_tokens": 6, "output_tokens": 4}
    # Each event is its own chunk, in order.
    assert [chunk.split("\n", 1)[0] for chunk in streamed["result"]["chunks"][:2]] == [
        "event: message_start",
        "event: content_block_start",
    ]
    assert "x-api-key" not in plain["args"]["headers"] or plain["args"]["headers"]["x-api-key"] == "<secret>"
    runtime.close()
    assert ANTHROPIC_KEY.encode() not in store_bytes(tmp_path)

    runtime = runtime_at(tmp_path)
    replayed: list[Any] = []

    def watching(ctx: Any, input: Any) -> Any:
        output = agent(ctx, input)
        replayed.append(output)
        return output

    report = runtime.replay(result.run_id, watching)
    assert report.matched, report.divergence
    assert replayed == [result.output]


def test_the_async_client_streams_and_replays(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = anthropic.AsyncAnthropic(
        base_url=server.url, api_key=ANTHROPIC_KEY, http_client=capture(anthropic.DefaultAsyncHttpxClient())
    )

    async def agent(ctx: Any, input: Any) -> Any:
        stream = await client.messages.create(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": input}], stream=True
        )
        return [event.type async for event in stream]

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "a b")
    assert result.output[0] == "message_start" and result.output[-1] == "message_stop"
    server.stop()
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence
