"""What the generators of file-based vectors share: write the files they compute into one
folder of ``conformance/`` (removing files they no longer produce), or with ``--check`` only
report which are out of date."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def generator_main(
    description: str | None, default_out: Path, folder: str, all_files: Callable[[], dict[str, bytes]],
    argv: list[str] | None,
) -> int:
    """The command line of a generator whose files live under ``<out>/<folder>/``;
    ``all_files`` maps each path (relative to ``out``) to its bytes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only check the files are current")
    parser.add_argument("--out", type=Path, default=default_out, help="conformance directory")
    args = parser.parse_args(argv)
    wanted = all_files()
    root = args.out / folder
    existing = {path.relative_to(args.out).as_posix() for path in root.rglob("*") if path.is_file()} if root.is_dir() else set()
    stale = sorted(rel for rel, content in wanted.items() if not (args.out / rel).exists() or (args.out / rel).read_bytes() != content)
    extra = sorted(existing - set(wanted))
    if args.check:
        for rel in stale:
            print(f"out of date: {rel}")
        for rel in extra:
            print(f"not generated: {rel}")
        return 1 if stale or extra else 0
    for rel in extra:
        (args.out / rel).unlink()
        print(f"removed {rel}")
    for rel in stale:
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(wanted[rel])
        print(f"wrote {rel}")
    return 0
