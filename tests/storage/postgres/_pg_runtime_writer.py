"""Child process of the PostgreSQL fault tests (``python -m tests.storage.postgres._pg_runtime_writer
URL WORKDIR COMPLETE``): a Runtime on a PostgreSQL store runs COMPLETE runs of the agent
of ``tests.storage.postgres._pg_payer`` (printing ``DONE run_id`` as each returns), then one more
whose irreversible effect (or, with a fourth argument ``lookup``, whose read-only lookup)
waits to be killed."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.storage.postgres import _pg_payer
from tracelock.runtime.runtime import Runtime


def main(url: str, workdir: Path, complete: int, hold: str = "pay") -> None:
    _pg_payer.WORKDIR.append(workdir)
    runtime = Runtime(url, _pg_payer.POLICY, toolkits=(_pg_payer.kit,))
    for number in range(complete):
        result = runtime.run(_pg_payer.agent, {"key": f"k{number}", "amount": number})
        assert result.ok, result.error
        sys.stdout.write(f"DONE {result.run_id}\n")
        sys.stdout.flush()
    (_pg_payer.HOLD_LOOKUP if hold == "lookup" else _pg_payer.HOLD).append(True)
    runtime.run(_pg_payer.agent, {"key": "held", "amount": 99})


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:5])
