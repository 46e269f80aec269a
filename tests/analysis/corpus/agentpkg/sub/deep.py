"""A nested module reached through ``import agentpkg.sub.deep as deep`` and relative imports."""

import asyncio
import threading
import time
from typing import Any

from ..clients import roll


def background(work: Any) -> threading.Thread:
    thread = threading.Thread(target=work)  # expect: TL-CONC-001
    thread.start()
    return thread


async def fan_in(coros: list[Any]) -> list[Any]:
    await asyncio.sleep(0.1)  # expect: TL-CLOCK-002
    return await asyncio.gather(*coros)  # expect: TL-CONC-002


def nap() -> float:
    time.sleep(1)  # expect: TL-CLOCK-002
    return roll()
