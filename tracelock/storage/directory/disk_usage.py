"""The bytes a directory store takes on disk, by part (``tracelock store info``).

A file counts the bytes it has allocated, or its size when that is less: ``journal.log``
is sparse once sealed (the blocks its segments hold are punched out, docs/spec.md 3.8),
and its free space ahead of the data is allocated on purpose (section 3.4).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PARTS", "allocated_bytes", "store_parts"]

#: The parts, in the order they are shown.
PARTS = ("journal", "segments", "index", "merkle", "queue", "other")


def allocated_bytes(path: Path) -> int:
    """The bytes ``path`` takes on disk (0 when it is gone)."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return 0
    return min(status.st_size, status.st_blocks * 512)


def _part(relative: tuple[str, ...]) -> str:
    top, name = relative[0], relative[-1]
    if top == "journal.log":
        return "journal"
    if top == "sealed" and name.endswith(".seg"):
        return "segments"
    if len(relative) == 1 and name.startswith("index.sqlite"):
        return "index"
    if top == "merkle":
        return "merkle"
    if len(relative) == 1 and name.startswith("queue.sqlite"):
        return "queue"
    return "other"


def store_parts(root: Path) -> tuple[dict[str, int], int]:
    """Bytes by part of the store in ``root`` (and ``total``), and how many segment files
    it has. Files that vanish while the folder is walked (a writer's temporary files) are
    skipped."""
    parts = dict.fromkeys(PARTS, 0)
    segments = 0
    for folder, _, names in os.walk(root):
        base = Path(folder)
        for name in names:
            path = base / name
            if path.is_symlink():
                continue
            part = _part(path.relative_to(root).parts)
            parts[part] += allocated_bytes(path)
            segments += part == "segments"
    parts["total"] = sum(parts.values())
    return parts, segments
