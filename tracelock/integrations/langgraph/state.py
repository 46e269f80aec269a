"""A graph's state as the agent's JSON output.

An agent's output is journaled and compared on replay, so it must be canonical JSON and the
same every time the run is replayed. LangGraph's state holds message objects, and its
``add_messages`` reducer gives each message without an id a random one: :func:`state_json`
keeps what the messages say (type, content, tool calls, the tool call a result answers,
a tool message's status and name) and leaves their ids out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["message_json", "state_json"]


def message_json(message: Any) -> dict[str, Any]:
    """One LangChain message as JSON, without its id."""
    document: dict[str, Any] = {"type": message.type, "content": message.content}
    calls = getattr(message, "tool_calls", None)
    if calls:
        document["tool_calls"] = [{"name": call["name"], "args": call["args"], "id": call.get("id")} for call in calls]
    for key in ("tool_call_id", "status", "name"):
        value = getattr(message, key, None)
        if value is not None:
            document[key] = value
    return document


def state_json(state: Any) -> Any:
    """``state`` (a dict, list or pydantic state, as ``graph.invoke`` returns it) with its
    messages as :func:`message_json` documents; other values are left as they are."""
    if hasattr(state, "type") and hasattr(state, "content"):
        return message_json(state)
    if isinstance(state, Mapping):
        return {str(key): state_json(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [state_json(value) for value in state]
    fields = getattr(type(state), "model_fields", None)
    if isinstance(fields, Mapping):  # a pydantic state: field by field, messages included
        return {name: state_json(getattr(state, name)) for name in fields}
    return state
