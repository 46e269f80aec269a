"""A Starlette service whose POST endpoint awaits ``runtime.arun``, served by a real uvicorn
server on loopback, for tests/runtime/runs/test_async_service.py.

What it observes, as it happens, on the server's own event loop: a heartbeat started in the
app's lifespan records a tick every 20 ms, and every effect (the LLM provider, the tools)
records its start and end. A loop blocked during an effect shows as an effect with no ticks
inside it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tracelock import Runtime

POLICY = {
    "version": 1,
    "tools": [{"name": "lookup"}, {"name": "charge"}],
    "llm": {"allow": True, "models": ["m"]},
}
#: How long every effect awaits, and the heartbeat's period (seconds).
EFFECT_S = 0.3
TICK_S = 0.02


class Probe:
    """The heartbeat's ticks and the effects' intervals, in ``time.monotonic()`` seconds."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self.effects: list[tuple[str, float, float]] = []

    def ticks_within(self, start: float, end: float) -> int:
        return sum(1 for tick in self.ticks if start < tick < end)


def _runtime(location: str, probe: Probe) -> Runtime:
    async def llm(request: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.sleep(EFFECT_S)
        probe.effects.append(("llm", started, time.monotonic()))
        return {"content": f"plan for {request['prompt']}", "usage": {"input_tokens": 3, "output_tokens": 4}}

    runtime = Runtime(location, POLICY, llm=llm)

    @runtime.tool(side_effect="read_only")
    async def lookup(order: str) -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.sleep(EFFECT_S)
        probe.effects.append(("lookup", started, time.monotonic()))
        return {"order": order, "cents": 100 + len(order)}

    @runtime.tool(side_effect="irreversible")
    async def charge(order: str, cents: int) -> str:
        started = time.monotonic()
        await asyncio.sleep(EFFECT_S)
        probe.effects.append(("charge", started, time.monotonic()))
        return f"charged {order} {cents}"

    return runtime


async def checkout(ctx: Any, order: str) -> dict[str, Any]:
    plan = await ctx.llm(model="m", prompt=order, max_tokens=16)
    found = await ctx.call("lookup", order=order)
    receipt = await ctx.call("charge", order=order, cents=found["cents"])
    return {"plan": plan["content"], "receipt": receipt}


def build_app(location: str, probe: Probe) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async def beat() -> None:
            while True:
                probe.ticks.append(time.monotonic())
                await asyncio.sleep(TICK_S)

        with _runtime(location, probe) as runtime:
            heartbeat = asyncio.get_running_loop().create_task(beat())
            try:
                yield {"runtime": runtime}
            finally:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat

    async def start(request: Request) -> JSONResponse:
        runtime: Runtime = request.state.runtime
        body = await request.json()
        result = await runtime.arun(checkout, body["order"], idempotency_key=body["key"])
        return JSONResponse(result.to_dict())

    async def show(request: Request) -> JSONResponse:
        runtime: Runtime = request.state.runtime
        return JSONResponse(runtime.retrieve(request.path_params["run_id"]).to_dict())

    return Starlette(
        routes=[Route("/runs", start, methods=["POST"]), Route("/runs/{run_id}", show, methods=["GET"])],
        lifespan=lifespan,
    )


class Served:
    """``build_app`` served by uvicorn on a free loopback port, on a thread of its own
    (its own event loop); ``url`` once entered. Leaving shuts it down (the lifespan closes
    the runtime)."""

    def __init__(self, location: str, probe: Probe) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(build_app(location, probe), log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        started = threading.Event()
        while not self._server.started and self._thread.is_alive():
            started.wait(0.01)
        if not self._server.started:
            raise RuntimeError("the service did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError("the service did not shut down")
