"""An MCP server's tools as tracelock tools, against real server processes: record, stop the
server, replay with no server and no tool execution; validation, policy and tool errors
before or instead of the server; the side-effect classes the annotations give."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import _crash_child
import pytest
from mcp_helpers import POLICY, HttpToolServer, calls, saved_listing, stopped

from tracelock import Runtime
from tracelock.integrations.mcp import (
    IDEMPOTENCY_META,
    McpConnectError,
    McpListingError,
    McpServer,
    mcp_toolkit,
    side_effect_of,
)
from tracelock.runtime.errors import StepError

REPO = Path(__file__).resolve().parents[3]


def agent(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """Uses one tool of each class: read-only, idempotent, irreversible (twice)."""
    found = ctx.call("t.lookup", key="greeting")
    ctx.call("t.set_value", key="owner", value=input["owner"])
    sent = ctx.call("t.send_message", to=input["owner"], text=input["text"])
    noted = ctx.call("t.append_note", text="sent to " + input["owner"])
    return {
        "greeting": found["structuredContent"]["result"],
        "sent": sent["structuredContent"],
        "noted": noted["structuredContent"]["result"],
    }


def changed_agent(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """The same agent after a code change: it sends a different text."""
    return agent(ctx, dict(input, text=input["text"] + "!"))


INPUT = {"owner": "ada", "text": "the report is ready"}


def _runtime(store: Path, toolkit: Any, policy: dict[str, Any] = POLICY) -> Runtime:
    return Runtime(store, policy, toolkits=(toolkit,))


# -- side-effect classes ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, "irreversible"),  # spec defaults: not read-only, destructive, not idempotent
        ({}, "irreversible"),
        ({"readOnlyHint": True}, "read_only"),
        ({"readOnlyHint": True, "destructiveHint": True, "idempotentHint": False}, "read_only"),
        ({"idempotentHint": True}, "idempotent"),
        ({"idempotentHint": True, "destructiveHint": True}, "idempotent"),
        ({"destructiveHint": False}, "irreversible"),  # additive, yet not safe to run twice
        ({"readOnlyHint": False, "destructiveHint": True}, "irreversible"),
    ],
)
def test_side_effect_class_from_annotations(annotations: dict[str, Any] | None, expected: str) -> None:
    assert side_effect_of(annotations) == expected


def test_listing_of_a_real_server_becomes_tools(stdio_server: McpServer) -> None:
    toolkit = mcp_toolkit(stdio_server, prefix="t.", side_effects={"append_note": "idempotent"})
    classes = {name: tool.side_effect for name, tool in toolkit.tools.items()}
    assert classes == {
        "t.lookup": "read_only",
        "t.set_value": "idempotent",
        "t.send_message": "irreversible",
        "t.append_note": "idempotent",  # overridden
        "t.send_then_crash_client": "irreversible",
        "t.slow": "read_only",
        "t.fail": "read_only",
    }
    assert toolkit.tools["t.lookup"].schema["required"] == ["key"]
    assert toolkit.tools["t.lookup"].description == "Read a value."
    assert stdio_server.connections == 1
    with pytest.raises(McpListingError):
        mcp_toolkit(stdio_server, side_effects={"no_such_tool": "read_only"})
    with pytest.raises(McpListingError):
        mcp_toolkit(stdio_server, side_effects={"lookup": "harmless"})


# -- record and replay -----------------------------------------------------------------
def test_record_stdio_then_replay_with_no_server(tmp_path: Path, stdio_server: McpServer, effects: Path) -> None:
    listing = stdio_server.list_tools()
    stdio_server.close()
    toolkit = mcp_toolkit(stdio_server, listing=listing, prefix="t.")
    with _runtime(tmp_path / "store", toolkit) as runtime:
        result = runtime.run(agent, INPUT)
        assert result.ok, result.error
        assert result.output == {
            "greeting": "hello",
            "sent": {"sent": True, "to": "ada", "length": 19},
            "noted": 11,
        }
        # The listing came from a saved document: the run's first call opened the one connection.
        assert stdio_server.connections == 2
        received = calls(effects)
        assert [call["tool"] for call in received] == ["lookup", "set_value", "send_message", "append_note"]
        classes = [effect["class"] for effect in result.effects]
        assert classes == ["read_only", "idempotent", "irreversible", "irreversible"]
        # The idempotent call carried the step's idempotency key in its _meta.
        idempotent = result.effects[1]
        assert received[1]["key"] == idempotent["idempotency_key"] and received[1]["key"].startswith("tlk-")

        stdio_server.close()  # the server process ends
        report = runtime.replay(result.run_id, agent)
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == result.fingerprint
        assert stdio_server.connections == 2  # replay opened nothing
    # A fresh process's view: tools built from the saved listing, a server that cannot start.
    saved = json.loads(json.dumps(listing))
    nowhere = stopped()
    with _runtime(tmp_path / "store", mcp_toolkit(nowhere, listing=saved, prefix="t.")) as runtime:
        report = runtime.replay(result.run_id, agent)
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == result.fingerprint
        assert runtime.retrieve(result.run_id).output == result.output
    assert nowhere.connections == 0
    assert len(calls(effects)) == 4  # no tool ran again


def test_changed_argument_diverges_naming_the_field(tmp_path: Path, stdio_server: McpServer, effects: Path) -> None:
    with _runtime(tmp_path / "store", mcp_toolkit(stdio_server, prefix="t.")) as runtime:
        result = runtime.run(agent, INPUT)
        assert result.ok, result.error
    listing = saved_listing(stdio_server)
    nowhere = stopped()
    with _runtime(tmp_path / "store", mcp_toolkit(nowhere, listing=listing, prefix="t.")) as runtime:
        report = runtime.replay(result.run_id, changed_agent)
    assert not report.matched
    divergence = report.divergence
    assert divergence is not None
    assert divergence["step"] == 2 and divergence["requested"]["name"] == "t.send_message"
    assert divergence["fields"] == ["args"]
    assert [change["path"] for change in divergence["diff"]] == ["/args/text"]
    assert nowhere.connections == 0
    assert len(calls(effects)) == 4


def test_streamable_http_record_then_replay_with_server_stopped(
    tmp_path: Path, http_tool_server: HttpToolServer, effects: Path
) -> None:
    server = McpServer.http(http_tool_server.url, name="tools")
    listing = server.list_tools()
    toolkit = mcp_toolkit(server, listing=listing, prefix="t.")
    with _runtime(tmp_path / "store", toolkit) as runtime:
        result = runtime.run(agent, INPUT)
        assert result.ok, result.error
        assert result.output["sent"] == {"sent": True, "to": "ada", "length": 19}
        assert len(calls(effects)) == 4
        server.close()
        http_tool_server.stop()  # nothing listens on the port any more
        report = runtime.replay(result.run_id, agent)
        assert report.matched, report.divergence
        assert report.replayed_fingerprint == result.fingerprint
        diverged = runtime.replay(result.run_id, changed_agent)
        assert not diverged.matched
        assert diverged.divergence is not None and diverged.divergence["fields"] == ["args"]
    assert server.connections == 1
    assert len(calls(effects)) == 4
    # The server is gone: listing its tools now is a typed error.
    with pytest.raises(McpConnectError) as caught:
        McpServer.http(http_tool_server.url).list_tools()
    assert caught.value.code == "MCP_CONNECT_FAILED"


# -- what never reaches the server -----------------------------------------------------
def _one_call(tool: str, **args: Any) -> Any:
    def single(ctx: Any, input: Any) -> Any:
        return ctx.call(tool, **args)

    return single


def test_bad_arguments_are_a_validation_error_and_the_server_is_never_called(
    tmp_path: Path, stdio_server: McpServer, effects: Path
) -> None:
    listing = saved_listing(stdio_server)
    assert stdio_server.connections == 1
    with _runtime(tmp_path / "store", mcp_toolkit(stdio_server, listing=listing, prefix="t.")) as runtime:
        wrong_type = runtime.run(_one_call("t.lookup", key=5), None)
        missing = runtime.run(_one_call("t.send_message", to="ada"), None)
    for result in (wrong_type, missing):
        assert (result.outcome, result.code) == ("VALIDATION_ERROR", "ARGS_SCHEMA_MISMATCH")
    assert stdio_server.connections == 1  # no connection was opened for either run
    assert calls(effects) == []


def test_policy_denial_never_reaches_the_server(tmp_path: Path, stdio_server: McpServer, effects: Path) -> None:
    listing = saved_listing(stdio_server)
    policy = {"version": 1, "tools": [{"name": "t.lookup"}, {"name": "t.send_message", "allow": False}]}
    with _runtime(tmp_path / "store", mcp_toolkit(stdio_server, listing=listing, prefix="t."), policy) as runtime:
        unlisted = runtime.run(_one_call("t.append_note", text="x"), None)
        denied = runtime.run(_one_call("t.send_message", to="ada", text="hi"), None)
    assert (unlisted.outcome, unlisted.code) == ("DENIED", "POLICY_TOOL_NOT_ALLOWED")
    assert (denied.outcome, denied.code) == ("DENIED", "POLICY_TOOL_DENIED")
    assert stdio_server.connections == 1
    assert calls(effects) == []


# -- failures ---------------------------------------------------------------------------
def test_a_tool_error_is_an_execution_error_replayed_without_the_server(
    tmp_path: Path, stdio_server: McpServer, effects: Path
) -> None:
    def caught(ctx: Any, input: Any) -> Any:
        try:
            ctx.call("t.fail", reason="no budget")
        except StepError as exc:
            return {"outcome": exc.outcome.value, "code": exc.step_code, "message": str(exc)}
        return None

    listing = saved_listing(stdio_server)
    with _runtime(tmp_path / "store", mcp_toolkit(stdio_server, listing=listing, prefix="t.")) as runtime:
        result = runtime.run(_one_call("t.fail", reason="no budget"), None)
        assert (result.outcome, result.code) == ("EXECUTION_ERROR", "MCP_TOOL_ERROR")
        effect = result.effects[0]
        assert "refused: no budget" in effect["error"]["message"]
        handled = runtime.run(caught, None)
        assert handled.ok
        assert handled.output["code"] == "MCP_TOOL_ERROR"
        stdio_server.close()
    with _runtime(tmp_path / "store", mcp_toolkit(stopped(), listing=listing, prefix="t.")) as runtime:
        report = runtime.replay(handled.run_id, caught)
        assert report.matched, report.divergence
    assert len(calls(effects)) == 2


def test_an_unreachable_server_is_a_typed_error(tmp_path: Path, stdio_server: McpServer) -> None:
    listing = saved_listing(stdio_server)
    nowhere = stopped("nowhere")
    with pytest.raises(McpConnectError) as caught:
        nowhere.list_tools()
    assert caught.value.code == "MCP_CONNECT_FAILED" and "nowhere" in caught.value.message
    with _runtime(tmp_path / "store", mcp_toolkit(nowhere, listing=listing, prefix="t.")) as runtime:
        result = runtime.run(_one_call("t.lookup", key="greeting"), None)
    assert (result.outcome, result.code) == ("EXECUTION_ERROR", "MCP_UNREACHABLE")


def test_a_call_past_its_timeout_is_a_tool_timeout(tmp_path: Path, stdio_server: McpServer, effects: Path) -> None:
    toolkit = mcp_toolkit(stdio_server, prefix="t.", only=["slow", "lookup"], timeout=0.5)
    assert toolkit.tools["t.slow"].timeout_ms == 500
    with _runtime(tmp_path / "store", toolkit) as runtime:
        late = runtime.run(_one_call("t.slow", seconds=30), None)
        assert (late.outcome, late.code) == ("EXECUTION_ERROR", "TOOL_TIMEOUT")
        # The connection survives the cancelled call.
        after = runtime.run(_one_call("t.lookup", key="greeting"), None)
        assert after.ok, after.error
    assert stdio_server.connections == 1
    assert [call["tool"] for call in calls(effects)] == ["slow", "lookup"]


def test_an_async_agent_calls_mcp_tools(tmp_path: Path, stdio_server: McpServer, effects: Path) -> None:
    async def async_agent(ctx: Any, input: Any) -> Any:
        found = await ctx.call("t.lookup", key="greeting")
        return found["content"][0]["text"]

    with _runtime(tmp_path / "store", mcp_toolkit(stdio_server, prefix="t.")) as runtime:
        result = runtime.run(async_agent, None)
        assert result.ok, result.error
        assert result.output == "hello"
        stdio_server.close()
        assert runtime.replay(result.run_id, async_agent).matched
    assert [call["tool"] for call in calls(effects)] == ["lookup"]


def test_gathered_calls_share_the_connection(tmp_path: Path, stdio_server: McpServer, effects: Path) -> None:
    def gathering(ctx: Any, input: Any) -> Any:
        answers = ctx.gather(*(ctx.task("t.lookup", key=key) for key in ("greeting", "a", "b")))
        return [answer["structuredContent"]["result"] for answer in answers]

    with _runtime(tmp_path / "store", mcp_toolkit(stdio_server, prefix="t.")) as runtime:
        result = runtime.run(gathering, None)
        assert result.ok, result.error
        assert result.output == ["hello", "", ""]
        stdio_server.close()
        assert runtime.replay(result.run_id, gathering).matched
    assert stdio_server.connections == 1
    assert sorted(call["args"]["key"] for call in calls(effects)) == ["a", "b", "greeting"]


def test_idempotency_meta_key_is_documented_constant() -> None:
    assert IDEMPOTENCY_META == "tracelock/idempotency-key"


# -- the extra ----------------------------------------------------------------------------
def test_missing_extra_names_tracelock_mcp(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.modules['mcp'] = None  # as if the package were not installed\n"
        "from tracelock.integrations.mcp import McpServer, McpNotInstalledError\n"
        "try:\n"
        "    McpServer.stdio('anything').list_tools()\n"
        "except McpNotInstalledError as exc:\n"
        "    print(exc.code, exc.message)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MCP_NOT_INSTALLED ")
    assert "pip install 'tracelock[mcp]'" in done.stdout


# -- recovery -----------------------------------------------------------------------------
def test_recovery_never_repeats_an_irreversible_mcp_call(tmp_path: Path, effects: Path) -> None:
    """The agent's process dies while the irreversible call is in flight (the server kills
    it after doing the effect): the intent is journaled, the result is not. Recovery must
    leave the run blocked for a human, and the server sees the call once."""
    store = tmp_path / "store"
    child = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_crash_child.py")), str(store), str(effects)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == -9, (child.returncode, child.stdout, child.stderr)
    assert [call["tool"] for call in calls(effects)] == ["lookup", "send_then_crash_client"]
    with _runtime(store, mcp_toolkit(stopped(), listing=LISTING_OF_CRASH_TOOLS, prefix="t."), _crash_child.POLICY_DOC) as runtime:
        runtime.use(_crash_child.AGENTS)
        report = runtime.recover()
        record = runtime.retrieve(_crash_child.RUN_ID)
    assert [run["to"] for run in report.runs] == ["blocked"], report.to_dict()
    assert record.status == "blocked"
    assert record.waiting_step == 1
    assert [call["tool"] for call in calls(effects)] == ["lookup", "send_then_crash_client"]


#: What the crash tools' listing says (only the names and schemas matter to recovery).
LISTING_OF_CRASH_TOOLS = [
    {"name": "lookup", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "send_then_crash_client", "inputSchema": {"type": "object"}},
]
