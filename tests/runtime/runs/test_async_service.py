"""An ASGI service that awaits ``runtime.arun`` per request, on a real uvicorn server on
loopback: concurrent requests' runs share its event loop without blocking it, every run is
recorded, replays and verifies; and the example under examples/async_service runs as its
README says."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from tests.runtime.runs import _service_app as service
from tracelock.cli.main import cli

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "async_service"
REQUESTS = 20


def _tracelock(*args: str) -> dict[str, Any]:
    shown = CliRunner().invoke(cli, [*args, "--json"])
    assert shown.exit_code == 0, shown.output
    answer: dict[str, Any] = json.loads(shown.stdout)
    return answer


def test_concurrent_requests_share_the_servers_loop(location: str) -> None:
    probe = service.Probe()
    orders = [f"o-{number}" for number in range(REQUESTS)]
    # Five clients retry at once with their keys: still one run (and one charge) per key.
    bodies = [{"order": order, "key": f"key-{order}"} for order in orders]
    bodies += bodies[:5]

    async def fire(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            posted = await asyncio.gather(*(client.post("/runs", json=body) for body in bodies))
            assert [answer.status_code for answer in posted] == [200] * len(bodies)
            results = [answer.json() for answer in posted]
            fetched = [(await client.get(f"/runs/{result['run_id']}")).json() for result in results]
            return results, fetched

    with service.Served(location, probe) as served:
        results, fetched = asyncio.run(fire(served.url))

    assert [result["outcome"] for result in results] == ["SUCCESS"] * len(bodies), results
    assert [result["output"]["receipt"] for result in results] == [
        f"charged {body['order']} {100 + len(body['order'])}" for body in bodies
    ]
    assert results[REQUESTS:] == results[:5]  # the retries got the first requests' runs
    assert fetched == results  # GET answers from the journal what POST answered
    run_ids = {result["run_id"] for result in results}
    assert len(run_ids) == REQUESTS

    # Every effect awaited 0.3 s, on the server's loop; the heartbeat, on the same loop,
    # went on ticking inside each one. A loop blocked by a run shows as an effect with no
    # tick inside it.
    assert sorted(name for name, _, _ in probe.effects) == sorted(["llm", "lookup", "charge"] * REQUESTS)
    starved = [
        (name, probe.ticks_within(start, end))
        for name, start, end in probe.effects
        if probe.ticks_within(start, end) < 3
    ]
    assert not starved, starved
    # The runs were in flight together: the last charge began before the first one ended.
    charges = [(start, end) for name, start, end in probe.effects if name == "charge"]
    assert max(start for start, _ in charges) < min(end for _, end in charges)

    # Recorded: each run replays against its journal (no model, no tool runs) and matches,
    # and the store's hashes and chains verify.
    with service._runtime(location, service.Probe()) as runtime:
        for run_id in sorted(run_ids):
            report = runtime.replay(run_id, service.checkout)
            assert report.matched, (run_id, report.divergence)
    assert _tracelock("verify", "--store", location)["ok"] is True


def _serve_example(store: Path) -> tuple[subprocess.Popen[str], str]:
    """The example's app under uvicorn, as its README starts it, on a free port."""
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "0"],
        cwd=EXAMPLE, env={**os.environ, "TRACELOCK_STORE": str(store)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert server.stderr is not None
    for line in server.stderr:
        running = re.search(r"Uvicorn running on (http://\S+)", line)
        if running:
            return server, running.group(1)
    server.wait(10)
    raise AssertionError(f"the example did not start (exit {server.returncode})")


def test_the_async_service_example(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server, url = _serve_example(store)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            ticket = {"order": "A-1001", "text": "The kettle arrived broken"}
            first = client.post("/refunds", json=ticket, headers={"Idempotency-Key": "ticket-1"}).json()
            again = client.post("/refunds", json=ticket, headers={"Idempotency-Key": "ticket-1"}).json()
            capped = client.post("/refunds", json={"order": "A-1003", "text": "Broken lid"}).json()
            declined = client.post("/refunds", json={"order": "A-1002", "text": "I used it twice"}).json()
            unknown = client.post("/refunds", json={"order": "B-7", "text": "?"}).json()
            fetched = client.get(f"/runs/{first['run_id']}").json()
            missing = client.get("/runs/run-nothing-here")
    finally:
        server.send_signal(signal.SIGTERM)  # uvicorn shuts down: the lifespan closes the runtime
        _, errors = server.communicate(timeout=60)
    assert server.returncode in (0, -signal.SIGTERM), errors  # uvicorn re-raises the signal once shut down
    assert "Application shutdown complete" in errors

    assert first["outcome"] == "SUCCESS" and first["output"]["refund"] == {"refunded": "A-1001", "amount_cents": 2599}
    assert again == first  # the retry named the same run: one refund
    assert capped["output"] == {"refund": "refused", "code": "POLICY_ARGUMENT_REJECTED"}
    assert declined["output"] == {"refund": "declined", "why": "no: the customer used it"}
    assert (unknown["status"], unknown["code"]) == ("failed", "TOOL_RAISED")
    assert fetched == first
    assert missing.status_code == 404 and "RUN_NOT_FOUND" in missing.json()["error"]

    # What its README says to look at: the replay gate from elsewhere, and verify.
    replayed = _tracelock("replay", "--all", "--path", str(EXAMPLE), "--store", str(store))
    assert (replayed["ok"], replayed["matched"], replayed["diverged"]) == (True, 4, []), replayed
    assert _tracelock("verify", "--store", str(store))["ok"] is True
