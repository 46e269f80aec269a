"""How fast the web UI answers on a big store: ``python -m bench.ui``.

The store is recorded by the runtime itself (the benchmark workload's 3-effect agent, one
durable run after another: the fastest real way to get runs into a store), once, and kept
under ``build/bench-ui/`` for the next time. The UI is served by uvicorn on a loopback port
in this process and asked over HTTP, as a browser asks it (with the session cookie): the
runs page (first page, a later page, filtered by status, agent, outcome, text), the rows
the page polls, a run page. Each figure is the wall time of whole requests, p50 and p99.
The target: the runs page of a 100,000-run store in under 200 ms.
"""

from __future__ import annotations

import http.client
import time
from pathlib import Path
from typing import Any

from bench.stats import summary_us
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store
from tracelock.web.server import UiThread, build

CACHE = Path(__file__).resolve().parents[1] / "build" / "bench-ui"
TOKEN = "bench-token-0123456789abcdef0123456789"
TARGET_MS = 200
#: Bump when the recorded workload changes (the cached store is then recorded again).
WORKLOAD = "1"


def _plan(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": "look the order up, then note it", "usage": {"input_tokens": 12, "output_tokens": 9}}


kit = Toolkit(llm=_plan)


@kit.tool(side_effect="read_only", timeout=None)
def lookup_order(order: str) -> dict[str, Any]:
    return {"order": order, "status": "shipped"}


@kit.tool(side_effect="idempotent", timeout=None)
def save_note(text: str) -> dict[str, Any]:
    return {"saved": len(text)}


POLICY = {
    "version": 1,
    "tools": [{"name": "lookup_order"}, {"name": "save_note"}],
    "llm": {"allow": True, "models": ["stand-in"]},
}


def triage(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """An LLM call, a look-up and a note: the 3-effect run of the README."""
    plan = ctx.llm(model="stand-in", prompt=task["ask"], max_tokens=64)
    order = ctx.call("lookup_order", order=task["order"])
    note = ctx.call("save_note", text=f"{plan['content']}: {task['order']}")
    return {"order": order, "note": note}


def lookup(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A second agent, so that the agent filter has something to tell apart."""
    return {"order": ctx.call("lookup_order", order=task["order"])}


def _runs_in(store: Path) -> int:
    if not (store / "store.json").exists():
        return 0
    with open_store(store, create=False, read_only=True) as opened:
        return len(opened.runs(limit=None, status=None))


def store_of(runs: int) -> tuple[Path, float | None]:
    """A store of ``runs`` recorded runs (built once, then reused); the seconds it took to
    record, when it was built now."""
    store = CACHE / f"store-{runs}-v{WORKLOAD}"
    if _runs_in(store) == runs:
        return store, None
    if store.exists():
        for path in sorted(store.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        store.rmdir()
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runtime = Runtime(store, POLICY, toolkits=(kit,))
    try:
        for number in range(runs):
            task = {"ask": f"where is order {number}?", "order": f"A-{number}"}
            runtime.run(lookup if number % 4 == 0 else triage, task)
    finally:
        runtime.close()
        runtime.store.close()
    return store, time.perf_counter() - started


def _get(port: int, path: str) -> tuple[int, int]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers={"cookie": f"tracelock_ui={TOKEN}"})
        response = connection.getresponse()
        body = response.read()
        return response.status, len(body)
    finally:
        connection.close()


def _time(port: int, path: str, repeat: int) -> dict[str, Any]:
    status, size = _get(port, path)  # warm up; also checks the page answers
    if status != 200:
        raise RuntimeError(f"{path} answered {status}")
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        _get(port, path)
        samples.append(time.perf_counter() - started)
    return summary_us(samples) | {"bytes": size}


def run(quick: bool) -> dict[str, Any]:
    runs = 10_000 if quick else 100_000
    repeat = 10 if quick else 30
    store, built = store_of(runs)
    with open_store(store, create=False, read_only=True) as opened:
        newest = opened.runs(limit=1)[0].run
        middle = opened.runs(limit=runs // 2)[-1].run
    bound = build(store, TOKEN)
    pages = {
        "runs_first_page": "/",
        "runs_rows_poll": "/rows",
        "runs_page_20": "/?page=20",
        "runs_status_completed": "/?status=completed",
        "runs_agent_filter": "/?agent=lookup",
        "runs_outcome_success": "/?outcome=SUCCESS",
        "runs_text_match_newest": f"/?q={newest}",
        "runs_text_match_middle": f"/?q={middle}",
        "runs_text_no_match": "/?q=no-such-run",
        "run_page": f"/runs/{newest}",
    }
    figures: dict[str, Any] = {"runs": runs, "store_build_s": None if built is None else round(built, 1)}
    with UiThread(bound):
        for name, path in pages.items():
            figures[name] = _time(bound.port, path, repeat)
    first = figures["runs_first_page"]["p50_us"] / 1000
    figures["target_ms"] = TARGET_MS
    figures["runs_first_page_under_target"] = first < TARGET_MS
    _print(figures)
    return figures


def _print(figures: dict[str, Any]) -> None:
    built = figures["store_build_s"]
    print(f"store of {figures['runs']} runs" + (f" (recorded in {built} s)" if built is not None else " (cached)"))
    for name, value in figures.items():
        if isinstance(value, dict):
            print(f"  {name:<24} p50 {value['p50_us'] / 1000:8.1f} ms  p99 {value['p99_us'] / 1000:8.1f} ms  {value['bytes']:>7} B")
    print(f"runs page under {figures['target_ms']} ms: {'yes' if figures['runs_first_page_under_target'] else 'NO'}")


if __name__ == "__main__":
    run(quick=False)
