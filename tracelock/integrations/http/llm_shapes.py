"""Recognising LLM API calls among HTTP requests, and reading their answers.

A ``POST`` whose path ends in ``/chat/completions`` (OpenAI chat completions), ``/responses``
(OpenAI responses) or ``/messages`` (Anthropic messages), with a JSON object body naming a
``model``, is an LLM call: its step is of kind ``llm``, named after the API. The answer's
text and usage are read from the JSON body, or from the server-sent events of a stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tracelock.core.canonical import CanonicalError, loads

__all__ = ["recognise", "max_tokens_of", "answer_of", "sse_events"]

_APIS = (
    ("/chat/completions", "openai.chat.completions"),
    ("/responses", "openai.responses"),
    ("/messages", "anthropic.messages"),
)
_MAX_TOKENS = {
    "openai.chat.completions": ("max_completion_tokens", "max_tokens"),
    "openai.responses": ("max_output_tokens",),
    "anthropic.messages": ("max_tokens",),
}


def recognise(method: str, path: str, body: Any) -> str | None:
    """The LLM API a request calls (its step name), or None when it is plain HTTP."""
    if method != "POST" or not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return None
    for suffix, api in _APIS:
        if path.endswith(suffix):
            return api
    return None


def max_tokens_of(api: str, body: dict[str, Any]) -> int | None:
    """The cap on output tokens the request sets, or None."""
    for key in _MAX_TOKENS[api]:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def sse_events(text: str) -> list[Any]:
    """The JSON ``data:`` payloads of a server-sent-event text, in order (``[DONE]`` and
    payloads that are not JSON are skipped)."""
    events: list[Any] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:"))
        if not data or data == "[DONE]":
            continue
        try:
            events.append(loads(data))
        except CanonicalError:
            continue
    return events


def answer_of(api: str, body: Any, events: Iterable[Any] | None) -> dict[str, Any]:
    """``{"content": str, "usage": dict | None, "model": str | None}`` of an answer, from its
    JSON ``body`` or its stream's ``events``."""
    if events is not None:
        return _streamed(api, list(events))
    content = ""
    usage = body.get("usage") if isinstance(body, dict) else None
    model = body.get("model") if isinstance(body, dict) else None
    if isinstance(body, dict):
        if api == "openai.chat.completions":
            choices = body.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                message = choices[0].get("message")
                if isinstance(message, dict) and isinstance(message.get("content"), str):
                    content = message["content"]
        elif api == "openai.responses":
            content = _texts(item.get("content") for item in _dicts(body.get("output")))
        else:
            content = _texts([body.get("content")])
    return {"content": content, "usage": usage if isinstance(usage, dict) else None, "model": model if isinstance(model, str) else None}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _texts(groups: Iterable[Any]) -> str:
    parts = []
    for group in groups:
        for part in _dicts(group):
            if part.get("type") in ("text", "output_text") and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "".join(parts)


def _streamed(api: str, events: list[Any]) -> dict[str, Any]:
    pieces: list[str] = []
    usage: dict[str, Any] | None = None
    model: str | None = None
    for event in _dicts(events):
        kind = event.get("type")
        if api == "openai.chat.completions":
            model = event.get("model") if isinstance(event.get("model"), str) else model
            for choice in _dicts(event.get("choices"))[:1]:
                delta = choice.get("delta")
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    pieces.append(delta["content"])
            if isinstance(event.get("usage"), dict):
                usage = event["usage"]
        elif api == "openai.responses":
            if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
                pieces.append(event["delta"])
            response = event.get("response")
            if kind == "response.completed" and isinstance(response, dict):
                usage = response.get("usage") if isinstance(response.get("usage"), dict) else usage
                model = response.get("model") if isinstance(response.get("model"), str) else model
        else:
            if kind == "message_start" and isinstance(event.get("message"), dict):
                message = event["message"]
                model = message.get("model") if isinstance(message.get("model"), str) else model
                if isinstance(message.get("usage"), dict):
                    usage = dict(message["usage"])
            elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
                text = event["delta"].get("text")
                if isinstance(text, str):
                    pieces.append(text)
            elif kind == "message_delta" and isinstance(event.get("usage"), dict):
                usage = {**(usage or {}), **event["usage"]}
    return {"content": "".join(pieces), "usage": usage, "model": model}
