"""A scripted OpenAI chat-completions server on loopback, for the LangGraph adapter's tests,
example and benchmark: a model that calls tools.

The answer to a request depends only on the request, so a run recorded against it is the
same every time: the server counts the assistant turns with tool calls already in
``messages`` (``n``) and answers with the script's turn ``n`` (a list of ``(name, args)``
tool calls, ids ``call_<n>_<k>``), or, past the script, with the text ``"done: "`` and the
last message's content. Usage is fixed (10 in, 5 out).

    with ReactServer([[("lookup", {"order_id": "A-1"})], [("refund", {"order_id": "A-1"})]]) as server:
        model = ChatOpenAI(model="gpt-test", base_url=server.url + "/v1", api_key="sk-test")
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Sequence
from typing import Any

from tracelock.examples.loopback import LoopbackServer, OwnedHTTPServer

__all__ = ["ReactServer", "Script"]

#: One turn per model call: the tool calls it makes, as ``(name, args)``.
Script = Sequence[Sequence[tuple[str, dict[str, Any]]]]


def _answer(body: dict[str, Any], script: Script) -> dict[str, Any]:
    messages = body.get("messages") or []
    turn = sum(1 for message in messages if message.get("role") == "assistant" and message.get("tool_calls"))
    if turn < len(script):
        calls = [
            {"id": f"call_{turn}_{number}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)}}
            for number, (name, args) in enumerate(script[turn])
        ]
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    else:
        last = messages[-1].get("content") if messages else ""
        message = {"role": "assistant", "content": "done: " + (last if isinstance(last, str) else json.dumps(last))}
        finish = "stop"
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1767225600,
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    server: OwnedHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        owner: ReactServer = self.server.owner
        with owner.lock:
            owner.requests.append(json.loads(raw or b"{}"))
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        payload = json.dumps(_answer(owner.requests[-1], owner.script)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class ReactServer(LoopbackServer):
    """The server on ``127.0.0.1`` (a free port) in a thread, while entered (or between
    :meth:`start` and :meth:`stop`). :attr:`requests` holds every request body received."""

    handler = _Handler
    thread_name = "react-server"

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
