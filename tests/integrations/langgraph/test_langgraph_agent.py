"""A real LangGraph ReAct agent (``StateGraph``, ``ChatOpenAI`` over the official SDK against
the scripted loopback server, ``ToolNode`` with the tracelock hook) recorded, then replayed
with the server stopped: no network, no tool execution, the same fingerprint; a changed
prompt or tool argument diverges naming the field; the policy's denials reach the graph."""

from __future__ import annotations

import contextvars
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from tests.integrations.capture_helpers import runtime_at
from tests.integrations.langgraph_helpers import (
    QUESTION,
    SCRIPT,
    SIDE_EFFECTS,
    Shop,
    agent_of,
    async_agent_of,
    build_graph,
    shop_policy,
    tools_only_graph,
)
from tracelock.examples.react_server import ReactServer
from tracelock.integrations.langgraph import (
    LangGraphOutsideRunError,
    ToolCallDoor,
    register_langchain_tools,
)
from tracelock.runtime.runtime import Runtime


def _runtime(tmp_path: Path, shop: Shop, document: Any = None) -> Runtime:
    runtime = runtime_at(tmp_path, document if document is not None else shop_policy())
    register_langchain_tools(runtime, shop.tools, side_effects=SIDE_EFFECTS)
    return runtime


def _steps(effects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(effect["kind"], effect["name"]) for effect in effects]


EXPECTED_STEPS = [
    ("llm", "openai.chat.completions"),
    ("tool", "lookup"),
    ("tool", "lookup"),
    ("llm", "openai.chat.completions"),
    ("tool", "refund"),
    ("llm", "openai.chat.completions"),
]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_a_graph_records_and_replays_with_the_server_stopped_and_no_tool_run(tmp_path: Path, use_async: bool) -> None:
    shop = Shop()
    server = ReactServer(SCRIPT).start()
    graph = build_graph(shop, server.url, use_async=use_async)
    agent = async_agent_of(graph) if use_async else agent_of(graph)
    runtime = _runtime(tmp_path, shop)
    result = runtime.run(agent, QUESTION)
    assert result.status == "completed", result.to_dict()
    assert _steps(result.effects) == EXPECTED_STEPS
    # The parallel lookups are steps in the model's order, whatever thread ran first.
    assert [effect["args"] for effect in result.effects if effect["name"] == "lookup"] == [
        {"order_id": "A-1"},
        {"order_id": "B-2"},
    ]
    assert [effect["class"] for effect in result.effects if effect["kind"] == "tool"] == ["read_only", "read_only", "irreversible"]
    assert sorted(shop.executed, key=repr) == sorted(
        [("lookup", {"order_id": "A-1"}), ("lookup", {"order_id": "B-2"}), ("refund", {"order_id": "A-1", "amount": 5})], key=repr
    )
    messages = result.output["messages"]
    assert messages[-1] == {"type": "ai", "content": "done: refunded 5 on A-1"}
    tool_messages = [message for message in messages if message["type"] == "tool"]
    assert tool_messages[0] == {
        "type": "tool",
        "content": '{"eta_days":2,"order":"A-1","status":"shipped"}',
        "tool_call_id": "call_0_0",
        "status": "success",
        "name": "lookup",
    }
    assert len(server.requests) == 3

    server.stop()  # nothing listens any more
    executed = len(shop.executed)
    report = runtime.replay(result.run_id, agent)
    assert report.matched, report.divergence
    assert report.replayed_fingerprint == result.fingerprint
    assert len(shop.executed) == executed  # no tool ran
    runtime.close()


def test_a_changed_prompt_diverges_naming_the_message(tmp_path: Path) -> None:
    shop = Shop()
    server = ReactServer(SCRIPT).start()
    runtime = _runtime(tmp_path, shop)
    result = runtime.run(agent_of(build_graph(shop, server.url)), QUESTION)
    url = server.url
    server.stop()
    changed = agent_of(build_graph(shop, url, prompt="You help customers. Be very brief."))
    report = runtime.replay(result.run_id, changed)
    assert not report.matched
    divergence = report.divergence
    assert divergence is not None and divergence["step"] == 0
    assert [row["path"] for row in divergence["diff"]] == ["/args/body/messages/0/content"]
    runtime.close()


def test_a_changed_tool_argument_diverges_naming_the_argument(tmp_path: Path) -> None:
    shop = Shop()
    server = ReactServer(SCRIPT).start()
    runtime = _runtime(tmp_path, shop)
    result = runtime.run(agent_of(build_graph(shop, server.url)), QUESTION)
    url = server.url
    server.stop()

    def cap_refunds(message: AIMessage) -> AIMessage:
        # Graph code (a new version) that edits what the model asked before the tools run.
        calls = [
            {**call, "args": {**call["args"], "amount": min(call["args"]["amount"], 3)}} if call["name"] == "refund" else call
            for call in message.tool_calls
        ]
        return AIMessage(content=message.content, tool_calls=calls, id=message.id) if calls else message

    executed = len(shop.executed)
    report = runtime.replay(result.run_id, agent_of(build_graph(shop, url, rewrite=cap_refunds)))
    assert not report.matched
    divergence = report.divergence
    assert divergence is not None and divergence["step"] == 4
    assert divergence["diff"] == [{"path": "/args/amount", "op": "changed", "recorded": 5, "requested": 3}]
    assert len(shop.executed) == executed
    runtime.close()


def test_a_denied_tool_reaches_the_model_as_an_error_message_and_never_runs(tmp_path: Path) -> None:
    shop = Shop()
    with ReactServer(SCRIPT) as server:
        runtime = _runtime(tmp_path, shop, shop_policy(tools=[{"name": "lookup"}]))  # refund not allowed
        url = server.url
        result = runtime.run(agent_of(build_graph(shop, url)), QUESTION)
    assert result.status == "completed", result.to_dict()
    assert [name for name, _ in shop.executed] == ["lookup", "lookup"]
    refund = next(effect for effect in result.effects if effect["name"] == "refund")
    assert (refund["outcome"], refund["code"]) == ("DENIED", "POLICY_TOOL_NOT_ALLOWED")
    denied = next(message for message in result.output["messages"] if message.get("tool_call_id") == "call_1_0")
    assert denied["status"] == "error"
    assert denied["content"].startswith("DENIED [POLICY_TOOL_NOT_ALLOWED]: ")
    # The model read the denial: its next request carried it.
    assert result.output["messages"][-1]["content"] == "done: " + denied["content"]
    # Replayed, the denial is the same message (rebuilt from the journal).
    report = runtime.replay(result.run_id, agent_of(build_graph(shop, url)))
    assert report.matched, report.divergence
    runtime.close()


def test_a_denied_tool_raised_ends_the_run_with_the_step_outcome(tmp_path: Path) -> None:
    shop = Shop()
    with ReactServer(SCRIPT) as server:
        runtime = _runtime(tmp_path, shop, shop_policy(tools=[{"name": "lookup"}]))
        # ToolNode's own error handling would turn the raised error into a message.
        graph = build_graph(shop, server.url, door=ToolCallDoor(errors="raise"), handle_tool_errors=False)
        result = runtime.run(agent_of(graph), QUESTION)
    assert result.status == "failed"
    assert (result.outcome, result.code) == ("DENIED", "POLICY_TOOL_NOT_ALLOWED")
    assert [name for name, _ in shop.executed] == ["lookup", "lookup"]
    runtime.close()


def test_arguments_the_tool_schema_refuses_end_the_step_in_validate(tmp_path: Path) -> None:
    shop = Shop()
    script = [[("refund", {"order_id": "A-1", "amount": "five"})]]
    with ReactServer(script) as server:
        runtime = _runtime(tmp_path, shop)
        result = runtime.run(agent_of(build_graph(shop, server.url)), QUESTION)
    refund = next(effect for effect in result.effects if effect["name"] == "refund")
    assert (refund["outcome"], refund["code"], refund["phase"]) == ("VALIDATION_ERROR", "ARGS_SCHEMA_MISMATCH", "VALIDATE")
    assert shop.executed == []
    runtime.close()


def _tool_call_state(order_id: str) -> dict[str, Any]:
    return {"messages": [AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"order_id": order_id}, "id": "c1"}])]}


def test_the_hook_outside_a_run_is_refused() -> None:
    shop = Shop()
    with pytest.raises(LangGraphOutsideRunError) as raised:
        tools_only_graph(shop).invoke(_tool_call_state("A-1"))
    assert raised.value.code == "LANGGRAPH_OUTSIDE_RUN"
    assert shop.executed == []


def test_a_tool_call_through_the_hook_is_the_step_ctx_call_makes(tmp_path: Path) -> None:
    """A run recorded with plain ``ctx.call`` replays through a ``ToolNode`` with the hook
    (and the other way round): the hook makes exactly the request ``ctx.call`` makes."""
    shop = Shop()
    runtime = _runtime(tmp_path, shop)
    graph = tools_only_graph(shop)

    def plain(ctx: Any, input: Any) -> Any:
        return ctx.call("lookup", order_id="A-1")

    def hooked(ctx: Any, input: Any) -> Any:
        message = graph.invoke(_tool_call_state("A-1"))["messages"][-1]
        return json.loads(message.content)

    for first, second in ((plain, hooked), (hooked, plain)):
        result = runtime.run(first, None)
        assert result.status == "completed", result.to_dict()
        report = runtime.replay(result.run_id, second)
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == result.fingerprint
    assert [name for name, _ in shop.executed] == ["lookup", "lookup"]
    runtime.close()


def test_async_tool_messages_are_the_same_as_sync(tmp_path: Path) -> None:
    shop = Shop()
    with ReactServer(SCRIPT) as server:
        sync_runtime = _runtime(tmp_path / "sync", shop)
        recorded = sync_runtime.run(agent_of(build_graph(shop, server.url)), QUESTION)
        async_runtime = _runtime(tmp_path / "async", shop)
        graph = build_graph(shop, server.url, use_async=True)
        async_recorded = async_runtime.run(async_agent_of(graph), QUESTION)
    assert recorded.output == async_recorded.output
    # The same requests and results, step by step (the fingerprints differ by the agent's name).
    def steps(result: Any) -> list[tuple[Any, ...]]:
        return [(effect["kind"], effect["name"], effect["args"], effect["result"]) for effect in result.effects]

    assert steps(recorded) == steps(async_recorded)
    sync_runtime.close()
    async_runtime.close()


def test_parallel_calls_of_one_message_take_their_turn_in_the_models_order(tmp_path: Path) -> None:
    """The second call of a message reaching the hook first waits for the first: steps are
    numbered in the model's order, whatever order the threads arrive in."""
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from tracelock.integrations.langgraph import wrap_tool_call

    shop = Shop()
    runtime = Runtime(tmp_path / "store", shop_policy(), strict=False)  # the agent starts a thread itself
    register_langchain_tools(runtime, shop.tools, side_effects=SIDE_EFFECTS)
    calls = [{"name": "lookup", "args": {"order_id": order}, "id": f"c{number}", "type": "tool_call"}
             for number, order in enumerate(["A-1", "B-2"])]
    state = {"messages": [AIMessage(content="", tool_calls=calls)]}
    waited: list[bool] = []

    def agent(ctx: Any, input: Any) -> Any:
        answers: dict[str, Any] = {}

        def second() -> None:
            answers["c1"] = wrap_tool_call(ToolCallRequest(tool_call=calls[1], tool=None, state=state, runtime=None), None)

        thread = threading.Thread(target=contextvars.copy_context().run, args=(second,))  # in the run
        thread.start()
        thread.join(0.2)
        waited.append(thread.is_alive())  # still waiting for its turn (c0 has not run yet)
        answers["c0"] = wrap_tool_call(ToolCallRequest(tool_call=calls[0], tool=None, state=state, runtime=None), None)
        thread.join()
        return {key: json.loads(answers[key].content)["order"] for key in sorted(answers)}

    result = runtime.run(agent, None)
    assert result.output == {"c0": "A-1", "c1": "B-2"}, result.to_dict()
    assert [effect["args"]["order_id"] for effect in result.effects] == ["A-1", "B-2"]
    assert waited == [True]
    runtime.close()


def test_a_tool_that_needs_approval_suspends_the_graph_and_resumes_after_it(tmp_path: Path) -> None:
    shop = Shop()
    with ReactServer(SCRIPT) as server:
        document = shop_policy(tools=[{"name": "lookup"}, {"name": "refund", "approval": True}])
        runtime = _runtime(tmp_path, shop, document)
        agent = agent_of(build_graph(shop, server.url))
        waiting = runtime.run(agent, QUESTION)
        assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 4), waiting.to_dict()
        assert [name for name, _ in shop.executed] == ["lookup", "lookup"]  # the suspension was no message
        runtime.approve(waiting.run_id, 4, by="alice", reason="refund checked")
        resumed = runtime.resume(waiting.run_id, agent)
    assert resumed.status == "completed", resumed.to_dict()
    assert resumed.output["messages"][-1]["content"] == "done: refunded 5 on A-1"
    assert [name for name, _ in shop.executed] == ["lookup", "lookup", "refund"]  # the lookups were not run again
    assert len(server.requests) == 3  # nor the recorded model calls sent again
    runtime.close()
