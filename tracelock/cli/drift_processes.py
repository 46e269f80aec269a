"""Drift attempts in fresh Python processes, each with its own hash seed.

Each attempt is ``tracelock run MODULE:FUNCTION`` in a new interpreter, in the current
directory (from which the agent module is imported, as the CLI does), with
``PYTHONHASHSEED`` set to :func:`tracelock.runtime.replay.drift.hash_seed` of the attempt number.
The run goes to the store directory the drift comparison gives the attempt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tracelock.errors import ReplayError
from tracelock.runtime.replay.drift import Attempt, hash_seed
from tracelock.storage.open import open_store

__all__ = ["DriftAttemptError", "process_attempt"]

# Only the `run` command is imported: the full command line would add evidence and scan
# modules to every attempt's start-up.
_LAUNCH = "from tracelock.cli.cmd_run import run_command; run_command(prog_name='tracelock run')"


class DriftAttemptError(ReplayError):
    """A drift attempt in a fresh process recorded no run (the agent could not be imported,
    the input or policy could not be read...); ``details`` has the attempt's exit status
    and the end of its error output."""

    code = "DRIFT_ATTEMPT_FAILED"


def process_attempt(
    agent: str,
    input_file: Path,
    policy: Path | None,
    *,
    python: str | None = None,
    run_id: str | None = None,
    seed: str | None = None,
) -> Attempt:
    """An attempt that runs ``agent`` on ``input_file`` in a fresh ``python`` process, under
    ``run_id`` and ``seed`` when given (the same for every attempt of a drift)."""
    cwd = Path.cwd()
    source = input_file if input_file.is_absolute() else cwd / input_file
    rules = None if policy is None else (policy if policy.is_absolute() else cwd / policy)
    executable = python or sys.executable
    same_id, same_seed = run_id, seed

    def attempt(number: int, location: Path) -> str:
        seed = hash_seed(number)
        env = dict(os.environ)
        env["PYTHONHASHSEED"] = str(seed)
        env.pop("TRACELOCK_STORE", None)
        # The agent module is found from the working directory, as `tracelock run` finds it.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH")]))
        argv = [executable, "-c", _LAUNCH, agent, "--input", str(source), "--store", str(location), "--json"]
        if rules is not None:
            argv += ["--policy", str(rules)]
        if same_id is not None:
            argv += ["--run-id", same_id]
        if same_seed is not None:
            argv += ["--seed", same_seed]
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)  # tracelock: allow TL-PROC-001 -- drift's attempts run in fresh interpreters on purpose, each with a hash seed derived from its number
        run_id, reported = _read(done.stdout)
        if run_id is None and done.returncode in (0, 1):
            run_id = _only_run(location)  # the agent printed on stdout too
        if done.returncode not in (0, 1) or run_id is None:
            error = _last_lines(done.stderr)
            reason = reported or (error[-1] if error else None)
            raise DriftAttemptError(
                f"drift attempt {number} (PYTHONHASHSEED={seed}) recorded no run: exit {done.returncode}"
                + (f": {reason}" if reason else ""),
                details={"attempt": number, "hash_seed": seed, "exit": done.returncode, "stderr": error},
            )
        return run_id

    return attempt


def _only_run(location: Path) -> str | None:
    if not location.is_dir():
        return None
    with open_store(location, create=False, read_only=True) as store:
        runs = [info.run for info in store.runs()]
    return runs[0] if len(runs) == 1 else None


def _last_lines(output: bytes, count: int = 5) -> list[str]:
    return output.decode("utf-8", "replace").strip().splitlines()[-count:]


def _read(stdout: bytes) -> tuple[str | None, str | None]:
    """The run id `tracelock run --json` printed, or the message of the error it printed."""
    try:
        document = json.loads(stdout)
    except ValueError:
        return None, None
    if not isinstance(document, dict):
        return None, None
    run_id = document.get("run_id")
    error = document.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return (run_id if isinstance(run_id, str) else None), (str(message) if message is not None else None)
