"""Child process of ``test_run_ownership.py``: a runtime that takes a run's lease (for an
hour), says so by creating the file ``argv[3]``, and waits to be killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tracelock import Runtime


def main() -> None:
    location, run, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    with Runtime(location, lease_ms=3_600_000) as runtime, runtime.owner.owning(run):
        ready.write_text("held")
        time.sleep(120)


if __name__ == "__main__":
    main()
