"""Where an MCP server is, and the one connection to it, opened on first use.

The official ``mcp`` SDK is async (anyio). One connection serves every caller (sync agents,
a gather's pool threads, async agents on their own loops), so the adapter owns **one event
loop in a thread of its own** per server: the ``mcp.Client`` is entered, used and left on
that loop, and a tool call submits its coroutine there. :meth:`McpServer.acall` (what the
tools of :mod:`.tools` run) awaits the answer on the caller's loop, which goes on meanwhile;
:meth:`McpServer.call` blocks the calling thread until it comes. The client's anyio task group is entered and left by one
task that holds the connection open, as anyio requires.

Nothing connects until something needs the server: listing its tools, or a step that runs
live. A replay answers every step from the journal, so it never opens a connection, and
needs no running server at all. A connection that breaks (the server stopped) is dropped;
the next live call opens a new one (for stdio, a new server process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TextIO

from tracelock.integrations.mcp.errors import (
    MCP_REQUEST_FAILED,
    MCP_TOOL_ERROR,
    MCP_UNREACHABLE,
    McpConnectError,
    missing_extra,
)
from tracelock.runtime.outcomes import StepFailure

__all__ = ["McpServer", "IDEMPOTENCY_META", "result_document"]

#: The ``_meta`` key under which an idempotent tool's call carries tracelock's idempotency
#: key (stable across re-executions of the same step), for servers that deduplicate.
IDEMPOTENCY_META = "tracelock/idempotency-key"

# JSON-RPC error code the SDK uses when the connection went away (mcp_types.jsonrpc).
_CONNECTION_CLOSED = -32000


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise missing_extra(exc) from None


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def result_document(result: Any) -> dict[str, Any]:
    """The JSON document of a ``CallToolResult``: its ``content`` blocks and, when the
    server sent one, its ``structuredContent``. The result's ``_meta`` (the server's
    identity stamp, progress tokens) is left out: it says who answered, not what."""
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    doc: dict[str, Any] = {"content": dumped.get("content", [])}
    if "structuredContent" in dumped:
        doc["structuredContent"] = dumped["structuredContent"]
    return doc


def _error_text(doc: Mapping[str, Any]) -> str:
    texts = [block.get("text", "") for block in doc.get("content", []) if isinstance(block, dict) and block.get("type") == "text"]
    return " ".join(text for text in texts if text) or "(no text)"


class _LoopThread:
    """An event loop running in a daemon thread of its own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@dataclass
class _Open:
    """One open connection: the client, and the task holding its context open."""

    client: Any
    holder: asyncio.Task[None]
    closing: asyncio.Event
    broken: bool = False


@dataclass(eq=False)
class McpServer:
    """An MCP server to reach over stdio (a command tracelock starts) or streamable HTTP (a
    URL), connected lazily. Build one with :meth:`stdio` or :meth:`http`.

    ``connections`` counts the connections opened so far (a replay opens none)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    connect_timeout: float = 30.0
    errlog: TextIO | None = None
    connections: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _loop: _LoopThread | None = field(default=None, init=False, repr=False)
    _open: _Open | None = field(default=None, init=False, repr=False)

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
        connect_timeout: float = 30.0,
        errlog: TextIO | None = None,
    ) -> McpServer:
        """A server tracelock starts as ``command args...`` and talks to over its stdin and
        stdout (started on first use; ``errlog`` receives its stderr, default ours)."""
        return cls(
            name=name or " ".join((command, *args)), command=command, args=tuple(args), env=env, cwd=cwd,
            connect_timeout=connect_timeout, errlog=errlog,
        )

    @classmethod
    def http(cls, url: str, *, name: str | None = None, connect_timeout: float = 30.0) -> McpServer:
        """A server listening for streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``)."""
        return cls(name=name or url, url=url, connect_timeout=connect_timeout)

    # -- connection --------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._open is not None and not self._open.broken

    def _transport(self) -> Any:
        if self.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.url)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert self.command is not None
        params = StdioServerParameters(
            command=self.command, args=list(self.args), env=dict(self.env) if self.env is not None else None, cwd=self.cwd
        )
        if self.errlog is not None:
            return stdio_client(params, errlog=self.errlog)
        return stdio_client(params)

    async def _connect(self) -> _Open:
        from mcp import Client

        opened: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()
        transport = self._transport()

        async def hold() -> None:
            try:
                async with Client(transport) as client:
                    opened.set_result(client)
                    await closing.wait()
            except BaseException as exc:  # reported through ``opened``, or the calls see it
                if not opened.done():
                    opened.set_exception(exc if isinstance(exc, Exception) else ConnectionError(_describe(exc)))
                if not isinstance(exc, Exception):
                    raise

        holder = asyncio.get_running_loop().create_task(hold())
        try:
            async with asyncio.timeout(self.connect_timeout):
                client = await opened
        except BaseException:
            closing.set()
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            raise
        return _Open(client, holder, closing)

    def _session(self) -> tuple[_LoopThread, _Open]:
        """The open connection, opened now if there is none (or the last one broke)."""
        with self._lock:
            if self._open is not None and not self._open.broken:
                assert self._loop is not None
                return self._loop, self._open
            _require_mcp()
            if self._open is not None:
                self._drop_locked()
            if self._loop is None:
                self._loop = _LoopThread(f"tracelock-mcp {self.name}")
            future = self._loop.submit(self._connect())
            try:
                self._open = future.result()
            except Exception as exc:
                reason = (
                    f"no answer within {self.connect_timeout:g} s" if isinstance(exc, TimeoutError) else _describe(exc)
                )
                raise McpConnectError(
                    f"MCP server {self.name}: cannot connect: {reason}",
                    details={"server": self.name, "exception": type(exc).__name__},
                ) from None
            self.connections += 1
            return self._loop, self._open

    def _drop_locked(self) -> None:
        opened, self._open = self._open, None
        if opened is None or self._loop is None:
            return

        async def leave() -> None:
            opened.closing.set()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(opened.holder, 10)

        with contextlib.suppress(BaseException):
            self._loop.submit(leave()).result()

    def close(self) -> None:
        """Close the connection (for stdio, the server process ends) and the adapter's loop
        thread. The next use opens a new connection."""
        with self._lock:
            self._drop_locked()
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------
    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools as JSON documents (``name``, ``description``, ``inputSchema``,
        ``annotations``...), every page of the listing. Connects if needed; a server that
        cannot be reached raises :class:`McpConnectError`. Save the listing to build the
        same tools later without a connection (:func:`mcp_toolkit` ``listing=``)."""
        loop, opened = self._session()

        async def fetch() -> list[dict[str, Any]]:
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                page = await opened.client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools

        try:
            listing: list[dict[str, Any]] = loop.submit(fetch()).result(timeout=self.connect_timeout)
            return listing
        except Exception as exc:
            self._mark_broken(opened)
            raise McpConnectError(
                f"MCP server {self.name}: listing its tools failed: {_describe(exc)}",
                details={"server": self.name, "exception": type(exc).__name__},
            ) from None

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Call ``tool`` and return its result document (:func:`result_document`).

        Meant to run inside a step's EXECUTE phase: failures end the step with a step code
        (``StepFailure``): ``MCP_TOOL_ERROR`` for an ``isError`` result, ``MCP_REQUEST_FAILED``
        for a protocol error, ``MCP_UNREACHABLE`` when the server cannot be reached or the
        connection broke. Past ``timeout`` seconds the call is cancelled and
        ``TimeoutError`` raised (the step ends ``TOOL_TIMEOUT``)."""
        _require_mcp()
        try:
            loop, opened = self._session()
        except McpConnectError as exc:
            raise StepFailure(MCP_UNREACHABLE, exc.message, server=self.name) from None
        future = loop.submit(self._request(opened, tool, arguments, meta))
        try:
            result = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"MCP tool {tool}") from None
        except Exception as exc:
            raise self._failed(opened, tool, exc) from None
        except BaseException:  # a deadline or an interrupt ends the wait: end the call too
            future.cancel()
            raise
        return self._document(tool, result)

    async def acall(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """:meth:`call` for a coroutine: the request is made on the adapter's loop (the
        connection lives there) and awaited on the caller's, which goes on meanwhile.
        Cancelling the await (a deadline) cancels the request. Only the first call, which
        opens the connection, waits for it in a worker thread."""
        _require_mcp()
        current, running = self._open, self._loop
        if current is not None and not current.broken and running is not None:
            loop, opened = running, current
        else:
            try:
                loop, opened = await asyncio.to_thread(self._session)
            except McpConnectError as exc:
                raise StepFailure(MCP_UNREACHABLE, exc.message, server=self.name) from None
        # The wrapping future cancels the request on the adapter's loop when it is cancelled.
        answer = asyncio.wrap_future(loop.submit(self._request(opened, tool, arguments, meta)))
        try:
            async with asyncio.timeout(timeout):
                result = await answer
        except TimeoutError:  # the request was cancelled at the deadline
            raise TimeoutError(f"MCP tool {tool}") from None
        except Exception as exc:
            raise self._failed(opened, tool, exc) from None
        return self._document(tool, result)

    @staticmethod
    async def _request(opened: _Open, tool: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None) -> Any:
        return await opened.client.call_tool(tool, dict(arguments), meta=dict(meta) if meta is not None else None)

    def _failed(self, opened: _Open, tool: str, exc: Exception) -> StepFailure:
        """The step failure a call that raised ``exc`` ends with."""
        from mcp import MCPError

        if isinstance(exc, MCPError):
            if exc.code == _CONNECTION_CLOSED:
                self._mark_broken(opened)
                return StepFailure(MCP_UNREACHABLE, f"MCP server {self.name}: {exc.message}", server=self.name, tool=tool)
            return StepFailure(
                MCP_REQUEST_FAILED,
                f"MCP server {self.name} refused the call to {tool}: [{exc.code}] {exc.message}",
                server=self.name, tool=tool, error_code=exc.code,
            )
        self._mark_broken(opened)
        return StepFailure(
            MCP_UNREACHABLE, f"MCP server {self.name}: {_describe(exc)}",
            server=self.name, tool=tool, exception=type(exc).__name__,
        )

    def _document(self, tool: str, result: Any) -> dict[str, Any]:
        """The result document of a call's answer, or its ``MCP_TOOL_ERROR``."""
        doc = result_document(result)
        if result.is_error:
            raise StepFailure(
                MCP_TOOL_ERROR, f"MCP tool {tool} failed: {_error_text(doc)}",
                server=self.name, tool=tool, content=doc["content"],
            )
        return doc

    def _mark_broken(self, opened: _Open) -> None:
        with self._lock:
            if self._open is opened:
                opened.broken = True
