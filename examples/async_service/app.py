"""An async web service whose requests are recorded agent runs: ``await runtime.arun(...)``
in a Starlette endpoint, with an ``async def`` agent, an async LLM provider and async tools.

    cd examples/async_service
    uvicorn app:app --port 8000                                    # store: ./.tracelock
    curl -s -X POST localhost:8000/refunds -H 'Idempotency-Key: t-1' \\
         -d '{"order": "A-1001", "text": "The kettle arrived broken"}'
    curl -s localhost:8000/runs/RUN_ID

The runs execute on uvicorn's event loop: where a run waits (the model, a tool, a durable
journal append) the loop serves the other requests, and the runs waiting on the journal share
one commit. ``issue_refund`` is irreversible: a run killed in the middle of it is held for an
operator by ``tracelock recover``, never refunded twice; a retried request with the same
``Idempotency-Key`` gets the first request's run, never a second refund. See README.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tracelock import Runtime, StepError, Toolkit, TracelockError

HERE = Path(__file__).parent
#: What the shop knows of its orders: the amount paid, in cents.
ORDERS = {"A-1001": 2599, "A-1002": 1250, "A-1003": 7900}
#: How long the stand-in model and the shop's API take to answer (seconds).
MODEL_LATENCY_S = 0.2
API_LATENCY_S = 0.05


async def stand_in_model(request: dict[str, Any]) -> dict[str, Any]:
    """An async LLM provider: a stand-in for a model's API that takes its time. A real one is
    any ``async def provider(request) -> {"content": ..., "usage": ...}``, e.g. one calling
    ``openai.AsyncOpenAI(...).chat.completions.create``."""
    await asyncio.sleep(MODEL_LATENCY_S)
    prompt = request.get("prompt") or ""
    verdict = "no: the customer used it" if "used" in prompt.lower() else "yes: refund in full"
    return {"content": verdict, "usage": {"input_tokens": len(prompt.split()), "output_tokens": 5}}


kit = Toolkit(llm=stand_in_model)


@kit.tool(side_effect="read_only", timeout=5.0)
async def lookup_order(order_id: str) -> dict[str, Any]:
    await asyncio.sleep(API_LATENCY_S)
    if order_id not in ORDERS:
        raise LookupError(f"no order {order_id}")
    return {"id": order_id, "paid_cents": ORDERS[order_id]}


@kit.tool(side_effect="irreversible", timeout=10.0)
async def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    await asyncio.sleep(API_LATENCY_S)  # the payment provider's API
    return {"refunded": order_id, "amount_cents": amount_cents}


@kit.agent("refunds")
async def refund_agent(ctx: Any, ticket: dict[str, str]) -> dict[str, Any]:
    order = await ctx.call("lookup_order", order_id=ticket["order"])
    answer = await ctx.llm(
        model="stand-in",
        prompt=f"Refund {order['paid_cents']} cents for order {order['id']}? Ticket: {ticket['text']}",
        max_tokens=64,
    )
    if not answer["content"].startswith("yes"):
        return {"refund": "declined", "why": answer["content"]}
    try:
        receipt = await ctx.call("issue_refund", order_id=order["id"], amount_cents=order["paid_cents"])
    except StepError as refused:  # DENIED: the policy caps a refund at 50.00
        return {"refund": "refused", "code": refused.step_code}
    return {"refund": receipt, "at": ctx.now().isoformat()}


def create_app(store: str | os.PathLike[str], policy: str | os.PathLike[str] = HERE / "policy.toml") -> Starlette:
    """The service over ``store`` (a directory or a ``postgresql://`` URL)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        # One runtime for the process: its concurrent runs share each journal commit.
        with Runtime(store, policy, toolkits=(kit,)) as runtime:
            yield {"runtime": runtime}

    async def refund(request: Request) -> JSONResponse:
        runtime: Runtime = request.state.runtime
        ticket = await request.json()
        if not isinstance(ticket, dict) or not isinstance(ticket.get("order"), str):
            return JSONResponse({"error": 'expected {"order": "...", "text": "..."}'}, status_code=400)
        ticket.setdefault("text", "")
        result = await runtime.arun(refund_agent, ticket, idempotency_key=request.headers.get("idempotency-key"))
        return JSONResponse(result.to_dict())

    async def run(request: Request) -> JSONResponse:
        runtime: Runtime = request.state.runtime
        try:
            result = runtime.retrieve(request.path_params["run_id"])  # the journal alone: no agent code
        except TracelockError as exc:
            return JSONResponse({"error": f"[{exc.code}] {exc}"}, status_code=404)
        return JSONResponse(result.to_dict())

    return Starlette(
        routes=[Route("/refunds", refund, methods=["POST"]), Route("/runs/{run_id}", run, methods=["GET"])],
        lifespan=lifespan,
    )


app = create_app(os.environ.get("TRACELOCK_STORE", ".tracelock"))
