"""Child process of ``test_run_ownership.py`` and ``test_slot_leases.py``: a runtime that takes
a run's lease (for an hour; with a fourth argument ``fresh``, the lease of a run under a
fresh id), says so by creating the file ``argv[3]``, and waits to be killed."""

from __future__ import annotations

import subprocess
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


def start_holder(location: str, run: str, ready: Path, *extra: str) -> subprocess.Popen[bytes]:
    """This script in a child process holding ``run``'s lease, once it says it took it."""
    child = subprocess.Popen([sys.executable, __file__, location, run, str(ready), *extra])
    for _ in range(600):
        if ready.exists() or child.poll() is not None:
            break
        time.sleep(0.05)
    if not ready.exists():
        child.kill()
        child.wait()
        raise AssertionError("the child never took its lease")
    return child


if __name__ == "__main__":
    main()
