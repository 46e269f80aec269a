"""The agents and tools: the entry points of the scan."""

import logging
import random
import time
from typing import Any

import requests

import agentpkg.sub.deep as deep
from agentpkg import helpers, iso_now, registry
from agentpkg.clients import clock, http, stable_roll
from agentpkg.ordering import fan_out, typed
from agentpkg.registry import rt
from agentpkg.timeutil import elapsed_since

logger = logging.getLogger(__name__)


@rt.agent
def planner(ctx: Any, topic: str) -> dict[str, Any]:
    started = time.time()  # expect: TL-CLOCK-001
    now = ctx.now()
    draw = ctx.random()
    note = helpers.describe(topic)
    stamp = iso_now()
    reading = clock.read()
    logger.debug("planning took %.3f s", elapsed_since(started))
    logger.info("planner at %s", time.time())
    rng = random.Random(42)
    pick = rng.choice(["a", "b"])
    order = fan_out(ctx, ["search", "fetch"])
    return {"now": now, "draw": draw, "note": note, "stamp": stamp, "reading": reading,
            "pick": pick, "order": order, "stable": stable_roll()}


@rt.tool("fetch")
def fetch(url: str) -> bytes:
    direct = requests.get(url, timeout=5)  # expect: TL-NET-001
    return direct.content + http.get(url)


@registry.agent
def auditor(ctx: Any) -> list[object]:
    out: list[object] = [helpers.identity(), helpers.entropy(), helpers.generators(),
                         helpers.dates(), helpers.run_tools(), helpers.keys("k", 1, 2)]
    out.append(typed({"x"}))
    return out


@rt.agent
async def gatherer(ctx: Any, coros: list[Any]) -> list[Any]:
    deep.background(lambda: None)
    deep.nap()
    return await deep.fan_in(coros)


def not_an_agent() -> float:
    return time.time()
