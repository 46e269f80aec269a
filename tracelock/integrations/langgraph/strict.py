"""What strict mode lets LangGraph and LangChain do inside a run.

Their own machinery makes ids (run ids, message ids ``add_messages`` gives, checkpoint ids),
reads the clock (timings, checkpoint timestamps), the environment (LangSmith settings) and
randomness (retry jitter), and runs a graph's nodes and a ``ToolNode``'s calls on executor
threads or tasks. None of it reaches a recorded request: model calls are matched on what
the captured client sends, and tool calls on the name and arguments the hook hands the
pipeline, in the order the hook fixes (see :mod:`.hook`). So strict mode lets those calls
through when these libraries make them (not when the agent's own code does). Network access
is not among them: a LangSmith upload, or a model client that does not capture, is still
refused (``TL-NET-001``).
"""

from __future__ import annotations

from tracelock.runtime.strict.guard import allow_library

__all__ = ["LIBRARIES", "RULES", "allow"]

LIBRARIES = ("langgraph", "langchain_core", "langchain_openai", "langchain", "langsmith")
RULES = ("TL-UUID-", "TL-RAND-", "TL-CLOCK-", "TL-ENV-", "TL-CONC-")


def allow() -> None:
    """Register the libraries with strict mode (idempotent)."""
    for package in LIBRARIES:
        allow_library(package, RULES)
