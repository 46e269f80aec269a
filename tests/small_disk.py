"""A small tmpfs mounted for a test that fills a disk (mounting needs root, as CI has; a test
run without it fails with that reason, never skips)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"2m"``) mounted on ``folder`` (made) until the block ends."""
    if os.geteuid() != 0:
        pytest.fail("mounting a small tmpfs needs root (as CI runs the suite): run the tests as root")
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        # Lazily: a handle a failed test left open must not keep the mount.
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def grow(mount: Path, size: str = "64m") -> None:
    """Free space: the same file system, made larger."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)
