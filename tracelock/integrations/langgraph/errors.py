"""Errors of the LangGraph / LangChain adapter (codes documented in ``docs/errors.md``)."""

from __future__ import annotations

from typing import ClassVar

from tracelock.errors import RuntimeFault

__all__ = ["LangGraphNotInstalledError", "LangGraphOutsideRunError"]


class LangGraphNotInstalledError(RuntimeFault):
    """A library the adapter wraps is not installed; the message names the extra to install
    (``pip install 'tracelock[langgraph]'``, or ``[openai]`` for :func:`openai_clients`)."""

    code: ClassVar[str] = "LANGGRAPH_NOT_INSTALLED"


class LangGraphOutsideRunError(RuntimeFault):
    """A tool call reached the tracelock hook of a ``ToolNode`` while no run was current:
    the graph was invoked outside an agent that a tracelock runtime drives."""

    code: ClassVar[str] = "LANGGRAPH_OUTSIDE_RUN"


def missing(extra: str, module: str | None) -> LangGraphNotInstalledError:
    """The error for ``module`` missing, naming the extra that installs it."""
    return LangGraphNotInstalledError(
        f"the LangGraph adapter needs {module or 'a library'} (not installed): pip install 'tracelock[{extra}]'",
        details={"extra": extra, "module": module},
    )
