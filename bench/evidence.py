"""Evidence figures: checkpoints, inclusion proofs, bundle export and offline verification.

    python -m bench.evidence            # 1,000 runs of 10 entries: a 10,001-entry bundle
    python -m bench.evidence --quick    # 100 runs: a 1,001-entry bundle

Records the runs with the runtime (an agent taking 8 effects: run.start, 8 effect entries,
run.end), then times: signing a checkpoint of the whole store (first, and after one more
run, with its consistency proof), generating and verifying one inclusion proof per entry,
exporting every run as one bundle (collecting it, and writing it as a directory and a zip),
and verifying that bundle offline (every check of docs/spec.md 8.3).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cli import bench_main
from tracelock.core.merkle import leaf_hash, verify_inclusion
from tracelock.evidence.bundle import collect_bundle, read_bundle_files, write_bundle
from tracelock.evidence.history import CheckpointHistory, SigningKey
from tracelock.evidence.keys import PrivateKey
from tracelock.evidence.verify import PinnedKey, verify_bundle
from tracelock.runtime.runtime import Runtime
from tracelock.storage.directory import DirectoryStore

FULL_RUNS = 1000
QUICK_RUNS = 100
ORIGIN = "bench.example/evidence"
SEED = bytes(range(32))


def agent(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Eight effects: four random draws, two uuids, two clock readings."""
    values = [ctx.random() for _ in range(4)]
    ids = [str(ctx.uuid()) for _ in range(2)]
    ctx.now()
    ctx.now()
    return {"n": request["n"], "sum": sum(values), "ids": ids}


def _timed(func: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    value = func()
    return value, time.perf_counter() - started


def run(quick: bool) -> dict[str, Any]:
    runs = QUICK_RUNS if quick else FULL_RUNS
    key = SigningKey(PrivateKey.from_seed(SEED), ORIGIN)
    pins = [PinnedKey(key.private_key.public_key, ORIGIN, "bench")]
    with tempfile.TemporaryDirectory(prefix="tracelock-bench-") as tmp:
        store_dir = Path(tmp) / "store"
        counter = iter(range(10**9))
        with DirectoryStore(store_dir) as store:
            with Runtime(store, None, ids=lambda: f"run-{next(counter):06d}") as runtime:
                _, record_s = _timed(lambda: [runtime.run(agent, {"n": n}) for n in range(runs)])
            history = CheckpointHistory(store_dir)
            (first, _), first_s = _timed(lambda: history.sign(store, key))
            size = first.size
            run_ids = [info.run for info in store.runs()]

            entries = list(store.iter_entries())
            proofs, prove_s = _timed(lambda: [store.inclusion_proof(e.seq, size) for e in entries])
            leaves = [leaf_hash(e.line) for e in entries]

            def verify_all() -> None:
                for e, proof in zip(entries, proofs, strict=True):
                    verify_inclusion(e.seq, size, leaves[e.seq], proof, first.root)

            _, verify_proofs_s = _timed(verify_all)

            files, collect_s = _timed(
                lambda: collect_bundle(store, run_ids, first, signer_vkeys=history.signer_vkeys(1))
            )
            with Runtime(store, None, ids=lambda: "run-extra") as runtime:
                runtime.run(agent, {"n": -1})
            (second, _), second_s = _timed(lambda: history.sign(store, key))
        _, write_dir_s = _timed(lambda: write_bundle(files, Path(tmp) / "bundle"))
        _, write_zip_s = _timed(lambda: write_bundle(files, Path(tmp) / "bundle.zip"))
        zip_bytes = (Path(tmp) / "bundle.zip").stat().st_size
        report, verify_zip_s = _timed(lambda: verify_bundle(Path(tmp) / "bundle.zip", pins))
        assert report.ok, report.checks_failed()
        bundle_files, read_s = _timed(lambda: read_bundle_files(Path(tmp) / "bundle"))
        report, verify_mem_s = _timed(lambda: verify_bundle(bundle_files, pins))
        assert report.ok, report.checks_failed()
    n = len(entries)
    figures = {
        "runs": runs,
        "entries": n,
        "record_seconds": round(record_s, 3),
        "checkpoint_first_ms": round(first_s * 1e3, 2),
        "checkpoint_next_ms": round(second_s * 1e3, 2),
        "checkpoint_next_new_entries": second.size - first.size,
        "inclusion_proof_generate_us_per_entry": round(prove_s / n * 1e6, 1),
        "inclusion_proof_verify_us_per_entry": round(verify_proofs_s / n * 1e6, 1),
        "inclusion_proof_hashes": len(proofs[-1]),
        "export_collect_ms": round(collect_s * 1e3, 1),
        "export_write_dir_ms": round(write_dir_s * 1e3, 1),
        "export_write_zip_ms": round(write_zip_s * 1e3, 1),
        "bundle_files": len(files),
        "bundle_zip_bytes": zip_bytes,
        "verify_zip_ms": round(verify_zip_s * 1e3, 1),
        "verify_in_memory_ms": round(verify_mem_s * 1e3, 1),
        "verify_entries_per_second": round(n / verify_mem_s),
        "read_dir_ms": round(read_s * 1e3, 1),
    }
    print(f"evidence: {runs} runs, {n} entries (recorded in {figures['record_seconds']} s)")
    print(f"  checkpoint, first (whole tree)   {figures['checkpoint_first_ms']:>9.2f} ms")
    print(f"  checkpoint, next (+consistency)  {figures['checkpoint_next_ms']:>9.2f} ms")
    print(f"  inclusion proof generate         {figures['inclusion_proof_generate_us_per_entry']:>9.1f} us/entry")
    print(f"  inclusion proof verify           {figures['inclusion_proof_verify_us_per_entry']:>9.1f} us/entry")
    print(f"  export: collect {n} entries      {figures['export_collect_ms']:>9.1f} ms")
    print(f"  export: write directory          {figures['export_write_dir_ms']:>9.1f} ms")
    print(f"  export: write zip                {figures['export_write_zip_ms']:>9.1f} ms ({zip_bytes} bytes)")
    print(f"  verify zip (read + every check)  {figures['verify_zip_ms']:>9.1f} ms")
    print(f"  verify in memory                 {figures['verify_in_memory_ms']:>9.1f} ms "
          f"({figures['verify_entries_per_second']} entries/s)")
    return figures


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
