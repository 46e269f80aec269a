"""LangGraph graphs and LangChain tools under tracelock (optional extra ``langgraph``).

A graph runs as a tracelock agent with no rewrite: its model calls go through the official
SDKs over captured clients (:func:`openai_clients` for ``ChatOpenAI``), and its tool calls
through the ``ToolNode`` hook (:func:`wrap_tool_call`, :func:`awrap_tool_call`, or
:func:`tool_node`) to the tools :func:`register_langchain_tools` registered, each with a
side-effect class. Every call is a step of the run: checked by the policy, journaled,
answered from the journal on replay. See ``docs/integrations.md``. LangChain and LangGraph
are imported only when one of these is used.
"""

from tracelock.integrations.langgraph.errors import (
    LangGraphNotInstalledError,
    LangGraphOutsideRunError,
)
from tracelock.integrations.langgraph.hook import (
    ToolCallDoor,
    awrap_tool_call,
    tool_node,
    wrap_tool_call,
)
from tracelock.integrations.langgraph.models import openai_clients
from tracelock.integrations.langgraph.state import message_json, state_json
from tracelock.integrations.langgraph.tools import (
    DEFAULT_SIDE_EFFECT,
    register_langchain_tools,
    tools_from_langchain,
)

__all__ = [
    "DEFAULT_SIDE_EFFECT",
    "LangGraphNotInstalledError",
    "LangGraphOutsideRunError",
    "ToolCallDoor",
    "awrap_tool_call",
    "message_json",
    "openai_clients",
    "register_langchain_tools",
    "state_json",
    "tool_node",
    "tools_from_langchain",
    "wrap_tool_call",
]
