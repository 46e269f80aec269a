"""Clock helpers: one reached by an agent, one only used inside log arguments."""

import time
from datetime import datetime


def iso_now() -> str:
    return datetime.now().isoformat()  # expect: TL-CLOCK-001


def elapsed_since(start: float) -> float:
    # Only ever called inside logger.debug(...) arguments: a log-only function.
    return time.perf_counter() - start


def never_called() -> float:
    return time.time()
