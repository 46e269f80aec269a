"""One phase of a crash or divergence test, in its own process:
``python -m bench.peers.child SYSTEM PHASE WORKDIR RUN_ID NUMBER [--hold]``.

PHASE is ``run`` (run the workload once; with ``--hold`` the third effect waits to be killed),
``recover`` (recover the interrupted run) or ``replay`` (re-drive the completed run). The
system's app module is imported from ``WORKDIR/code`` (where the harness put the original or
the edited copy), its store lives in ``WORKDIR/store`` and the effect counters in
``WORKDIR/counters``. The outcome is printed as one ``RESULT {json}`` line.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from bench import workload
from bench.peers.apps import effects
from bench.peers.systems import load_system


def main(argv: list[str]) -> int:
    key, phase, workdir_arg, run_id, number = argv[:5]
    hold = "--hold" in argv[5:]
    workdir = Path(workdir_arg)
    system = load_system(key)
    app = None
    if system.app_module is not None:
        sys.path.insert(0, str(workdir / "code"))
        app = importlib.import_module(system.app_module)
    effects.configure(counters=workdir / "counters", hold=workdir / "hold" if hold else None)
    store = workdir / "store"
    store.mkdir(exist_ok=True)
    task = workload.task(int(number))
    result: dict[str, Any]
    try:
        if phase == "run":
            result = {"output": system.child_run(app, store, run_id, task)}
        elif phase == "recover":
            result = system.child_recover(app, store, run_id, task)
        elif phase == "replay":
            result = system.child_replay(app, store, run_id, task)
        else:
            raise SystemExit(f"unknown phase {phase!r}")
    except Exception as exc:  # reported to the harness, which keeps going
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    print("RESULT " + json.dumps(result, default=repr), flush=True)
    sys.stderr.flush()
    os._exit(0)  # some systems leave non-daemon threads behind


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
