"""``tracelock mcp`` as a subprocess, driven by the official MCP client: a store's runs as
read-only tools over stdio and streamable HTTP, and the store's bytes untouched."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_helpers import free_port

from tracelock import Runtime
from tracelock.evidence.history import DEFAULT_KEY_NAME
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.note import NoteVerifier

TRACELOCK = str(Path(sys.executable).with_name("tracelock"))
POLICY = {"version": 1, "tools": [{"name": "greet"}]}


def _record(store: Path) -> dict[str, Any]:
    """Two runs: one that completes, one denied by the policy."""
    with Runtime(store, POLICY) as runtime:

        @runtime.tool(side_effect="read_only")
        def greet(name: str) -> str:
            return "hello " + name

        @runtime.tool(side_effect="irreversible")
        def wire(amount: int) -> str:
            return "sent"

        def polite(ctx: Any, input: Any) -> Any:
            return ctx.call("greet", name=input)

        def greedy(ctx: Any, input: Any) -> Any:
            return ctx.call("wire", amount=input)

        ok = runtime.run(polite, "ada", run_id="run-ok")
        denied = runtime.run(greedy, 100, run_id="run-denied")
        return {"ok": ok, "denied": denied, "retrieved": runtime.retrieve("run-ok").to_dict()}


def _snapshot(store: Path) -> dict[str, tuple[str, int]]:
    """Every file of the store: its content hash and modification time."""
    return {
        str(path.relative_to(store)): (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(store.rglob("*"))
        if path.is_file()
    }


async def _session(client: Client) -> dict[str, Any]:
    """Call every tool once (and one with a bad run id) and return the answers."""
    tools = (await client.list_tools()).tools
    answers: dict[str, Any] = {"tools": {tool.name: tool for tool in tools}}
    for label, tool, arguments in [
        ("list_runs", "list_runs", {}),
        ("list_runs_failed", "list_runs", {"status": "failed"}),
        ("show_run", "show_run", {"run_id": "run-ok", "entries": True}),
        ("retrieve", "retrieve", {"run_id": "run-ok"}),
        ("verify_run", "verify_run", {"run_id": "run-denied"}),
        ("verify_store", "verify_store", {}),
        ("show_missing", "show_run", {"run_id": "no-such-run"}),
        ("list_runs_bad", "list_runs", {"limit": 0}),
    ]:
        answers[label] = await client.call_tool(tool, arguments)
    return answers


def _check(answers: dict[str, Any], recorded: dict[str, Any]) -> None:
    tools = answers["tools"]
    assert sorted(tools) == ["list_runs", "retrieve", "show_run", "verify_run", "verify_store"]
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
    listed = answers["list_runs"].structured_content
    assert {run["run"] for run in listed["runs"]} == {"run-ok", "run-denied"}
    assert [run["run"] for run in answers["list_runs_failed"].structured_content["runs"]] == ["run-denied"]
    shown = answers["show_run"].structured_content
    assert shown["status"] == "completed" and shown["outcome"] == "SUCCESS"
    assert shown["fingerprint"] == recorded["ok"].fingerprint
    assert [(step["name"], step["outcome"]) for step in shown["steps"]] == [("greet", "SUCCESS")]
    assert shown["entries"][0]["kind"] == "run.start"
    assert answers["retrieve"].structured_content == recorded["retrieved"]
    assert answers["verify_run"].structured_content["ok"] is True
    whole = answers["verify_store"].structured_content
    assert whole["ok"] is True and whole["entries"] > 0 and whole["checkpoint"] is not None
    missing = answers["show_missing"]
    assert missing.is_error and "[RUN_NOT_FOUND] no run 'no-such-run'" in missing.content[0].text
    assert answers["list_runs_bad"].is_error and "[USAGE_ERROR]" in answers["list_runs_bad"].content[0].text


def test_serves_a_store_read_only_over_stdio(tmp_path: Path) -> None:
    store = tmp_path / "store"
    recorded = _record(store)

    async def main() -> dict[str, Any]:
        params = StdioServerParameters(command=TRACELOCK, args=["mcp", "--store", str(store)])
        async with Client(params) as client:
            answers = await _session(client)
            # A run recorded while the server runs is seen by the next call: no lock is held.
            with Runtime(store, POLICY) as runtime:
                runtime.run(_late_agent, "x", run_id="run-late")
            answers["after"] = await client.call_tool("list_runs", {"limit": 1})
            return answers

    answers = asyncio.run(main())
    _check(answers, recorded)
    assert [run["run"] for run in answers["after"].structured_content["runs"]] == ["run-late"]


def _late_agent(ctx: Any, input: Any) -> Any:
    return input


def test_serving_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    recorded = _record(store)
    before = _snapshot(store)

    async def main() -> dict[str, Any]:
        params = StdioServerParameters(command=TRACELOCK, args=["mcp", "--store", str(store)])
        async with Client(params) as client:
            return await _session(client)

    _check(asyncio.run(main()), recorded)
    assert _snapshot(store) == before


def test_serves_over_streamable_http(tmp_path: Path) -> None:
    store = tmp_path / "store"
    recorded = _record(store)
    before = _snapshot(store)
    port = free_port()
    server = subprocess.Popen(
        [TRACELOCK, "mcp", "--store", str(store), "--http", str(port), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert '"ok": true' in first or server.poll() is None
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert server.poll() is None, server.communicate()[1]
                assert time.monotonic() < deadline, "tracelock mcp --http did not listen"
                time.sleep(0.05)

        async def main() -> dict[str, Any]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return await _session(client)

        _check(asyncio.run(main()), recorded)
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert _snapshot(store) == before


def test_verify_store_with_a_key_and_no_checkpoint_answers_with_the_code(tmp_path: Path) -> None:
    """A pinned key and no checkpoint: the tool answers (not an error) with the coded issue."""
    store = tmp_path / "store"
    _record(store)
    vkey = NoteVerifier(DEFAULT_KEY_NAME, PrivateKey.from_seed(b"\x05" * 32).public_key).vkey

    async def main() -> Any:
        # The server runs the code under test (the environment names it, as here).
        params = StdioServerParameters(command=TRACELOCK, args=["mcp", "--store", str(store)], env=dict(os.environ))
        async with Client(params) as client:
            return await client.call_tool("verify_store", {"keys": [vkey]})

    answer = asyncio.run(main())
    assert not answer.is_error, answer.content
    document = answer.structured_content
    assert document["ok"] is False and document["issue"]["code"] == "EVIDENCE_CHECKPOINT_NOT_FOUND"
    assert document["checkpoint"]["trust"] == "no_checkpoint"


def test_a_missing_store_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [TRACELOCK, "mcp", "--store", str(tmp_path / "nothing"), "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert '"ok": false' in done.stdout
    assert not (tmp_path / "nothing").exists()


@pytest.mark.parametrize("limit", [0, 1001])
def test_list_runs_limit_is_bounded(tmp_path: Path, limit: int) -> None:
    from tracelock.cli.cmd_mcp import StoreTools
    from tracelock.errors import UsageError

    store = tmp_path / "store"
    _record(store)
    with pytest.raises(UsageError):
        StoreTools(store).list_runs(limit=limit)
    assert len(StoreTools(store).list_runs(limit=1)["runs"]) == 1
