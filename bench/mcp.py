"""Per-call overhead of an MCP tool called through tracelock, against the raw MCP client
call, on the same stdio server (``examples/mcp_tools/server.py``), side by side in one run.

Each call is timed on its own; the four ways take turns over a few rounds (the machine's
noise falls on all of them alike), and the figure is the median (p50) per call:

- ``raw``: ``await client.call_tool(...)`` on an ``mcp.Client`` in the caller's own event
  loop (what an async program does without tracelock);
- ``bridge``: the same call made synchronously through the adapter's event-loop thread
  (``McpServer.call``), outside any run: the cost of serving sync agents;
- ``tracelock``: ``ctx.call`` inside a recorded run: the step pipeline, the policy, the
  journal (a read-only tool: its result is journaled; an idempotent one: its intent is made
  durable before the call);
- ``replay``: the recorded run replayed from the journal (no server call at all).

Run with ``python -m bench.mcp [--quick] [--json]``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from bench.cli import bench_main
from bench.stats import summary_us
from tracelock.integrations.mcp import McpServer, mcp_toolkit
from tracelock.runtime.runtime import Runtime

SERVER = Path(__file__).resolve().parents[1] / "examples" / "mcp_tools" / "server.py"
POLICY = {"version": 1, "tools": [{"name": "notes.search_notes"}, {"name": "notes.tag_note"}]}
CALLS = {
    "read_only": ("search_notes", {"query": "invoice"}),
    "idempotent": ("tag_note", {"note_id": "n1", "tag": "billing"}),
}


def _raw(calls: int, outbox: Path) -> dict[str, list[float]]:
    async def main() -> dict[str, list[float]]:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], env={"NOTES_OUTBOX": str(outbox)})
        samples: dict[str, list[float]] = {kind: [] for kind in CALLS}
        async with Client(params) as client:
            for kind, (tool, args) in CALLS.items():
                await client.call_tool(tool, args)  # warm
                for _ in range(calls):
                    start = time.perf_counter()
                    await client.call_tool(tool, args)
                    samples[kind].append(time.perf_counter() - start)
        return samples

    return asyncio.run(main())


def _bridge(server: McpServer, calls: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {kind: [] for kind in CALLS}
    for kind, (tool, args) in CALLS.items():
        server.call(tool, args)  # warm
        for _ in range(calls):
            start = time.perf_counter()
            server.call(tool, args)
            samples[kind].append(time.perf_counter() - start)
    return samples


def _traced(server: McpServer, calls: int, store: Path) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    toolkit = mcp_toolkit(server, prefix="notes.")
    samples: dict[str, list[float]] = {kind: [] for kind in CALLS}

    def agent(ctx: Any, kind: str) -> int:
        tool, args = CALLS[kind]
        for _ in range(calls):
            start = time.perf_counter()
            ctx.call("notes." + tool, **args)
            samples[kind].append(time.perf_counter() - start)
        return calls

    recorded: dict[str, list[float]] = {}
    replayed: dict[str, list[float]] = {}
    with Runtime(store, POLICY, toolkits=(toolkit,)) as runtime:
        runtime.run(agent, "read_only")  # warm: the connection, the store
        for kind in CALLS:
            samples[kind] = []
            result = runtime.run(agent, kind)
            assert result.ok, result.error
            recorded[kind] = samples[kind]
            samples[kind] = []
            report = runtime.replay(result.run_id, agent)
            assert report.matched, report.divergence
            replayed[kind] = samples[kind]
    return recorded, replayed


def _extend(into: dict[str, list[float]], samples: dict[str, list[float]]) -> None:
    for kind, values in samples.items():
        into.setdefault(kind, []).extend(values)


def run(quick: bool) -> dict[str, Any]:
    calls, rounds = (100, 3) if quick else (300, 5)
    figures: dict[str, Any] = {"mode": "quick" if quick else "full", "calls_per_round": calls, "rounds": rounds}
    raw: dict[str, list[float]] = {}
    bridge: dict[str, list[float]] = {}
    recorded: dict[str, list[float]] = {}
    replayed: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        outbox = Path(tmp) / "outbox.txt"
        with McpServer.stdio(sys.executable, [str(SERVER)], env={"NOTES_OUTBOX": str(outbox)}, name="notes") as server:
            for _ in range(rounds):
                _extend(raw, _raw(calls, outbox))
                _extend(bridge, _bridge(server, calls))
                live, again = _traced(server, calls, Path(tmp) / "store")
                _extend(recorded, live)
                _extend(replayed, again)
    print(f"one MCP tool call over stdio ({figures['mode']}: {rounds} rounds of {calls} calls each, p50 per call)")
    print(f"  {'':12} {'raw client':>12} {'sync bridge':>12} {'tracelock':>12} {'overhead':>10} {'replay':>10}")
    for kind in CALLS:
        row = {
            "raw": summary_us(raw[kind]),
            "bridge": summary_us(bridge[kind]),
            "tracelock": summary_us(recorded[kind]),
            "replay": summary_us(replayed[kind]),
        }
        overhead = row["tracelock"]["p50_us"] - row["raw"]["p50_us"]
        row["overhead_p50_us"] = round(overhead, 1)
        row["overhead_p50_pct"] = round(100 * overhead / row["raw"]["p50_us"], 1)
        figures[kind] = row
        print(
            f"  {kind:12} {row['raw']['p50_us']:10.1f}us {row['bridge']['p50_us']:10.1f}us "
            f"{row['tracelock']['p50_us']:10.1f}us {overhead:+8.1f}us {row['replay']['p50_us']:8.1f}us"
        )
    return figures


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
