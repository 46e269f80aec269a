"""A small LLM API server on loopback, for the HTTP capture's tests, example and benchmark.

It speaks enough of three wire formats for the official SDKs to work unmodified: OpenAI
chat completions (``POST /v1/chat/completions``) and responses (``POST /v1/responses``), and
Anthropic messages (``POST /v1/messages``), each as JSON or, with ``"stream": true``, as
server-sent events; ``POST /plain/events`` with ``{"n": N}`` streams ``data: 0`` to
``data: N-1``. The answer is ``"echo: "`` and the last user text; usage counts words.
Two switches make failures on purpose: :meth:`LLMServer.fail_next` answers the next requests
with the given statuses (a 429 says ``retry-after-ms: 1``), and the model ``"cut"`` makes a
stream stop after two events without finishing. :meth:`LLMServer.hold_streams` makes every
stream pause after its first event until the returned event is set (or a bounded wait ends),
so a test can see whether the first event reached the client before the server sent the rest.

    with LLMServer() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test")
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

from tracelock.examples.loopback import LoopbackServer, OwnedHTTPServer

__all__ = ["LLMServer"]


def _last_text(body: dict[str, Any]) -> str:
    if isinstance(body.get("input"), str):
        return str(body["input"])
    messages = body.get("messages") or body.get("input") or []
    for message in reversed(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [part.get("text", "") for part in content if isinstance(part, dict)]
            return "".join(str(text) for text in texts)
    return ""


def _sse(event: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return (head + "data: " + json.dumps(event) + "\n\n").encode()


def _chat(model: str, text: str, usage: dict[str, int], stream: bool, include_usage: bool) -> tuple[Any, list[bytes]]:
    if not stream:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1767225600,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": usage["in"],
                "completion_tokens": usage["out"],
                "total_tokens": usage["in"] + usage["out"],
            },
        }, []
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1767225600, "model": model}
    events = [_sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    for word in text.split(" "):
        events.append(_sse({**base, "choices": [{"index": 0, "delta": {"content": word + " "}}]}))
    events.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if include_usage:
        events.append(_sse({**base, "choices": [], "usage": {
            "prompt_tokens": usage["in"], "completion_tokens": usage["out"], "total_tokens": usage["in"] + usage["out"]}}))
    events.append(b"data: [DONE]\n\n")
    return None, events


def _responses(model: str, text: str, usage: dict[str, int], stream: bool) -> tuple[Any, list[bytes]]:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1767225600,
        "model": model,
        "status": "completed",
        "output": [{
            "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }],
        "usage": {"input_tokens": usage["in"], "output_tokens": usage["out"], "total_tokens": usage["in"] + usage["out"],
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }
    if not stream:
        return response, []
    events = [_sse({"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress", "output": []}}, "response.created")]
    for number, word in enumerate(text.split(" ")):
        events.append(_sse({"type": "response.output_text.delta", "sequence_number": number + 1, "item_id": "msg_1",
                            "output_index": 0, "content_index": 0, "delta": word + " ", "logprobs": []}, "response.output_text.delta"))
    events.append(_sse({"type": "response.completed", "sequence_number": 99, "response": response}, "response.completed"))
    return None, events


def _messages(model: str, text: str, usage: dict[str, int], stream: bool) -> tuple[Any, list[bytes]]:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": usage["in"], "output_tokens": usage["out"]},
    }
    if not stream:
        return message, []
    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": usage["in"], "output_tokens": 1}}
    events = [
        _sse({"type": "message_start", "message": start}, "message_start"),
        _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
    ]
    for word in text.split(" "):
        events.append(_sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word + " "}}, "content_block_delta"))
    events += [
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
              "usage": {"output_tokens": usage["out"]}}, "message_delta"),
        _sse({"type": "message_stop"}, "message_stop"),
    ]
    return None, events


class _Handler(http.server.BaseHTTPRequestHandler):
    server: OwnedHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        owner: LLMServer = self.server.owner
        with owner.lock:
            owner.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": raw})
            status = owner.failures.pop(0) if owner.failures else 200
        if status != 200:
            payload = json.dumps({"error": {"type": "rate_limit_error" if status == 429 else "api_error", "message": f"status {status}"}}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.send_header("retry-after-ms", "1")
            self.end_headers()
            self.wfile.write(payload)
            return
        body = json.loads(raw or b"{}")
        model = str(body.get("model", ""))
        text = "echo: " + _last_text(body)
        usage = {"in": len(_last_text(body).split()) + 3, "out": len(text.split())}
        stream = bool(body.get("stream"))
        if self.path.startswith("/plain/events"):
            count = int(body.get("n", 3)) if isinstance(body, dict) else 3
            document, events = None, [f"data: {number}\n\n".encode() for number in range(count)]
            stream = True
        elif self.path.endswith("/chat/completions"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            document, events = _chat(model, text, usage, stream, include)
        elif self.path.endswith("/responses"):
            document, events = _responses(model, text, usage, stream)
        elif self.path.endswith("/messages"):
            document, events = _messages(model, text, usage, stream)
        else:
            self.send_error(404)
            return
        if not stream:
            payload = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.send_header("x-request-id", "req_1")
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        if model == "cut":
            # A body that promises more than it sends: the client sees it end too early.
            self.send_header("content-length", str(len(b"".join(events))))
            self.end_headers()
            self.wfile.write(events[0] + events[1][:5])
            self.wfile.flush()
            self.close_connection = True
            return
        self.end_headers()
        for number, event in enumerate(events):
            self.wfile.write(event)
            self.wfile.flush()
            hold = owner.hold
            if number == 0 and hold is not None:
                released = hold.wait(owner.hold_timeout)
                with owner.lock:
                    owner.held.append(released)


class LLMServer(LoopbackServer):
    """The server, listening on ``127.0.0.1`` (port ``port``, or a free one) in a thread
    while entered (or between :meth:`start` and :meth:`stop`)."""

    handler = _Handler
    thread_name = "llm-server"

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self.lock = threading.Lock()
        #: Every request received: path, headers, raw body.
        self.requests: list[dict[str, Any]] = []
        self.failures: list[int] = []
        self.hold: threading.Event | None = None
        self.hold_timeout = 0.0
        #: Per held stream: whether it was released before the bounded wait ended.
        self.held: list[bool] = []

    def fail_next(self, *statuses: int) -> None:
        """Answer the next ``len(statuses)`` requests with these statuses."""
        with self.lock:
            self.failures.extend(statuses)

    def hold_streams(self, timeout: float = 10.0) -> threading.Event:
        """Make every stream wait after its first event until the returned event is set, at
        most ``timeout`` seconds (then it goes on, and :attr:`held` says it was not
        released)."""
        self.hold_timeout = timeout
        self.hold = threading.Event()
        return self.hold
