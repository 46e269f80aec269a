"""Durable file operations shared by the store and the checkpoint history."""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["create_durably", "fsync_dir", "write_durably"]


def fsync_dir(path: Path) -> None:
    """fsync a directory, so that a file created or renamed in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` atomically: temp file, fsync, rename, fsync directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    fsync_dir(path.parent)


def create_durably(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists: written and synced under a name of its
    own, then linked into place (which fails when another process created it first), so two
    processes creating one file never see it half written or lose one rename. True if this
    call created it."""
    # A name of this process and thread (never shared, unlike ``write_durably``'s), created
    # with the usual mode (0644 less the umask; ``tempfile.mkstemp`` would make it 0600).
    process = os.getpid()  # tracelock: allow TL-ENV-002 -- names a temporary file, decides nothing
    temporary = path.with_name(f"{path.name}.{process}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        fsync_dir(path.parent)
        return True
    finally:
        os.unlink(temporary)
