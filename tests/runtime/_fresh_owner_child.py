"""Child processes of ``test_fresh_owner.py``: a runtime running an order under a fresh
(random) run id, and runtimes racing to take that run over with ``recover --force``.

The agent and its ledger are ``_one_owner_child``'s: ``charge`` (irreversible) appends one
line per real execution to a ledger file outside the store; a ``hold`` file stops the
owner inside a step.
"""

from __future__ import annotations

import json
from multiprocessing.synchronize import Barrier
from pathlib import Path

from tests.runtime._one_owner_child import checkout, runtime_for


def fresh_owner(location: str, ledger: str, order: str, lease_ms: int) -> None:
    """Run order ``order`` once under a fresh run id; write how the call ended to
    ``outcome-<order>`` beside the ledger (exit code 3: it raised)."""
    outcome = Path(ledger).with_name(f"outcome-{order}")
    with runtime_for(location, Path(ledger), lease_ms) as runtime:
        try:
            result = runtime.run(checkout, {"order": order})
        except Exception as exc:
            outcome.write_text(json.dumps({"raised": type(exc).__name__, "code": getattr(exc, "code", None)}))
            raise SystemExit(3) from None
        outcome.write_text(json.dumps({"status": result.status, "run": result.run_id}))


def taker(location: str, ledger: str, results: str, barrier: Barrier, name: str) -> None:
    """After the barrier, ``recover --force``: every unfinished run, a live owner's too;
    append the report's rows to ``results``."""
    with runtime_for(location, Path(ledger)) as runtime:
        barrier.wait(120)
        try:
            rows = runtime.recover(force=True).runs
        except Exception as exc:  # reported to the test, which fails on it
            rows = [{"error": f"{type(exc).__name__}: {exc}"}]
    with open(results, "a") as out:
        for row in rows:
            out.write(json.dumps({"taker": name, **row}, default=str) + "\n")
