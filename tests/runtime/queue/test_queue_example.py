"""The example under examples/run_queue runs as its docstring says: a worker process and the
submitting script, on one directory store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "run_queue"


def test_the_run_queue_example(tmp_path: Path) -> None:
    store = tmp_path / "store"
    worker = subprocess.Popen(
        [sys.executable, "-c", "from tracelock.cli.main import main; main()", "worker", "shop", "--store", str(store),
         "--concurrency", "2", "--json"],
        cwd=EXAMPLE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        done = subprocess.run(
            [sys.executable, "shop.py", str(store)], cwd=EXAMPLE, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 3 and all(" completed " in line for line in lines), lines
        assert "charged c-1 300" in lines[0]
    finally:
        worker.terminate()
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert '"completed": 3' in out
