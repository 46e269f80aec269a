"""Strict mode: each rule's calls raise inside an agent run, on the agent's thread, and
nothing raises outside a run, in tools, or on other threads."""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tracelock import Runtime, Toolkit
from tracelock.runtime.records import load_run
from tracelock.runtime.strict import guard as strict

POLICY = {"version": 1, "tools": [{"name": "clock_tool"}]}
kit = Toolkit()


@kit.tool(timeout=None)
def clock_tool() -> float:
    # Tools are the sanctioned boundary: they may read the real world.
    return time.time() + random.random() * 0


CASES: dict[str, Callable[[], Any]] = {
    "TL-RAND-001": lambda: random.random(),
    "TL-RAND-002": lambda: random.Random(),
    "TL-RAND-004": lambda: os.urandom(8),
    "TL-UUID-001": lambda: uuid.uuid4(),
    "TL-CLOCK-001": lambda: time.time(),
    "TL-CLOCK-002": lambda: time.sleep(0),
    "TL-ENV-001": lambda: os.environ["HOME"],
    "TL-ENV-002": lambda: os.getpid(),
    "TL-NET-001": lambda: socket.gethostbyname("localhost"),
    "TL-PROC-001": lambda: subprocess.run(["true"], check=False),
    "TL-CONC-001": lambda: threading.Thread(target=print),
}
SECRETS_CASE = ("TL-RAND-004", lambda: secrets.token_hex(4))
NETWORK_CASE = ("TL-NET-001", lambda: urllib.request.urlopen("http://127.0.0.1:9"))


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    handle = Runtime(tmp_path / "store", POLICY, toolkits=(kit,), strict=True)
    yield handle
    handle.close()


@pytest.mark.parametrize(
    ("rule", "call"),
    [*CASES.items(), SECRETS_CASE, NETWORK_CASE],
    ids=[*CASES, "TL-RAND-004-secrets", "TL-NET-001-urllib"],
)
def test_each_rule_raises_inside_a_run(runtime: Runtime, rule: str, call: Callable[[], Any]) -> None:
    seen: list[Any] = []

    def agent(ctx: Any, _: Any) -> None:
        try:
            call()
        except strict.NondeterminismError as exc:
            seen.append(exc)
            raise

    result = runtime.run(agent, None)
    assert result.outcome == "EXECUTION_ERROR" and result.code == "NONDETERMINISM_DETECTED"
    assert len(seen) == 1 and seen[0].rule_id == rule
    assert seen[0].door.startswith("ctx.")
    assert rule in (result.error or "")


@pytest.mark.parametrize("call", [*CASES.values(), SECRETS_CASE[1]])
def test_nothing_raises_outside_a_run(runtime: Runtime, call: Callable[[], Any]) -> None:
    call()


def test_the_doors_tools_and_seeded_generators_are_fine(runtime: Runtime) -> None:
    def agent(ctx: Any, _: Any) -> dict[str, Any]:
        seeded = random.Random(42).random()
        return {
            "tool": ctx.call("clock_tool") > 0,
            "now": ctx.now().year > 2000,
            "random": 0 <= ctx.random() < 1,
            "uuid": str(ctx.uuid()),
            "seeded": seeded,
        }

    result = runtime.run(agent, None)
    assert result.ok, result.error
    assert result.output["seeded"] == random.Random(42).random()


def test_other_threads_are_not_agent_code(runtime: Runtime) -> None:
    outside: list[float] = []
    started = threading.Event()

    def background() -> None:
        started.wait(5)
        outside.append(time.time())

    worker = threading.Thread(target=background)
    worker.start()

    def agent(ctx: Any, _: Any) -> str:
        started.set()
        worker.join(5)
        return "ok"

    assert runtime.run(agent, None).ok
    assert len(outside) == 1


def test_async_agents_are_guarded_but_the_event_loop_is_not(runtime: Runtime) -> None:
    async def good(ctx: Any, _: Any) -> bool:
        await ctx.sleep(0)
        return bool(await ctx.call("clock_tool"))

    async def bad(ctx: Any, _: Any) -> Any:
        return await asyncio.gather(asyncio.sleep(0))

    assert runtime.run(good, None).ok
    result = runtime.run(bad, None)
    assert result.code == "NONDETERMINISM_DETECTED" and "TL-" in (result.error or "")


def test_importing_inside_an_agent_still_works(runtime: Runtime) -> None:
    def agent(ctx: Any, _: Any) -> str:
        import decimal
        import fractions

        return str(fractions.Fraction(1, 3) + decimal.Decimal(1).as_integer_ratio()[0])

    assert runtime.run(agent, None).ok


def test_the_violation_is_recorded_in_the_journal(runtime: Runtime) -> None:
    def agent(ctx: Any, _: Any) -> float:
        return time.time()

    result = runtime.run(agent, None)
    end = load_run(runtime.store, result.run_id).end or {}
    assert end["code"] == "NONDETERMINISM_DETECTED" and "ctx.now()" in end["error"]


def test_not_strict_leaves_agent_code_alone(tmp_path: Path) -> None:
    with Runtime(tmp_path / "store", POLICY, toolkits=(kit,), strict=False) as runtime:
        assert runtime.run(lambda ctx, _: time.time() > 0, None).ok


def test_strict_mode_says_what_it_cannot_guard(runtime: Runtime) -> None:
    unguarded = strict.unguarded_targets()
    assert "datetime.datetime.now" in unguarded
    assert "built-in" in unguarded["datetime.datetime.now"]
