"""The sandboxed filesystem as a door: the smallest real door over the step pipeline.

:func:`sandbox_tools` is the toolset a runtime registers for its sandbox (``fs.read``,
``fs.write`` ...): an agent reaches it with ``ctx.call("fs.read", path=...)``.
:class:`Files` is the same toolset as typed methods; each makes the request ``ctx.call``
would make and hands it to the same entry, :meth:`Pipeline.run`, so the step is numbered,
authorized, journaled and replayed exactly as a ``ctx.call`` of it would be (a run may use
either, and replays with the other). ``docs/doors.md`` walks through it.
"""

from __future__ import annotations

from typing import Any

from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.request import tool_request
from tracelock.runtime.policy.sandbox import OPERATIONS, Sandbox
from tracelock.runtime.strict.guard import door
from tracelock.runtime.tools.tools import Tool

__all__ = ["Files", "sandbox_tools"]


def sandbox_tools(sandbox: Sandbox) -> list[Tool]:
    """One tool per sandbox operation, running it in ``sandbox``."""
    tools = []
    for spec in OPERATIONS.values():

        def operation(_name: str = spec.tool_name, **args: Any) -> Any:
            return sandbox.execute(_name, args)

        tools.append(
            Tool(
                name=spec.tool_name,
                func=operation,
                side_effect=spec.side_effect,
                schema=spec.args_schema(),
                timeout_s=None,
                description=spec.description,
            )
        )
    return tools


class Files:
    """``Files(ctx.pipeline)``: the run's sandbox, one step per call. Results are the
    operations' JSON documents; a failed step raises :class:`StepError`."""

    __slots__ = ("_run", "_tools")

    def __init__(self, pipeline: Pipeline) -> None:
        self._run = pipeline.run
        self._tools = pipeline.env.tools

    def _step(self, tool: str, args: dict[str, Any]) -> Any:
        return self._run(tool_request(self._tools, tool, args))

    @door
    def read(self, path: str) -> Any:
        return self._step("fs.read", {"path": path})

    @door
    def write(self, path: str, content: str) -> Any:
        return self._step("fs.write", {"path": path, "content": content})

    @door
    def delete(self, path: str) -> Any:
        return self._step("fs.delete", {"path": path})

    @door
    def rename(self, source: str, destination: str) -> Any:
        return self._step("fs.rename", {"source": source, "destination": destination})

    @door
    def list(self, path: str | None = None) -> Any:
        # No path is no argument, as in ``ctx.call("fs.list")``: the same request.
        return self._step("fs.list", {} if path is None else {"path": path})

    @door
    def mkdir(self, path: str, *, parents: bool | None = None) -> Any:
        return self._step("fs.mkdir", {"path": path} if parents is None else {"path": path, "parents": parents})
