"""A live stream reaches the caller event by event while the server is still sending it (no
buffering of the whole body), with the real openai and anthropic SDKs, sync and async and
through their ``stream(...)`` helpers; the replay yields the same events.

The server holds every stream after its first event until the agent, having received that
event, releases it: an implementation that reads the whole body first would wait for the
release that never comes, and the server would record the stream as not released."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.integrations.capture_helpers import ANTHROPIC_KEY, API_KEY, policy, record_of, runtime_at
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import CaptureStreamOpenError, capture
from tracelock.runtime.records import EFFECT, RESULT, load_run
from tracelock.runtime.replay.drift import detect_drift
from tracelock.runtime.runtime import Runtime

HOLD_S = 5.0


def openai_client(server: LLMServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0,
                         http_client=capture(openai.DefaultHttpx2Client()))


def async_openai_client(server: LLMServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0,
                              http_client=capture(openai.DefaultAsyncHttpx2Client()))


def anthropic_client(server: LLMServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=ANTHROPIC_KEY, max_retries=0,
                               http_client=capture(anthropic.DefaultHttpxClient()))


def async_anthropic_client(server: LLMServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key=ANTHROPIC_KEY, max_retries=0,
                                    http_client=capture(anthropic.DefaultAsyncHttpxClient()))


class Watch:
    """What the agent saw when its first event arrived: whether the server was still holding
    the rest back. It then lets the server go on."""

    def __init__(self, server: LLMServer, release: threading.Event | None) -> None:
        self.server, self.release = server, release
        self.first_seen_while_held: bool | None = None

    def first(self) -> None:
        if self.release is not None and self.first_seen_while_held is None:
            self.first_seen_while_held = not self.server.held and not self.release.is_set()
            self.release.set()


def record_then_replay(tmp_path: Path, make_agent: Any, make_client: Any, input: Any) -> tuple[Any, Any]:
    server = LLMServer().start()
    release = server.hold_streams(HOLD_S)
    watch = Watch(server, release)
    runtime = runtime_at(tmp_path)
    result = runtime.run(make_agent(make_client(server), watch), input)
    # (The server notes the release only after it: a caller that closed early may be done first.)
    assert watch.first_seen_while_held is True, "the first event did not reach the caller before the server sent the rest"
    assert False not in server.held
    client = make_client(server)
    server.stop()
    replayed: list[Any] = []

    def watching(agent: Any) -> Any:
        if asyncio.iscoroutinefunction(agent):
            async def run_async(ctx: Any, input: Any) -> Any:
                output = await agent(ctx, input)
                replayed.append(output)
                return output
            return run_async

        def run(ctx: Any, input: Any) -> Any:
            output = agent(ctx, input)
            replayed.append(output)
            return output
        return run

    report = runtime.replay(result.run_id, watching(make_agent(client, Watch(server, None))))
    assert report.matched, report.divergence
    assert replayed == [result.output]
    assert report.replayed_fingerprint == result.fingerprint
    return runtime, result


def test_openai_sync_stream_reaches_the_caller_before_the_server_finishes(tmp_path: Path) -> None:
    def make(client: openai.OpenAI, watch: Watch) -> Any:
        def agent(ctx: Any, input: Any) -> Any:
            events = []
            for event in client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                        stream=True, stream_options={"include_usage": True}):
                watch.first()
                events.append(event.model_dump(mode="json"))
            return events
        return agent

    runtime, result = record_then_replay(tmp_path, make, openai_client, "one two three")
    text = "".join(event["choices"][0]["delta"].get("content") or "" for event in result.output if event["choices"])
    assert text == "echo: one two three "
    step = record_of(runtime, result.run_id).effects[0]
    assert step["result"]["complete"] is True and step["result"]["error"] is None
    assert step["result"]["llm"]["usage"]["completion_tokens"] == 4
    assert len(step["result"]["chunks"]) == len(result.output) + 1  # and [DONE]


def test_openai_stream_helper_sync(tmp_path: Path) -> None:
    def make(client: openai.OpenAI, watch: Watch) -> Any:
        def agent(ctx: Any, input: Any) -> Any:
            kinds = []
            with client.chat.completions.stream(model="gpt-test", messages=[{"role": "user", "content": input}]) as stream:
                for event in stream:
                    watch.first()
                    kinds.append(event.type)
                final = stream.get_final_completion()
            return {"kinds": kinds, "text": final.choices[0].message.content}
        return agent

    _, result = record_then_replay(tmp_path, make, openai_client, "alpha beta")
    assert result.output["text"] == "echo: alpha beta "
    assert "content.done" in result.output["kinds"]


def test_openai_async_stream(tmp_path: Path) -> None:
    def make(client: openai.AsyncOpenAI, watch: Watch) -> Any:
        async def agent(ctx: Any, input: Any) -> Any:
            stream = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                          stream=True)
            pieces = []
            async for event in stream:
                watch.first()
                if event.choices:
                    pieces.append(event.choices[0].delta.content or "")
            return "".join(pieces)
        return agent

    _, result = record_then_replay(tmp_path, make, async_openai_client, "slow and steady")
    assert result.output == "echo: slow and steady "


def test_anthropic_stream_helper_sync(tmp_path: Path) -> None:
    def make(client: anthropic.Anthropic, watch: Watch) -> Any:
        def agent(ctx: Any, input: Any) -> Any:
            with client.messages.stream(model="claude-test", max_tokens=64,
                                        messages=[{"role": "user", "content": input}]) as stream:
                texts = []
                for event in stream:
                    watch.first()  # the first event is message_start, before any text
                    if event.type == "text":
                        texts.append(event.text)
                final = stream.get_final_message()
            return {"texts": texts, "usage": final.usage.output_tokens}
        return agent

    _, result = record_then_replay(tmp_path, make, anthropic_client, "tell me")
    assert "".join(result.output["texts"]) == "echo: tell me "


def test_anthropic_stream_helper_async(tmp_path: Path) -> None:
    def make(client: anthropic.AsyncAnthropic, watch: Watch) -> Any:
        async def agent(ctx: Any, input: Any) -> Any:
            async with client.messages.stream(model="claude-test", max_tokens=64,
                                              messages=[{"role": "user", "content": input}]) as stream:
                kinds = []
                async for event in stream:
                    watch.first()
                    kinds.append(event.type)
                final = await stream.get_final_message()
            return {"kinds": kinds, "text": final.content[0].text}  # type: ignore[union-attr]
        return agent

    _, result = record_then_replay(tmp_path, make, async_anthropic_client, "async please")
    assert result.output["text"] == "echo: async please "
    assert result.output["kinds"][0] == "message_start"


def test_a_stream_the_caller_closes_early_is_recorded_as_closed_and_replays_the_same(tmp_path: Path) -> None:
    def make(client: openai.OpenAI, watch: Watch) -> Any:
        def agent(ctx: Any, input: Any) -> Any:
            stream = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                    stream=True)
            first = next(iter(stream))
            watch.first()
            stream.close()
            return first.choices[0].delta.role
        return agent

    runtime, result = record_then_replay(tmp_path, make, openai_client, "a b c d e f")
    assert result.output == "assistant"
    step = record_of(runtime, result.run_id).effects[0]
    assert step["result"]["closed"] is True and step["result"]["error"] is None
    assert len(step["result"]["chunks"]) == 1  # what the caller read, no more


def test_another_step_while_a_stream_is_open_first_finishes_the_stream(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = openai_client(server)

    def agent(ctx: Any, input: Any) -> Any:
        stream = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                stream=True)
        pieces: list[str] = []
        for event in stream:
            if event.choices:
                pieces.append(event.choices[0].delta.content or "")
            if len(pieces) == 1:
                ctx.now()
                client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "inner"}])
        return "".join(pieces)

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "x y z")
    assert result.output == "echo: x y z "
    server.stop()
    record = load_run(runtime.store, result.run_id)
    assert _effect_steps(runtime, record) == [0, 1, 2]  # the stream's result is journaled before the next step's
    assert record.effects[0]["result"]["complete"] is True
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def _effect_steps(runtime: Any, record: Any) -> list[int]:
    steps = []
    for entry in record.entries:
        if entry.kind in (EFFECT, RESULT):
            steps.append(runtime.store.get_payload(entry.payload)["step"])
    return steps


def test_an_irreversible_stream_is_read_whole_before_the_caller_sees_it(tmp_path: Path) -> None:
    document = policy(http={"allow": [{"host": "127.0.0.1", "methods": ["POST"], "paths": ["/plain/*"],
                                       "class": "irreversible"}]})
    server = LLMServer().start()
    release = server.hold_streams(0.5)
    client = capture(openai.DefaultHttpx2Client())
    seen: list[bool] = []

    def agent(ctx: Any, input: Any) -> Any:
        with client.stream("POST", server.url + "/plain/events", json={"n": 3},
                           headers={"accept": "text/event-stream"}) as response:
            lines = []
            for line in response.iter_lines():
                if not seen:
                    seen.append(bool(server.held))
                    release.set()
                if line:
                    lines.append(line)
            return lines

    runtime = runtime_at(tmp_path, document)
    result = runtime.run(agent, None)
    assert result.output == ["data: 0", "data: 1", "data: 2"]
    assert server.held == [False] and seen == [True]  # the whole body was read first
    record = record_of(runtime, result.run_id)
    assert record.effects[0]["class"] == "irreversible" and record.effects[0]["result"]["complete"] is True


def test_a_stream_left_open_at_the_end_of_the_run_is_recorded_as_closed(tmp_path: Path, server: LLMServer) -> None:
    client = openai_client(server)

    def agent(ctx: Any, input: Any) -> Any:
        stream = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                stream=True)
        iterator = iter(stream)
        next(iterator)
        ctx.annotations["kept"] = stream  # still open when the agent returns
        return "left open"

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "p q r")
    assert result.ok
    step = record_of(runtime, result.run_id).effects[0]
    assert step["result"]["closed"] is True and len(step["result"]["chunks"]) == 1
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def test_an_async_agent_starting_a_step_while_its_stream_is_open_is_told_to_finish_it(tmp_path: Path, server: LLMServer) -> None:
    client = async_openai_client(server)

    async def agent(ctx: Any, input: Any) -> Any:
        stream = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                      stream=True)
        async for _ in stream:
            try:
                ctx.now()
            except CaptureStreamOpenError as exc:
                await stream.close()
                return exc.code
        return "no error"

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "m n")
    assert result.output == "CAPTURE_STREAM_OPEN"
    assert sorted(record_of(runtime, result.run_id).effects) == [0]


def test_an_async_captured_request_while_a_stream_is_open_finishes_the_stream_first(tmp_path: Path, server: LLMServer) -> None:
    client = async_openai_client(server)

    async def agent(ctx: Any, input: Any) -> Any:
        stream = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                      stream=True)
        pieces: list[str] = []
        async for event in stream:
            if event.choices:
                pieces.append(event.choices[0].delta.content or "")
            if len(pieces) == 1:
                await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "inner"}])
        return "".join(pieces)

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "u v")
    assert result.output == "echo: u v "
    record = load_run(runtime.store, result.run_id)
    assert _effect_steps(runtime, record) == [0, 1]
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def test_a_crash_mid_stream_leaves_the_step_without_a_result_and_recovery_runs_it_again(
    tmp_path: Path, server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TL_TEST_SERVER", server.url)
    monkeypatch.delenv("TL_TEST_CRASH", raising=False)
    monkeypatch.delitem(sys.modules, "_stream_crash_child", raising=False)
    import _stream_crash_child as child

    store = tmp_path / "store"
    env = dict(os.environ, TL_TEST_SERVER=server.url, TL_TEST_CRASH="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "_stream_crash_child", str(store)], env=env, timeout=60, check=False)
    assert done.returncode == 9
    assert len(server.requests) == 1
    runtime = child.make_runtime(str(store))
    crashed = load_run(runtime.store, "crashed")
    # The read-only step's effect was held in the run (docs/spec.md 3.4) and died with the
    # process; the stream's step has nothing either. Recovery runs both again.
    assert crashed.status == "running" and not crashed.effects and not crashed.pending
    report = runtime.recover()
    assert [row["to"] for row in report.runs] == ["completed"], [(row.get("code"), row.get("reason")) for row in report.runs]
    assert len(server.requests) == 2  # the LLM step ran again
    record = load_run(runtime.store, "crashed")
    assert record.end is not None and record.effects[1]["result"]["complete"] is True
    runtime.close()


def test_drift_runs_each_attempt_live_against_the_server_with_one_fingerprint(tmp_path: Path, server: LLMServer) -> None:
    client = openai_client(server)

    def agent(ctx: Any, input: Any) -> Any:
        reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}])
        streamed = [event.model_dump(mode="json") for event in client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": input}], stream=True)]
        return {"text": reply.choices[0].message.content, "events": len(streamed)}

    report = detect_drift(lambda store: Runtime(store, policy()), agent, "same answer", 3)
    assert not report.drifted, report.drift
    assert len(report.fingerprints) == 3 and len(set(report.fingerprints)) == 1
    assert len(server.requests) == 6  # every attempt was live


def test_a_cut_off_stream_gives_the_same_bytes_live_and_on_replay(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = capture(openai.DefaultHttpx2Client())
    url = server.url + "/v1/chat/completions"

    def agent(ctx: Any, input: Any) -> Any:
        pieces: list[str] = []
        with client.stream("POST", url, json={"model": "cut", "stream": True,
                                              "messages": [{"role": "user", "content": "x y"}]}) as response:
            try:
                for raw in response.iter_raw():
                    pieces.append(raw.decode())
            except Exception as exc:
                return {"pieces": pieces, "error": type(exc).__name__}
        return {"pieces": pieces, "error": None}

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, None)
    server.stop()
    assert result.output["error"] == "RemoteProtocolError"
    assert len(result.output["pieces"]) == 2 and not result.output["pieces"][1].endswith("\n\n")  # the unfinished event
    replayed: list[Any] = []
    report = runtime.replay(result.run_id, lambda ctx, input: replayed.append(agent(ctx, input)) or replayed[-1])
    assert report.matched, report.divergence
    assert replayed == [result.output]
