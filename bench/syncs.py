"""The cost of durability on this disk, measured where the benchmarks run: the sync floor
(one small overwrite + ``fdatasync``, the cheapest sync a journal can make) and a count of the
syncs a process really makes (``synccount.c``, preloaded: every system is counted the same
way, whichever library makes the call)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "bench" / "peers" / "synccount" / "synccount.c"
BUILD = REPO / "build" / "bench"
LIBRARY = BUILD / "synccount.so"


def probe(directory: Path, count: int) -> list[float]:
    """Seconds taken by each of ``count`` small overwrites + ``fdatasync`` of a file whose
    blocks already exist (what a journal with free space ahead of its data pays per sync)."""
    path = directory / "sync-probe"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.pwrite(fd, b"\0" * 65536, 0)
        os.fsync(fd)
        samples = []
        for number in range(count):
            started = time.perf_counter()
            os.pwrite(fd, number.to_bytes(8, "big") * 32, (number % 16) * 4096)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - started)
        return samples
    finally:
        os.close(fd)
        path.unlink()


def counter_library() -> tuple[Path | None, str]:
    """The sync counter, built into ``build/bench`` when missing or older than its source:
    its path, or None and why not."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return LIBRARY, ""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler to build the sync counter (bench/peers/synccount/synccount.c)"
    BUILD.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(LIBRARY), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None, f"building the sync counter failed: {done.stderr.strip()[-300:]}"
    return LIBRARY, ""


def preloaded_count() -> int | None:
    """Syncs made so far by this process, when the counter is preloaded into it, else None."""
    if str(LIBRARY) not in os.environ.get("LD_PRELOAD", ""):
        return None
    library = ctypes.CDLL(str(LIBRARY))
    library.tl_sync_count.restype = ctypes.c_long
    return int(library.tl_sync_count())
