"""Captured clients for LangChain's OpenAI chat model.

``ChatOpenAI(model=..., **openai_clients())`` sends through the official ``openai`` SDK over
``httpx2`` clients whose transports capture (``tracelock.integrations.http.capture``): every
model call of a graph is an ``llm`` step of the run. Nothing here is LangChain-specific but
the two parameter names, which ``langchain_openai.ChatOpenAI`` (and ``AzureChatOpenAI``)
take.
"""

from __future__ import annotations

from typing import Any

from tracelock.integrations.http import capture
from tracelock.integrations.langgraph.errors import missing

__all__ = ["openai_clients"]


def openai_clients(**options: Any) -> dict[str, Any]:
    """``{"http_client": ..., "http_async_client": ...}``: the ``openai`` SDK's default
    clients, both captured (``options`` are :func:`~tracelock.integrations.http.capture`'s:
    ``pass_through``, ``secret_headers``, ``ignore_headers``)."""
    try:
        import openai
    except ImportError as exc:
        raise missing("openai", exc.name) from None
    return {
        "http_client": capture(openai.DefaultHttpx2Client(), **options),
        "http_async_client": capture(openai.DefaultAsyncHttpx2Client(), **options),
    }
