"""``tracelock mcp``: a store's runs served as MCP tools, read-only (stdio, or streamable HTTP).

An assistant connected to it can list runs, read one (its steps, outcome and fingerprint),
get a run's stored response as ``tracelock retrieve`` gives it, and verify a run or the
whole store. Every tool opens the store **read-only** for the one call and closes it: the
server never writes, and sees runs recorded after it started.

The tools are plain functions over the library (:class:`StoreTools`); the ``mcp`` package
(``tracelock[mcp]``) is imported only when the command serves them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from tracelock.cli.common import json_option, print_json, reports_errors, store_option
from tracelock.cli.describe import Describer
from tracelock.errors import TracelockError, UsageError
from tracelock.evidence.store_verdict import run_verdict, store_verdict
from tracelock.evidence.verify import load_pinned_keys
from tracelock.integrations.mcp.errors import missing_extra
from tracelock.runtime.records import load_run, readable_payload
from tracelock.runtime.runs.engine import result_from_record
from tracelock.storage.backend import Store
from tracelock.storage.open import open_store

__all__ = ["COMMANDS", "StoreTools", "mcp_command"]

#: Most runs ``list_runs`` returns in one answer.
MAX_RUNS = 1000

#: Every tool reads only: MCP annotations that say so to the client.
READ_ONLY_HINTS: dict[str, Any] = {
    "read_only_hint": True,
    "destructive_hint": False,
    "idempotent_hint": True,
    "open_world_hint": False,
}


class StoreTools:
    """The tools ``tracelock mcp`` serves, as functions returning JSON documents.

    Each call opens the store at ``location`` read-only and closes it before returning."""

    def __init__(self, location: str | Path) -> None:
        self.location = location

    @contextmanager
    def _store(self) -> Iterator[Store]:
        with open_store(self.location, create=False, read_only=True) as store:
            yield store

    def list_runs(self, status: str | None = None, agent: str | None = None, limit: int = 50) -> dict[str, Any]:
        """Runs, newest first: id, status, agent, parent, start and update times (ms), entry
        count. ``status`` (created, running, awaiting_approval, blocked, completed, failed,
        aborted) and ``agent`` (exact name) filter; ``limit`` caps the answer (at most 1000)."""
        if not 1 <= limit <= MAX_RUNS:
            raise UsageError(f"limit must be 1 to {MAX_RUNS}", details={"limit": limit})
        with self._store() as store:
            runs = store.runs(limit=None if agent is not None else limit, status=status)
        if agent is not None:
            runs = [run for run in runs if run.agent == agent][:limit]
        return {"runs": [run.to_dict() for run in runs], "count": len(runs)}

    def show_run(self, run_id: str, entries: bool = False) -> dict[str, Any]:
        """A run: its index row, status, outcome and code, output, fingerprint, and its steps
        (kind, name, class, arguments, outcome, code, result or error). ``entries`` adds the
        journal's entries one line each, as ``tracelock show`` prints them."""
        with self._store() as store:
            info = store.run_info(run_id)
            record = load_run(store, run_id)
            timeline = _timeline(store, run_id) if entries else None
        run = result_from_record(record)
        result = run.to_dict()
        document: dict[str, Any] = {
            "run": info.to_dict(),
            "status": result["status"],
            "outcome": result["outcome"],
            "code": result["code"],
            "output": result["output"],
            "fingerprint": result["fingerprint"],
            "error": result["error"],
            "steps": [_step(effect) for effect in run.effects],
        }
        if timeline is not None:
            document["entries"] = timeline
        return document

    def retrieve(self, run_id: str) -> dict[str, Any]:
        """A run's stored response, as ``tracelock retrieve`` gives it, from the journal alone:
        no agent code or model runs."""
        with self._store() as store:
            record = load_run(store, run_id)
        return result_from_record(record).to_dict()

    def verify_run(self, run_id: str) -> dict[str, Any]:
        """Recompute every hash and chain link of one run's entries and payloads, then its
        fingerprint from its entries (``fingerprint``), as ``tracelock verify RUN``; ``ok``
        false names the first problem (``issue``) or a fingerprint mismatch."""
        with self._store() as store:
            return run_verdict(store, run_id).document

    def verify_store(self, keys: list[str] | None = None, origin: str | None = None) -> dict[str, Any]:
        """Verify the whole store: every entry and payload, then the signed checkpoints (their
        roots; with ``keys``, pinned public keys as ``tracelock verify --key`` takes them,
        their signatures) and the Merkle node files."""
        pins = load_pinned_keys(keys) if keys else []
        with self._store() as store:
            return store_verdict(store, pins, origin=origin).document

    def functions(self) -> list[Callable[..., dict[str, Any]]]:
        return [self.list_runs, self.show_run, self.retrieve, self.verify_run, self.verify_store]


def _step(effect: dict[str, Any]) -> dict[str, Any]:
    keys = ("step", "kind", "name", "class", "args", "outcome", "code", "phase", "result", "error", "attempts")
    return {key: effect[key] for key in keys if key in effect}


def _timeline(store: Store, run_id: str) -> list[dict[str, Any]]:
    describer = Describer()
    lines = []
    for entry in store.entries(run_id):
        body = readable_payload(store, entry.payload)[1] if entry.payload else None
        lines.append({"i": entry.i, "seq": entry.seq, "ts": entry.ts, "kind": entry.kind, "summary": describer(entry, body)})
    return lines


def build_server(location: str | Path) -> Any:
    """The ``mcp`` SDK's ``MCPServer`` serving :class:`StoreTools` over ``location``.

    A :class:`TracelockError` in a tool (an unknown run, a bad limit) is the tool's error
    result (``isError``), whose text holds ``[CODE] message``."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import ToolAnnotations
    except ImportError as exc:
        raise missing_extra(exc) from None

    server = MCPServer(
        "tracelock",
        instructions="Read-only access to a tracelock store: list runs, show a run's steps, "
        "retrieve a run's stored response, verify a run or the whole store.",
        log_level="WARNING",
    )
    hints = ToolAnnotations(**READ_ONLY_HINTS)
    for function in StoreTools(location).functions():
        server.add_tool(_reporting(function, ToolError), annotations=hints, structured_output=True)
    return server


def _reporting(function: Callable[..., dict[str, Any]], tool_error: type[Exception]) -> Callable[..., dict[str, Any]]:
    """``function`` with tracelock's errors turned into the SDK's tool errors (same
    signature and docstring, which the SDK reads for the tool's schema and description)."""
    import functools

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return function(*args, **kwargs)
        except TracelockError as exc:
            raise tool_error(f"[{exc.code}] {exc.message}") from None

    return call


@click.command("mcp")
@click.option("--http", "port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve streamable HTTP on this loopback port (path /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http: the address to listen on.")
@store_option
@json_option
@reports_errors
def mcp_command(port: int | None, host: str, store_path: Path, as_json: bool) -> None:
    """Serve the store's runs as read-only MCP tools (list_runs, show_run, retrieve,
    verify_run, verify_store) over stdio, or streamable HTTP with --http PORT."""
    location = store_path
    with open_store(location, create=False, read_only=True):
        pass  # a missing or unreadable store is an error now, not at the first call
    server = build_server(location)
    if port is None:
        server.run()
        return
    url = f"http://{host}:{port}/mcp"
    if as_json:
        print_json({"ok": True, "url": url, "store": str(location)})
    else:
        click.echo(f"serving {location} read-only at {url}", err=True)
    sys.stdout.flush()
    server.run("streamable-http", host=host, port=port)


COMMANDS = [mcp_command]
