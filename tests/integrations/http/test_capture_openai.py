"""The official openai SDK, unmodified, captured at its httpx2 transport: record against the
loopback server, stop it, replay with no network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.integrations.capture_helpers import API_KEY, policy, record_of, runtime_at, store_bytes
from tracelock.evidence.bundle import export_bundle
from tracelock.evidence.history import SigningKey
from tracelock.evidence.keys import PrivateKey
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import CaptureOutsideRunError, capture
from tracelock.runtime.errors import DivergenceError, StepError
from tracelock.storage.directory import DirectoryStore


def client_for(server: LLMServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1",
        api_key=API_KEY,
        http_client=capture(openai.DefaultHttpx2Client()),
        **kwargs,
    )


def chat_agent(client: openai.OpenAI, prompt_key: str = "question") -> Any:
    def agent(ctx: Any, input: Any) -> Any:
        reply = client.chat.completions.create(
            model="gpt-test",
            max_tokens=50,
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": input[prompt_key]},
            ],
        )
        return {"text": reply.choices[0].message.content, "tokens": reply.usage.total_tokens if reply.usage else None}

    return agent


def test_record_stop_the_server_and_replay_with_no_network(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = client_for(server)
    agent = chat_agent(client)
    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, {"question": "what is two plus two"})
    assert result.output == {"text": "echo: what is two plus two", "tokens": 14}
    assert len(server.requests) == 1
    server.stop()

    record = record_of(runtime, result.run_id)
    step = record.effects[0]
    assert (step["kind"], step["name"]) == ("llm", "openai.chat.completions")
    assert step["args"]["model"] == "gpt-test"
    assert step["args"]["body"]["messages"][1]["content"] == "what is two plus two"
    assert step["args"]["headers"]["authorization"] == "<secret>"
    assert not any(name.startswith("x-stainless") or name == "user-agent" for name in step["args"]["headers"])
    assert step["result"]["llm"]["content"] == "echo: what is two plus two"
    assert step["result"]["llm"]["usage"]["prompt_tokens"] == 8
    assert step["result"]["headers"] == {"content-type": "application/json", "x-request-id": "req_1"}  # no date, no server

    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence
    assert report.replayed_fingerprint == report.recorded_fingerprint == result.fingerprint


def test_the_api_key_reaches_neither_the_store_nor_a_bundle(tmp_path: Path, server: LLMServer) -> None:
    runtime = runtime_at(tmp_path)
    result = runtime.run(chat_agent(client_for(server)), {"question": "hello"})
    sent = {name.lower(): value for name, value in server.requests[0]["headers"].items()}
    assert sent["authorization"] == f"Bearer {API_KEY}"  # it was sent
    runtime.close()
    assert API_KEY.encode() not in store_bytes(tmp_path)
    key = SigningKey(PrivateKey.from_seed(bytes(range(32))), "example.com/capture-test")
    with DirectoryStore(tmp_path / "store") as store:
        export_bundle(store, [result.run_id], tmp_path / "bundle", key=key)
    bundle = b"".join(path.read_bytes() for path in sorted((tmp_path / "bundle").rglob("*")) if path.is_file())
    assert b"hello" in bundle and b"<secret>" in bundle
    assert API_KEY.encode() not in bundle


def test_a_changed_prompt_fails_replay_naming_the_field(tmp_path: Path, server: LLMServer) -> None:
    client = client_for(server)
    runtime = runtime_at(tmp_path)
    result = runtime.run(chat_agent(client), {"question": "first", "other": "second"})
    report = runtime.replay(result.run_id, chat_agent(client, prompt_key="other"))
    assert not report.matched
    divergence = report.divergence
    assert divergence is not None and divergence["step"] == 0
    assert [change["path"] for change in divergence["diff"]] == ["/args/body/messages/1/content"]
    assert len(server.requests) == 1  # the replay sent nothing


def test_a_429_then_200_records_two_attempts_and_replays_both(tmp_path: Path) -> None:
    server = LLMServer().start()
    server.fail_next(429)
    agent = chat_agent(client_for(server, max_retries=2))
    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, {"question": "again"})
    assert result.output["text"] == "echo: again"
    assert len(server.requests) == 2
    server.stop()
    record = record_of(runtime, result.run_id)
    assert [record.effects[step]["result"]["status"] for step in sorted(record.effects)] == [429, 200]
    assert "llm" not in record.effects[0]["result"]
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def test_a_stream_replays_the_same_events_chunk_by_chunk(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = client_for(server)

    def agent(ctx: Any, input: Any) -> Any:
        stream = client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": input}],
            stream=True,
            stream_options={"include_usage": True},
        )
        return [event.model_dump(mode="json") for event in stream]

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "one two three")
    assert "".join(
        event["choices"][0]["delta"].get("content") or "" for event in result.output if event["choices"]
    ) == "echo: one two three "
    server.stop()
    step = record_of(runtime, result.run_id).effects[0]
    assert len(step["result"]["chunks"]) >= 2 and step["result"]["complete"] is True
    assert step["result"]["llm"]["content"] == "echo: one two three "
    assert step["result"]["llm"]["usage"]["completion_tokens"] == 4

    replayed: list[Any] = []

    def watching(ctx: Any, input: Any) -> Any:
        events = agent(ctx, input)
        replayed.extend(events)
        return events

    report = runtime.replay(result.run_id, watching)
    assert report.matched, report.divergence
    assert replayed == result.output


def test_a_stream_cut_off_is_recorded_and_replayed_as_cut_off(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = client_for(server, max_retries=0)

    def agent(ctx: Any, input: Any) -> Any:
        seen = []
        try:
            for event in client.chat.completions.create(model="cut", messages=[{"role": "user", "content": "x y"}], stream=True):
                seen.append(event.model_dump(mode="json"))
        except Exception as exc:
            return {"seen": seen, "error": type(exc).__name__}
        return {"seen": seen, "error": None}

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, None)
    server.stop()
    assert result.output["error"] is not None and len(result.output["seen"]) == 1
    step = record_of(runtime, result.run_id).effects[0]
    assert step["result"]["complete"] is False
    assert step["result"]["error"]["code"] == "HTTP_TRANSPORT_ERROR"
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def test_the_async_client_records_and_replays(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = openai.AsyncOpenAI(
        base_url=server.url + "/v1", api_key=API_KEY, http_client=capture(openai.DefaultAsyncHttpx2Client())
    )

    async def agent(ctx: Any, input: Any) -> Any:
        reply = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}])
        stream = await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": input + " again"}], stream=True
        )
        pieces = [event.choices[0].delta.content async for event in stream if event.choices]
        return {"text": reply.choices[0].message.content, "pieces": pieces}

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "hi")
    assert result.output["text"] == "echo: hi"
    assert "".join(piece or "" for piece in result.output["pieces"]) == "echo: hi again "
    server.stop()
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def test_the_responses_api_is_an_llm_step(tmp_path: Path, server: LLMServer) -> None:
    client = client_for(server)

    def agent(ctx: Any, input: Any) -> Any:
        return client.responses.create(model="gpt-test", input=input, max_output_tokens=20).output_text

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, "say it")
    assert result.output == "echo: say it"
    step = record_of(runtime, result.run_id).effects[0]
    assert (step["kind"], step["name"], step["args"]["max_tokens"]) == ("llm", "openai.responses", 20)
    assert step["result"]["llm"]["usage"]["input_tokens"] == 5


def test_outside_a_run_the_client_refuses_unless_pass_through(server: LLMServer) -> None:
    client = client_for(server)
    with pytest.raises(CaptureOutsideRunError) as caught:  # not retried, not wrapped by the SDK
        client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
    assert caught.value.code == "CAPTURE_OUTSIDE_RUN"
    assert server.requests == []
    free = openai.OpenAI(
        base_url=server.url + "/v1",
        api_key=API_KEY,
        http_client=capture(openai.DefaultHttpx2Client(), pass_through=True),
    )
    reply = free.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
    assert reply.choices[0].message.content == "echo: x"


def test_a_host_the_policy_does_not_allow_is_denied_before_the_request_leaves(tmp_path: Path, server: LLMServer) -> None:
    client = client_for(server)
    runtime = runtime_at(tmp_path, policy(http={"allow": [{"host": "api.openai.com", "methods": ["POST"]}]}))

    def agent(ctx: Any, input: Any) -> Any:
        try:
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        except StepError as exc:  # the SDK neither retries nor wraps it
            return exc.step_code
        return None

    result = runtime.run(agent, None)
    assert result.output == "POLICY_HTTP_NOT_ALLOWED"
    assert server.requests == []


def test_connection_refused_is_a_stable_outcome_replayed_as_the_same_exception(tmp_path: Path) -> None:
    server = LLMServer().start()
    url = server.url
    server.stop()  # nothing listens there now
    client = openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=1, http_client=capture(openai.DefaultHttpx2Client()))

    def agent(ctx: Any, input: Any) -> Any:
        try:
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        except openai.APIConnectionError as exc:
            return type(exc.__cause__).__name__
        return None

    runtime = runtime_at(tmp_path)
    result = runtime.run(agent, None)
    assert result.output == "ConnectError"
    record = record_of(runtime, result.run_id)
    assert [(doc["outcome"], doc["code"]) for _, doc in sorted(record.effects.items())] == [
        ("EXECUTION_ERROR", "HTTP_CONNECT_ERROR")
    ] * 2
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence


def test_replay_of_a_request_the_recording_lacks_fails_loudly(tmp_path: Path) -> None:
    server = LLMServer().start()
    client = client_for(server)
    runtime = runtime_at(tmp_path)
    result = runtime.run(chat_agent(client), {"question": "q"})
    server.stop()

    def twice(ctx: Any, input: Any) -> Any:
        chat_agent(client)(ctx, input)
        return chat_agent(client)(ctx, input)

    report = runtime.replay(result.run_id, twice)
    assert not report.matched and report.divergence is not None
    assert report.divergence["kind"] == "added_effect"
    with pytest.raises(DivergenceError):
        raise DivergenceError(report.divergence)


def test_a_fork_answers_its_prefix_from_the_parent_with_no_network(tmp_path: Path) -> None:
    from tracelock.runtime.replay.fork import fork_run

    server = LLMServer().start()
    client = client_for(server, max_retries=0)

    def agent(ctx: Any, input: Any) -> Any:
        answers = []
        for question in input:
            try:
                reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": question}])
                answers.append(reply.choices[0].message.content)
            except openai.APIConnectionError:
                answers.append("unreachable")
        return answers

    runtime = runtime_at(tmp_path)
    parent = runtime.run(agent, ["one", "two"])
    assert parent.output == ["echo: one", "echo: two"]
    server.stop()
    whole = fork_run(runtime, parent.run_id, 2, agent)  # every step reused
    assert whole.output == parent.output and whole.fingerprint == parent.fingerprint
    live_tail = fork_run(runtime, parent.run_id, 1, agent)  # step 1 runs live: nothing listens
    assert live_tail.output == ["echo: one", "unreachable"]
    assert len(server.requests) == 2
