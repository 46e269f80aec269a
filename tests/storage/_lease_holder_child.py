"""Child process of ``test_run_ownership.py`` and ``test_slot_leases.py``: a runtime that takes
a run's lease (for an hour; with a fourth argument ``fresh``, the lease of a run under a
fresh id), says so by creating the file ``argv[3]``, and waits to be killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tracelock import Runtime


def main() -> None:
    location, run, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    fresh = sys.argv[4:] == ["fresh"]
    with Runtime(location, lease_ms=3_600_000) as runtime, runtime.owner.owning(run, fresh=fresh):
        ready.write_text("held")
        time.sleep(120)


if __name__ == "__main__":
    main()
