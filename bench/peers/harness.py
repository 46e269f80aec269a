"""The side-by-side benchmark: tracelock and the systems users would pick instead, on the same
3-effect workload, each in a process of its own, interleaved.

1. Timing. Every available system gets a process of its own (``bench.peers.worker``: users run
   one of them per process, and in a shared one each system's threads and garbage collections
   land in the others' figures), opens a fresh store in a temporary directory, runs a few
   warm-up runs, then all of them take turns, batch by batch (the order rotating each round),
   so that machine noise hits all alike. Each run is sequential and durable when it returns.
   Per system: p50, p99, mean, runs per second, bytes on disk per run, syncs per run (counted
   during its timed runs when ``python -m bench.peers`` restarted itself with the sync counter
   of ``bench/peers/synccount/`` preloaded), its p50 as a multiple of its syncs times the sync
   floor (small overwrite + ``fdatasync`` probes between the rounds), and its p50 against
   tracelock's in each of five consecutive groups of rounds (quoted as a range); tracelock's
   replay of each recorded run is timed afterwards. A quick pass writes its report to
   ``build/bench/``; only a full pass rewrites ``docs/benchmarks.md`` and its plot.
2. Crash test (child processes). A run is killed with SIGKILL once its second step has
   completed and been recorded (the third effect writes a marker on entry and waits), then the
   system's own recovery mechanism finishes it in a fresh process. Counter files outside the
   store say how many times each effect really ran.
3. Divergence test (child processes). The second step's arguments are edited in the system's
   app code (``query=ask`` becomes ``query=ask + " (edited)"``), then (a) a completed run is
   replayed and (b) a run interrupted after its second step is recovered, each with the
   system's own mechanism, under the edited code. Did it notice, return results recorded for
   the old arguments, or run the new code without a word?

A system that cannot be imported (not installed, broken release) or that fails along the way
is reported as such; the others still run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import workload
from bench.peers import apps
from bench.peers.apps import effects
from bench.peers.base import DBOS_PINNED_VERSION_ENV, System, tree_bytes
from bench.peers.systems import DISTRIBUTIONS, MODULES, TITLES, load_system
from bench.peers.worker import Worker, WorkerFailed
from bench.stats import percentile
from bench.syncs import BUILD, preloaded_count, probe

REPO = Path(__file__).resolve().parents[2]
APPS = Path(__file__).resolve().parent / "apps"
RESULTS = REPO / "bench" / "results" / "peers.json"
#: Where a quick pass writes its figures and report: never over the committed ones.
QUICK_RESULTS = BUILD / "peers.json"
#: How many consecutive groups of rounds the per-pass ratios are taken over.
PASSES = 5
#: The run number the crash and divergence tests use (its task is ``workload.task(7)``).
TEST_NUMBER = 7
CHILD_TIMEOUT_S = 180.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- loading --------------------------------------------------------------------------------
def unavailable_reason(key: str, exc: BaseException) -> str:
    reason = f"{type(exc).__name__}: {exc}"
    for distribution in DISTRIBUTIONS.get(key, ()):
        install_log = Path(sys.prefix) / f"install-{distribution}.log"
        if install_log.exists():
            errors = [line.strip() for line in install_log.read_text(errors="replace").splitlines() if "ERROR" in line]
            if errors:
                reason += f" (pip install {distribution} failed: {errors[-1]})"
    return reason


def load_all(keys: list[str]) -> tuple[dict[str, System], dict[str, str]]:
    systems: dict[str, System] = {}
    unavailable: dict[str, str] = {}
    for key in keys:
        try:
            systems[key] = load_system(key)
        except Exception as exc:  # a peer that cannot import is reported, not fatal
            unavailable[key] = unavailable_reason(key, exc)
            log(f"peers: {key} is not available: {unavailable[key]}")
    return systems, unavailable


# -- timing ---------------------------------------------------------------------------------
def time_systems(
    systems: dict[str, System], runs: int, batch: int, warmup: int, scratch: Path
) -> tuple[dict[str, list[float]], dict[str, Any], dict[str, str]]:
    """Interleaved timed runs, each system in a process of its own (``bench.peers.worker``).
    Returns per-system samples (seconds), per-system facts, and the systems that failed along
    the way with the reason."""
    samples: dict[str, list[float]] = {}
    facts: dict[str, Any] = {}
    failed: dict[str, str] = {}
    roots: dict[str, Path] = {}
    workers: dict[str, Worker] = {}
    active: list[str] = []
    try:
        for key in systems:
            root = scratch / key
            root.mkdir()
            workers[key] = Worker(key, root)
            try:
                facts[key] = workers[key].call("open", runs, warmup)
            except WorkerFailed as exc:
                failed[key] = f"setup failed: {exc}"
                log(f"peers: {key} {failed[key]}")
                continue
            roots[key] = root
            samples[key] = []
            active.append(key)
        rounds = math.ceil(runs / batch)
        floor: list[float] = []
        syncs: dict[str, int] = {}
        started = time.perf_counter()
        for round_number in range(rounds):
            first, stop = round_number * batch, min(runs, (round_number + 1) * batch)
            shift = round_number % max(1, len(active))
            for key in active[shift:] + active[:shift]:
                if key in failed:
                    continue
                try:
                    own, synced = workers[key].call("batch", first, stop)
                except WorkerFailed as exc:
                    samples[key] += exc.partial or []
                    failed[key] = str(exc)
                    log(f"peers: {key} {failed[key]}")
                    continue
                samples[key] += own
                if synced is not None:
                    syncs[key] = syncs.get(key, 0) + synced
            floor += probe(scratch, 10)
            if rounds >= 10 and (round_number + 1) % (rounds // 10) == 0:
                log(f"peers: {round_number + 1}/{rounds} rounds ({time.perf_counter() - started:.0f} s)")
        facts["sync_floor"] = {**summary(floor), "probes": len(floor)}
        for key, count in syncs.items():
            facts[key]["syncs_per_run"] = round(count / max(1, len(samples[key])), 2)
        for key in active:
            if key not in failed:
                facts[key]["pass_p50_us"] = pass_p50s(samples[key], runs)
        if "tracelock" in active and "tracelock" not in failed:
            try:
                replays, matched = workers["tracelock"].call("replay", runs)
            except WorkerFailed as exc:
                failed["tracelock"] = f"replay failed: {exc}"
            else:
                facts["tracelock"]["replay"] = {**summary(replays), "matched": matched, "runs": len(replays)}
                samples["tracelock replay"] = replays
        for key in active:
            try:
                workers[key].call("close")
            except WorkerFailed as exc:
                log(f"peers: closing {key} failed: {exc}")
    finally:
        for worker in workers.values():
            worker.stop()
    for key in active:
        done = len(samples[key]) + facts[key]["warmup"]
        facts[key]["stored_bytes"] = tree_bytes(roots[key])
        store = roots[key] / systems[key].store_subdir
        if store.is_dir():
            facts[key]["stored_parts"] = {item.name: tree_bytes(item) for item in sorted(store.iterdir())}
            facts[key]["payload_bytes"] = systems[key].payload_bytes(store)
        facts[key]["runs_stored"] = done
    return samples, facts, failed


def pass_p50s(samples_s: list[float], runs: int, passes: int = PASSES) -> list[float]:
    """The p50 (µs) of each of ``passes`` consecutive groups of rounds: the run numbers
    are the same in every system's group, so group-wise ratios compare like with like."""
    size = max(1, runs // passes)
    return [round(percentile(samples_s[start : start + size], 0.5) * 1e6, 1) for start in range(0, size * passes, size) if samples_s[start : start + size]]


def summary(samples_s: list[float]) -> dict[str, Any]:
    return {
        "p50_us": round(percentile(samples_s, 0.50) * 1e6, 1),
        "p99_us": round(percentile(samples_s, 0.99) * 1e6, 1),
        "mean_us": round(statistics.fmean(samples_s) * 1e6, 1),
        "runs_per_s": round(len(samples_s) / sum(samples_s), 1),
    }


# -- crash and divergence tests -------------------------------------------------------------
def write_code(workdir: Path, system: System, *, changed: bool) -> None:
    """Put the system's app module (as shipped, or with the second step's arguments edited)
    in ``workdir/code``, where the child imports it from."""
    if system.app_module is None:
        return
    source = (APPS / f"{system.app_module}.py").read_text()
    if source.count(apps.STEP2_ARGS) != 1:
        raise RuntimeError(f"{system.app_module}.py must contain {apps.STEP2_ARGS!r} exactly once")
    if changed:
        source = source.replace(apps.STEP2_ARGS, apps.STEP2_ARGS_CHANGED)
    code = workdir / "code"
    code.mkdir(exist_ok=True)
    (code / f"{system.app_module}.py").write_text(source)


def child_command(key: str, phase: str, workdir: Path, run_id: str, *, hold: bool = False) -> list[str]:
    command = [sys.executable, "-m", "bench.peers.child", key, phase, str(workdir), run_id, str(TEST_NUMBER)]
    return command + (["--hold"] if hold else [])


def child_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def parse_result(stdout: str, stderr: str, returncode: int | None) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    return {"error": f"the child exited ({returncode}) without a result: {tail}"}


def run_child(key: str, phase: str, workdir: Path, run_id: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    try:
        done = subprocess.run(
            child_command(key, phase, workdir, run_id),
            cwd=REPO,
            env=child_env(env),
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{phase} did not finish in {CHILD_TIMEOUT_S:.0f} s"}
    return parse_result(done.stdout, done.stderr, done.returncode)


def interrupt(key: str, workdir: Path, run_id: str, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    """Start a run in a child and SIGKILL it once its third effect has started (so its second
    step has completed and been recorded). Returns an error result, or None once killed."""
    hold = workdir / "hold"
    child = subprocess.Popen(
        child_command(key, "run", workdir, run_id, hold=True),
        cwd=REPO,
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not hold.exists():
        if child.poll() is not None:
            stdout, stderr = child.communicate()
            result = parse_result(stdout, stderr, child.returncode)
            return {"error": result.get("error") or f"the run ended before its third step: {result}"}
        if time.monotonic() > deadline:
            child.kill()
            child.communicate()
            return {"error": f"the run did not reach its third step in {CHILD_TIMEOUT_S:.0f} s"}
        time.sleep(0.002)
    os.kill(child.pid, signal.SIGKILL)
    child.communicate()
    return None


def new_workdir(scratch: Path, name: str) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    (workdir / "counters").mkdir()
    return workdir


def crash_test(key: str, system: System, scratch: Path, *, changed: bool = False, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Kill a run after its second step; recover it (under edited code when ``changed``)."""
    workdir = new_workdir(scratch, f"crash-{key}")
    run_id = f"run-crash-{key}"
    write_code(workdir, system, changed=False)
    error = interrupt(key, workdir, run_id, env)
    if error is not None:
        return {**error, "counts": effects.counts(workdir / "counters")}
    at_kill = effects.counts(workdir / "counters")
    if changed:
        write_code(workdir, system, changed=True)
    result = run_child(key, "recover", workdir, run_id, env)
    return {**result, "counts_at_kill": at_kill, "counts": effects.counts(workdir / "counters")}


def replay_test(key: str, system: System, scratch: Path, *, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Complete a run, edit the code, re-drive the run with the system's mechanism."""
    workdir = new_workdir(scratch, f"replay-{key}")
    run_id = f"run-replay-{key}"
    write_code(workdir, system, changed=False)
    first = run_child(key, "run", workdir, run_id, env)
    if "error" in first:
        return {"error": f"recording the run failed: {first['error']}"}
    recorded = effects.counts(workdir / "counters")
    write_code(workdir, system, changed=True)
    result = run_child(key, "replay", workdir, run_id, env)
    after = effects.counts(workdir / "counters")
    return {**result, "effects_rerun": {name: after[name] - recorded[name] for name in after}}


def crash_verdict(result: dict[str, Any]) -> dict[str, Any]:
    expected = workload.plain_python(workload.task(TEST_NUMBER))
    counts = result.get("counts", {})
    verdict = {
        "counts": counts,
        "completed": result.get("output") == expected,
        "exactly_once": counts == dict.fromkeys(effects.EFFECTS, 1),
        "said": result.get("error") or result.get("said", ""),
    }
    if "error" in result:
        verdict["error"] = result["error"]
    return verdict


def divergence_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """noticed / stale / re-ran / not-completed / error, with what the system said."""
    if "error" in result:
        return {"verdict": "error", "said": result["error"]}
    said = str(result.get("said", ""))
    if result.get("noticed"):
        return {"verdict": "noticed", "said": said}
    output = result.get("output")
    if not isinstance(output, dict):
        return {"verdict": "not-completed", "said": said}
    query = output["orders"][0]["query"]
    ask = workload.task(TEST_NUMBER)["ask"]
    verdict = {ask: "stale", ask + " (edited)": "re-ran"}.get(query, "other")
    return {"verdict": verdict, "said": said, "search_query_in_output": query}


def behaviour_tests(systems: dict[str, System], scratch: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    crash: dict[str, Any] = {}
    divergence: dict[str, Any] = {}
    pinned = {DBOS_PINNED_VERSION_ENV: "bench-pinned"}
    for key, system in systems.items():
        log(f"peers: crash test, {key}")
        crash[key] = crash_verdict(crash_test(key, system, scratch))
        if system.app_module is None:
            continue
        variants: list[tuple[str, dict[str, str] | None]] = [(key, None)]
        if key == "dbos":
            variants.append(("dbos-pinned", pinned))
        for label, env in variants:
            log(f"peers: divergence test, {label}")
            replayed = replay_test(key, system, scratch, env=env)
            recovered = crash_test(key, system, scratch, changed=True, env=env)
            divergence[label] = {
                "completed_run_replayed": {**divergence_verdict(replayed), "effects_rerun": replayed.get("effects_rerun")},
                "interrupted_run_recovered": {**divergence_verdict(recovered), "counts": recovered.get("counts")},
            }
    return crash, divergence


# -- the whole benchmark ----------------------------------------------------------------------
def run(quick: bool, *, runs: int | None = None, only: list[str] | None = None, write: bool = True) -> dict[str, Any]:
    runs = runs or (500 if quick else 10_000)
    batch = max(10, runs // 100)
    warmup = 20
    keys = [key for key in MODULES if only is None or key in only or key == "tracelock"]
    systems, unavailable = load_all(keys)
    figures: dict[str, Any] = {
        "syncs_counted": preloaded_count() is not None,
        "runs": runs,
        "batch": batch,
        "quick": quick,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "os": f"{platform.system()} {platform.machine()}",
        },
        "systems": {},
    }
    with tempfile.TemporaryDirectory(prefix="tracelock-peers-", dir=os.environ.get("TRACELOCK_BENCH_DIR")) as tmp:
        scratch = Path(tmp)
        (scratch / "timing").mkdir()
        log(f"peers: timing {', '.join(systems)}: {runs} runs each, interleaved in batches of {batch}")
        samples, facts, failed = time_systems(systems, runs, batch, warmup, scratch / "timing")
        crash, divergence = behaviour_tests(systems, scratch)
    figures["sync_floor"] = facts.get("sync_floor")
    floor_us = (facts.get("sync_floor") or {}).get("p50_us")
    base = summary(samples["tracelock"]) if samples.get("tracelock") else None
    for key in MODULES:
        if key not in keys:
            continue
        entry: dict[str, Any] = {}
        system = systems.get(key)
        if system is not None:
            entry.update(
                title=system.title,
                version=system.version(),
                durability=system.durability,
                recovery_mechanism=system.recovery,
                replay_mechanism=system.replay,
            )
        else:
            entry["title"] = TITLES.get(key, key)
        if key in unavailable:
            entry["unavailable"] = unavailable[key]
        if key in failed:
            entry["failed"] = failed[key]
        if samples.get(key) and key not in failed:
            stats = summary(samples[key])
            stats["runs"] = len(samples[key])
            stats["bytes_per_run"] = round(facts[key]["stored_bytes"] / facts[key]["runs_stored"])
            stats["same_output_as_plain"] = facts[key]["same_output_as_plain"]
            stats["bytes_per_run_by_part"] = {
                part: round(count / facts[key]["runs_stored"])
                for part, count in facts[key].get("stored_parts", {}).items()
            }
            if facts[key].get("payload_bytes") is not None:
                stats["payload_bytes_per_run"] = round(facts[key]["payload_bytes"] / facts[key]["runs_stored"])
            stats["pass_p50_us"] = facts[key]["pass_p50_us"]
            counted = facts[key].get("syncs_per_run")
            if counted is not None:
                stats["syncs_per_run"] = counted
                if counted and floor_us:
                    stats["p50_vs_floor"] = round(stats["p50_us"] / (counted * floor_us), 2)
            if base is not None:
                stats["p50_vs_tracelock"] = float(f"{stats['p50_us'] / base['p50_us']:.3g}")
                stats["runs_per_s_vs_tracelock"] = float(f"{stats['runs_per_s'] / base['runs_per_s']:.3g}")
            for reference in ("tracelock", "tracelock-strict"):
                theirs = facts.get(reference, {}).get("pass_p50_us")
                if theirs and reference not in failed:
                    ratios = [own / other for own, other in zip(stats["pass_p50_us"], theirs, strict=False)]
                    stats[f"p50_vs_{reference}_range"] = [float(f"{min(ratios):.3g}"), float(f"{max(ratios):.3g}")]
            entry["timing"] = stats
            if "replay" in facts.get(key, {}):
                entry["replay"] = facts[key]["replay"]
        if key in crash:
            entry["crash"] = crash[key]
        figures["systems"][key] = entry
    figures["divergence"] = divergence
    from bench import report

    if write:
        # A quick pass reports into build/bench; only a full pass rewrites docs/benchmarks.md.
        results = QUICK_RESULTS if quick else RESULTS
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps({"figures": figures, "samples": samples}))
        if quick:
            markdown = report.write_peers(figures, samples, doc=BUILD / "benchmarks.md", plot=BUILD / "performance-peers.png")
            log(f"peers: quick pass: report in {BUILD / 'performance.md'} (docs/performance.md left alone)")
        else:
            markdown = report.write_peers(figures, samples)
    else:
        markdown = report.render_peers(figures, None)
    print(markdown, flush=True)
    return figures
