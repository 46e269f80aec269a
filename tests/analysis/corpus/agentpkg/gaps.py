"""Indirect calls, file reads, import-time values and registration without decorators."""

import functools
import importlib
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from agentpkg import settings
from agentpkg.registry import kit, rt
from agentpkg.settings import RUN_TAG

now = lambda: time.time()  # noqa: E731  # expect: TL-CLOCK-001
unused_now = lambda: time.time()  # noqa: E731
ticker = functools.partial(time.monotonic)  # expect: TL-CLOCK-001
seeded = functools.partial(random.Random, 7)


def _stamp(fmt: str) -> str:
    return time.strftime(fmt)  # expect: TL-CLOCK-001


stamp = functools.partial(_stamp, "%Y")
_seen: list[float] = []


def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()  # expect: TL-CLOCK-001
        return fn(*args, **kwargs), began

    return wrapper


def registered(fn: Callable[..., Any]) -> Callable[..., Any]:
    _seen.append(time.time())
    return fn


@rt.agent
@timed
@registered
def reader(ctx: Any, name: str, started: float = time.time()) -> list[Any]:  # expect: TL-CLOCK-001
    text = open(name).read()  # noqa: SIM115  # expect: TL-FS-001
    raw = Path(name).read_bytes()  # expect: TL-FS-001
    conf = (Path("conf") / name).read_text(encoding="utf-8")  # expect: TL-FS-001
    with open(name, "w") as out:
        out.write(text)
    shared = ctx.call("fs.read", path=name)
    draw = __import__("random").random()  # expect: TL-RAND-001
    clock = importlib.import_module("time")
    tick = clock.time()  # expect: TL-CLOCK-001
    plugin = importlib.import_module(name)
    return [text, raw, conf, shared, draw, tick, plugin, now(), ticker(), seeded().random(),
            stamp(), RUN_TAG, settings.BOOTED, settings.LABEL, settings.HOME, started]


@rt.tool("load")
def load(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def unused(started: float = time.time()) -> float:
    return started


def handle(ctx: Any, url: str) -> list[Any]:
    out = subprocess.run(["ls"], capture_output=True, check=False)  # expect: TL-PROC-001
    listing = out.stdout.decode()
    resp = requests.get(url, timeout=5)  # expect: TL-NET-001
    data = resp.json()
    body = requests.get(url, timeout=5).json()  # expect: TL-NET-001
    return [listing, data, body, ctx]


def not_registered(url: str) -> object:
    return requests.get(url, timeout=5)


kit.agent("handle")(handle)
kit.agent("nothing")
HANDLERS = {"later": not_registered}
