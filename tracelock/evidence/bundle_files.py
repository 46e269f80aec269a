"""An evidence bundle's files: their names, and reading them from a directory, a ``.zip`` or
a ``.tar`` (``docs/spec.md`` section 8). Reading needs no store: the offline verifier
(:mod:`tracelock.evidence.verify`) starts here; writing bundles is
:mod:`tracelock.evidence.bundle`.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tracelock.errors import EvidenceError

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "CHECKPOINT",
    "ENTRIES",
    "MANIFEST",
    "MAX_BUNDLE_BYTES",
    "PAYLOAD_DIR",
    "PROOFS",
    "BundleFiles",
    "BundleFormatError",
    "bundle_kind",
    "read_bundle_files",
]

BUNDLE_FORMAT = "tracelock-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint.note"
ENTRIES = "entries.jsonl"
PROOFS = "proofs.jsonl"
PAYLOAD_DIR = "payloads"
#: A verifier refuses to read more than this many bytes of bundle content.
MAX_BUNDLE_BYTES = 1 << 31

_SAFE_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")


class BundleFormatError(EvidenceError):
    """A path is not a readable bundle (missing, or an unsupported kind of file)."""

    code: ClassVar[str] = "EVIDENCE_BUNDLE_FORMAT"


def bundle_kind(path: Path) -> str:
    """``zip``, ``tar`` or ``dir``, from the path's extension (``.zip``, ``.tar``, else a
    directory); compressed tars are refused (their bytes depend on the compressor)."""
    name = path.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith(".tar"):
        return "tar"
    if name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".gz")):
        raise BundleFormatError(
            f"{path}: compressed archives are not bundles (their bytes depend on the "
            "compressor); use .zip, .tar or a directory",
            details={"path": str(path)},
        )
    return "dir"


@dataclass
class BundleFiles:
    """The files of a bundle as read from disk, and what was wrong with the container."""

    source: str
    kind: str
    files: dict[str, bytes]
    problems: list[tuple[str, str]]  # (path or "", message)


def _safe(name: str) -> bool:
    return (
        _SAFE_PATH.fullmatch(name) is not None
        and all(part not in (".", "..") for part in name.split("/"))
    )


def read_bundle_files(path: Path, *, max_bytes: int = MAX_BUNDLE_BYTES) -> BundleFiles:
    """Read every file of a bundle. Container problems (unsafe or duplicate names, links,
    special files, an unreadable archive) are collected, never raised, so that verification
    can report them; a missing path raises :class:`BundleFormatError`."""
    path = Path(path)
    if not path.exists():
        raise BundleFormatError(f"no bundle at {path}", details={"path": str(path)})
    if path.is_dir():
        return _read_dir(path, max_bytes)
    kind = bundle_kind(path)
    if kind == "zip":
        return _read_zip(path, max_bytes)
    if kind == "tar":
        return _read_tar(path, max_bytes)
    raise BundleFormatError(
        f"{path} is neither a directory, a .zip nor a .tar", details={"path": str(path)}
    )


def _add(result: BundleFiles, name: str, data: bytes, total: list[int], max_bytes: int) -> None:
    if not _safe(name):
        result.problems.append((name, "unsafe file name (absolute, '..', or unusual characters)"))
        return
    if name in result.files:
        result.problems.append((name, "the file appears twice in the bundle"))
        return
    total[0] += len(data)
    if total[0] > max_bytes:
        raise BundleFormatError(f"{result.source} holds more than {max_bytes} bytes")
    result.files[name] = data


def _read_dir(root: Path, max_bytes: int) -> BundleFiles:
    result = BundleFiles(str(root), "dir", {}, [])
    total = [0]
    for current, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        base = Path(current)
        for name in sorted(dirs):
            if (base / name).is_symlink():
                rel = (base / name).relative_to(root).as_posix()
                result.problems.append((rel, "a symbolic link (bundles hold regular files only)"))
        for name in sorted(names):
            full = base / name
            rel = full.relative_to(root).as_posix()
            mode = full.lstat().st_mode
            if not stat.S_ISREG(mode):
                result.problems.append((rel, "not a regular file (link or special file)"))
                continue
            _add(result, rel, full.read_bytes(), total, max_bytes)
    return result


def _read_zip(path: Path, max_bytes: int) -> BundleFiles:
    result = BundleFiles(str(path), "zip", {}, [])
    total = [0]
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if info.compress_type != zipfile.ZIP_STORED:
                    result.problems.append(
                        (
                            info.filename,
                            f"compressed (zip method {info.compress_type}): bundle members are "
                            "stored uncompressed",
                        )
                    )
                    continue
                mode = info.external_attr >> 16
                if info.create_system == 3 and mode and not stat.S_ISREG(mode):
                    result.problems.append(
                        (info.filename, f"not a regular file (Unix mode {mode:o}: a link or special file)")
                    )
                    continue
                if info.file_size > max_bytes:
                    raise BundleFormatError(f"{path}: {info.filename} is too large")
                _add(result, info.filename, archive.read(info), total, max_bytes)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        result.problems.append(("", f"the zip archive is damaged: {exc}"))
    return result


def _read_tar(path: Path, max_bytes: int) -> BundleFiles:
    result = BundleFiles(str(path), "tar", {}, [])
    total = [0]
    try:
        with tarfile.open(path, mode="r:") as archive:
            for member in archive:
                if member.isdir():
                    continue
                if not member.isreg():
                    result.problems.append((member.name, "not a regular file (link or device)"))
                    continue
                if member.size > max_bytes:
                    raise BundleFormatError(f"{path}: {member.name} is too large")
                handle = archive.extractfile(member)
                data = handle.read() if handle is not None else b""
                _add(result, member.name, data, total, max_bytes)
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        result.problems.append(("", f"the tar archive is damaged: {exc}"))
    return result
