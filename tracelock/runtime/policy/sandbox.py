"""The sandboxed filesystem toolset: read, write, delete, rename, list and mkdir under one root.

Every path comes from the agent as a relative POSIX string. It is checked, never repaired
(see ``parse_path``), then walked one component at a time from a directory descriptor of the
root, each component opened with ``O_NOFOLLOW`` relative to its parent's descriptor. Symbolic
links met on the way are resolved by the walk itself, inside the root: a link whose target is
absolute or climbs above the root ends the step with DENIED ``SANDBOX_PATH_ESCAPE``. The
kernel never sees a ``..`` or a ``/`` from the agent, so a path cannot leave the root by any
spelling, and a link swapped in during the walk is refused rather than followed.

Mutating operations (write, delete, rename, mkdir) never act through a symbolic link in the
final component; reads and listings follow one only while it stays inside the root.

Contents are text: UTF-8 in and out. Results are JSON-ready dicts; failures raise
:class:`~tracelock.runtime.outcomes.StepFailure` with a step code registered here.
``Sandbox.state_hash()`` fingerprints the whole tree so that "same proposal + same policy +
same filesystem state = same outcome" can be checked. See ``docs/policy.md``.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import hashlib
import os
import re
import stat
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, Self

from tracelock.core.hashing import canonical_hash
from tracelock.errors import RuntimeFault
from tracelock.runtime.outcomes import Outcome, StepCode, StepFailure, register_code

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "FS_OPERATIONS",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_SYMLINK_HOPS",
    "OPERATIONS",
    "OperationSpec",
    "Sandbox",
    "SandboxLimits",
    "SandboxRootError",
    "SideEffect",
    "file_extension",
    "parse_path",
]

SideEffect = Literal["read_only", "idempotent", "irreversible"]

#: The filesystem operations, in documentation order. Tool names are ``fs.<operation>``.
FS_OPERATIONS: Final = ("read", "write", "delete", "rename", "list", "mkdir")

#: Default cap on the size of a file read or written (1 MiB).
DEFAULT_MAX_FILE_BYTES: Final = 1_048_576
#: A path longer than this many UTF-8 bytes is rejected (Linux ``PATH_MAX``).
MAX_PATH_BYTES: Final = 4096
#: A path component longer than this many UTF-8 bytes is rejected (``NAME_MAX``).
MAX_NAME_BYTES: Final = 255
#: Symbolic links followed while resolving one path, at most (as the kernel's ``MAXSYMLINKS``).
MAX_SYMLINK_HOPS: Final = 40

_CHUNK = 1 << 16

# -- step codes -----------------------------------------------------------------------------

ARGUMENTS_INVALID = register_code(
    "SANDBOX_ARGUMENTS_INVALID",
    Outcome.VALIDATION_ERROR,
    "the arguments of a filesystem operation are missing, unexpected or of the wrong type",
)
PATH_INVALID = register_code(
    "SANDBOX_PATH_INVALID",
    Outcome.VALIDATION_ERROR,
    "a path is not a canonical relative POSIX path (absolute, '..', empty, NUL, backslash, "
    "drive form, invisible or non-NFC characters, too long)",
)
UNKNOWN_OPERATION = register_code(
    "SANDBOX_UNKNOWN_OPERATION",
    Outcome.VALIDATION_ERROR,
    "the filesystem toolset has no operation of that name",
)
PATH_ESCAPE = register_code(
    "SANDBOX_PATH_ESCAPE",
    Outcome.DENIED,
    "the path resolves outside the sandbox root (through a symbolic link)",
)
SYMLINK = register_code(
    "SANDBOX_SYMLINK",
    Outcome.DENIED,
    "a mutating operation would act through a symbolic link (final component)",
)
HARDLINK = register_code(
    "SANDBOX_HARDLINK",
    Outcome.DENIED,
    "the file has several hard links and may alias a file outside the root",
)
FILE_TOO_LARGE = register_code(
    "SANDBOX_FILE_TOO_LARGE",
    Outcome.DENIED,
    "the file or the content to write is larger than the policy's max_file_bytes",
)
EXTENSION_NOT_ALLOWED = register_code(
    "SANDBOX_EXTENSION_NOT_ALLOWED",
    Outcome.DENIED,
    "the file's extension is not in the policy's allowed extensions",
)
NOT_FOUND = register_code(
    "SANDBOX_NOT_FOUND", Outcome.EXECUTION_ERROR, "the path (or its parent directory) does not exist"
)
EXISTS = register_code(
    "SANDBOX_EXISTS", Outcome.EXECUTION_ERROR, "the target already exists (and may not be replaced)"
)
NOT_A_DIRECTORY = register_code(
    "SANDBOX_NOT_A_DIRECTORY",
    Outcome.EXECUTION_ERROR,
    "a directory was expected (a parent component or the path to list) but this is not one",
)
IS_A_DIRECTORY = register_code(
    "SANDBOX_IS_A_DIRECTORY", Outcome.EXECUTION_ERROR, "a file was expected but this is a directory"
)
NOT_A_FILE = register_code(
    "SANDBOX_NOT_A_FILE",
    Outcome.EXECUTION_ERROR,
    "the path names a special file (FIFO, socket, device), not a regular file",
)
NOT_EMPTY = register_code(
    "SANDBOX_NOT_EMPTY", Outcome.EXECUTION_ERROR, "the directory to delete is not empty"
)
NOT_TEXT = register_code(
    "SANDBOX_NOT_TEXT", Outcome.EXECUTION_ERROR, "the file's content is not valid UTF-8 text"
)
SYMLINK_LOOP = register_code(
    "SANDBOX_SYMLINK_LOOP",
    Outcome.EXECUTION_ERROR,
    f"resolving the path followed more than {MAX_SYMLINK_HOPS} symbolic links",
)
INVALID_TARGET = register_code(
    "SANDBOX_INVALID_TARGET",
    Outcome.EXECUTION_ERROR,
    "the operation is impossible on this target (e.g. renaming a directory into itself)",
)
IO_ERROR = register_code(
    "SANDBOX_IO_ERROR",
    Outcome.EXECUTION_ERROR,
    "the operating system refused the operation (details.errno names the error)",
)


class SandboxRootError(RuntimeFault):
    """The sandbox root given by the operator does not exist or is not a directory."""

    code: ClassVar[str] = "SANDBOX_ROOT_INVALID"


# -- limits and operation specs -------------------------------------------------------------


@dataclass(frozen=True)
class SandboxLimits:
    """Limits the sandbox enforces itself (the policy's ``[fs]`` table builds them).

    ``max_file_bytes`` caps both the content written and the file read (UTF-8 bytes).
    ``extensions`` is the set of allowed file extensions as returned by
    :func:`file_extension` (``""`` allows files without one); ``None`` allows any.
    """

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    extensions: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_file_bytes, bool) or not isinstance(self.max_file_bytes, int):
            raise TypeError("max_file_bytes must be an int")
        if self.max_file_bytes < 0:
            raise ValueError("max_file_bytes must not be negative")
        if self.extensions is not None:
            object.__setattr__(self, "extensions", frozenset(self.extensions))


@dataclass(frozen=True)
class OperationSpec:
    """One operation of the toolset as the runtime registers it."""

    operation: str
    tool_name: str
    side_effect: SideEffect
    description: str
    _schema: Mapping[str, Any] = field(repr=False)

    def args_schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of the operation's arguments (a fresh copy)."""
        return copy.deepcopy(dict(self._schema))


def _path_schema(description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": MAX_PATH_BYTES, "description": description}


def _object_schema(
    properties: dict[str, Any], required: list[str], description: str
) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "description": description,
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_REL = "relative POSIX path inside the sandbox root, NFC, no '.' or '..' components"

OPERATIONS: Final[Mapping[str, OperationSpec]] = {
    spec.tool_name: spec
    for spec in (
        OperationSpec(
            "read",
            "fs.read",
            "read_only",
            "Read a UTF-8 text file.",
            _object_schema({"path": _path_schema(_REL)}, ["path"], "Read a UTF-8 text file."),
        ),
        OperationSpec(
            "write",
            "fs.write",
            "idempotent",
            "Create or replace a UTF-8 text file; its parent directory must exist.",
            _object_schema(
                {"path": _path_schema(_REL), "content": {"type": "string"}},
                ["path", "content"],
                "Create or replace a UTF-8 text file; its parent directory must exist.",
            ),
        ),
        OperationSpec(
            "delete",
            "fs.delete",
            "irreversible",
            "Delete a file or an empty directory.",
            _object_schema(
                {"path": _path_schema(_REL)}, ["path"], "Delete a file or an empty directory."
            ),
        ),
        OperationSpec(
            "rename",
            "fs.rename",
            "irreversible",
            "Rename a file or directory; the destination must not exist.",
            _object_schema(
                {"source": _path_schema(_REL), "destination": _path_schema(_REL)},
                ["source", "destination"],
                "Rename a file or directory; the destination must not exist.",
            ),
        ),
        OperationSpec(
            "list",
            "fs.list",
            "read_only",
            "List a directory (sorted by name); '.' or no path lists the root.",
            _object_schema(
                {"path": _path_schema(_REL + "; '.' is the root")},
                [],
                "List a directory (sorted by name); '.' or no path lists the root.",
            ),
        ),
        OperationSpec(
            "mkdir",
            "fs.mkdir",
            "idempotent",
            "Create a directory (an existing directory is not an error); "
            "parents=true also creates missing parents.",
            _object_schema(
                {"path": _path_schema(_REL), "parents": {"type": "boolean"}},
                ["path"],
                "Create a directory (an existing directory is not an error); "
                "parents=true also creates missing parents.",
            ),
        ),
    )
}

# -- path syntax ----------------------------------------------------------------------------

_DRIVE = re.compile(r"[A-Za-z]:")
#: Unicode categories refused anywhere in a path: controls, format characters (zero-width,
#: bidirectional overrides, BOM), surrogates, private use, unassigned, line/paragraph
#: separators. Space separators other than U+0020 are refused as well.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _invalid(path: object, why: str) -> StepFailure:
    shown = path if isinstance(path, str) and _encodable(path) else repr(path)
    return StepFailure(PATH_INVALID, f"invalid path {shown!r}: {why}", path=shown, reason=why)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_path(path: object, *, allow_root: bool = False) -> tuple[str, ...]:
    """Check an agent path and return its components; never repair it.

    A valid path is a non-empty ``str`` of ``/``-separated components, none empty, ``.`` or
    ``..``; it is not absolute and has no drive form (``C:``), NUL, backslash, control,
    format (zero-width, bidi), private-use, unassigned or non-ASCII space characters; it is
    already in Unicode NFC; at most 4096 UTF-8 bytes with components of at most 255.
    With ``allow_root`` the single path ``"."`` is accepted and names the root (empty tuple).
    Anything else raises VALIDATION_ERROR ``SANDBOX_PATH_INVALID``.
    """
    if not isinstance(path, str):
        raise _invalid(path, "a path must be a string")
    if path == "":
        raise _invalid(path, "the path is empty")
    if allow_root and path == ".":
        return ()
    if not _encodable(path):
        raise _invalid(path, "the path contains a lone surrogate")
    if "\x00" in path:
        raise _invalid(path, "the path contains NUL")
    if "\\" in path:
        raise _invalid(path, "backslashes are not path separators here; use '/'")
    if path.startswith("/"):
        raise _invalid(path, "absolute paths are not allowed; give a path relative to the root")
    if _DRIVE.match(path):
        raise _invalid(path, "drive forms such as 'C:' are not allowed")
    for char in path:
        category = unicodedata.category(char)
        if category in _REFUSED_CATEGORIES or (category == "Zs" and char != " "):
            raise _invalid(path, f"character U+{ord(char):04X} ({category}) is not allowed")
    if unicodedata.normalize("NFC", path) != path:
        raise _invalid(path, "the path is not in Unicode normalization form NFC")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise _invalid(path, f"the path is longer than {MAX_PATH_BYTES} UTF-8 bytes")
    parts = tuple(path.split("/"))
    for part in parts:
        if part == "":
            raise _invalid(path, "empty component (leading, trailing or doubled '/')")
        if part in (".", ".."):
            raise _invalid(path, f"'{part}' components are not allowed")
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise _invalid(path, f"a component is longer than {MAX_NAME_BYTES} UTF-8 bytes")
    return parts


def file_extension(name: str) -> str:
    """The extension of a file name: from its last ``.`` on (``a.tar.gz`` -> ``.gz``).

    A name with no dot, whose only dot is its first character (``.bashrc``) or that ends with
    a dot has the empty extension ``""``. Comparison is exact (case-sensitive).
    """
    index = name.rfind(".")
    if index <= 0 or index == len(name) - 1:
        return ""
    return name[index:]


# -- the walk -------------------------------------------------------------------------------

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS: Final = (
    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
)


class _Walk:
    """A stack of directory descriptors from the root down; ``..`` pops, never below the root."""

    def __init__(self, fds: list[int], display: str) -> None:
        self.stack = fds
        self.display = display
        self.hops = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while self.stack:
            os.close(self.stack.pop())

    def top(self) -> int:
        return self.stack[-1]

    def clone(self) -> _Walk:
        fds: list[int] = []
        try:
            for fd in self.stack:
                fds.append(os.dup(fd))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return _Walk(fds, self.display)

    def _escape(self, why: str) -> StepFailure:
        return StepFailure(
            PATH_ESCAPE,
            f"path {self.display!r} resolves outside the sandbox root ({why})",
            path=self.display,
        )

    def resolve(
        self, components: Iterable[str], *, follow_last: bool, create_dirs: bool = False
    ) -> str | None:
        """Walk ``components`` from the current top.

        Intermediate components must be directories (symbolic links are resolved inside the
        root). Returns the final component's name, to be used relative to ``top()``; with
        ``follow_last`` the final component is resolved too and ``None`` means it is the
        directory ``top()`` itself. ``create_dirs`` creates missing intermediate directories.
        """
        pending = deque(components)
        creations = 0
        while pending:
            name = pending.popleft()
            if name == "..":
                if len(self.stack) == 1:
                    raise self._escape("a symbolic link climbs above the root")
                os.close(self.stack.pop())
                continue
            last = not pending
            if last and not follow_last:
                return name
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self.top())
            except FileNotFoundError:
                if last:
                    return name
                if create_dirs and creations < 8:
                    creations += 1
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=self.top())
                    pending.appendleft(name)
                    continue
                raise StepFailure(
                    NOT_FOUND,
                    f"a parent directory of {self.display!r} does not exist",
                    path=self.display,
                ) from None
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                info = os.stat(name, dir_fd=self.top(), follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    self.hops += 1
                    if self.hops > MAX_SYMLINK_HOPS:
                        raise StepFailure(
                            SYMLINK_LOOP,
                            f"resolving {self.display!r} followed more than "
                            f"{MAX_SYMLINK_HOPS} symbolic links",
                            path=self.display,
                        ) from None
                    target = os.readlink(name, dir_fd=self.top())
                    if target.startswith("/"):
                        raise self._escape("a symbolic link has an absolute target") from None
                    parts = [part for part in target.split("/") if part not in ("", ".")]
                    pending.extendleft(reversed(parts))
                    continue
                if last:
                    return name
                raise StepFailure(
                    NOT_A_DIRECTORY,
                    f"a parent component of {self.display!r} is not a directory",
                    path=self.display,
                ) from None
            self.stack.append(fd)
        return None


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "UNKNOWN") if exc.errno else "UNKNOWN"


_ERRNO_CODES: Final[Mapping[int, StepCode]] = {
    errno.ENOENT: NOT_FOUND,
    errno.EEXIST: EXISTS,
    errno.ENOTEMPTY: NOT_EMPTY,
    errno.ENOTDIR: NOT_A_DIRECTORY,
    errno.EISDIR: IS_A_DIRECTORY,
    errno.ELOOP: SYMLINK,
    errno.EINVAL: INVALID_TARGET,
    errno.ENXIO: NOT_A_FILE,
}


def _os_failure(exc: OSError, operation: str, display: str) -> StepFailure:
    name = _errno_name(exc)
    step_code = _ERRNO_CODES.get(exc.errno or 0, IO_ERROR)
    return StepFailure(
        step_code, f"{operation} {display!r} failed: {name}", path=display, errno=name
    )


# -- the toolset ----------------------------------------------------------------------------


class Sandbox:
    """The filesystem toolset confined to ``root`` (resolved once, at construction).

    Every operation returns a JSON-ready dict or raises ``StepFailure``. The order of the
    checks is fixed (arguments, path syntax, limits known from the arguments, resolution,
    the target's state, limits known from the file), so the same request against the same
    tree always fails the same way.
    """

    def __init__(self, root: Path | str, limits: SandboxLimits | None = None) -> None:
        try:
            resolved = Path(root).resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise SandboxRootError(
                f"sandbox root {str(root)!r} cannot be resolved: {type(exc).__name__}",
                details={"root": str(root)},
            ) from None
        if not resolved.is_dir():
            raise SandboxRootError(
                f"sandbox root {str(root)!r} is not a directory", details={"root": str(root)}
            )
        self.root: Path = resolved
        self.limits: SandboxLimits = limits if limits is not None else SandboxLimits()

    # -- plumbing --

    def _open_root(self, display: str) -> _Walk:
        try:
            # the root was resolved at construction: a link there now is a swapped root
            fd = os.open(self.root, _DIR_FLAGS)
        except OSError as exc:
            raise StepFailure(
                IO_ERROR,
                f"the sandbox root cannot be opened: {_errno_name(exc)}",
                path=display,
                errno=_errno_name(exc),
            ) from None
        return _Walk([fd], display)

    def _check_extension(self, name: str, display: str) -> None:
        allowed = self.limits.extensions
        if allowed is None:
            return
        extension = file_extension(name)
        if extension not in allowed:
            raise StepFailure(
                EXTENSION_NOT_ALLOWED,
                f"{display!r}: extension {extension!r} is not allowed",
                path=display,
                extension=extension,
                allowed=sorted(allowed),
            )

    def _too_large(self, size: int, display: str) -> StepFailure:
        return StepFailure(
            FILE_TOO_LARGE,
            f"{display!r}: {size} bytes is over the limit of {self.limits.max_file_bytes}",
            path=display,
            size=size,
            limit=self.limits.max_file_bytes,
        )

    def _refuse_link(self, walk: _Walk, name: str, display: str) -> StepFailure:
        """A mutation met a symbolic link as its final component: escape or plain refusal."""
        probe = walk.clone()
        try:
            probe.resolve([name], follow_last=True)
        except StepFailure as failure:
            if failure.step_code is PATH_ESCAPE:
                return failure
        except OSError:
            pass
        finally:
            probe.close()
        return StepFailure(
            SYMLINK,
            f"{display!r} is a symbolic link; the sandbox does not modify through links",
            path=display,
        )

    def _run(self, operation: str, display: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return body()
        except OSError as exc:
            raise _os_failure(exc, operation, display) from None

    # -- dispatch --

    def execute(self, tool_name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run the operation registered as ``tool_name`` (``fs.read`` ...) with JSON ``args``."""
        spec = OPERATIONS.get(tool_name) if isinstance(tool_name, str) else None
        if spec is None:
            raise StepFailure(
                UNKNOWN_OPERATION,
                f"unknown filesystem operation {tool_name!r}",
                operation=str(tool_name),
            )
        checked = _check_args(spec, args)
        if spec.operation == "read":
            return self.read(checked["path"])
        if spec.operation == "write":
            return self.write(checked["path"], checked["content"])
        if spec.operation == "delete":
            return self.delete(checked["path"])
        if spec.operation == "rename":
            return self.rename(checked["source"], checked["destination"])
        if spec.operation == "list":
            return self.list_dir(checked.get("path", "."))
        return self.mkdir(checked["path"], parents=checked.get("parents", False))

    # -- operations --

    def read(self, path: str) -> dict[str, Any]:
        """``{"path", "content", "size"}`` of a UTF-8 text file (links followed inside the root)."""
        parts = parse_path(path)
        self._check_extension(parts[-1], path)

        def body() -> dict[str, Any]:
            with self._open_root(path) as walk:
                name = walk.resolve(parts, follow_last=True)
                if name is None:
                    raise StepFailure(IS_A_DIRECTORY, f"{path!r} is a directory", path=path)
                self._check_extension(name, path)
                try:
                    fd = os.open(name, _READ_FLAGS, dir_fd=walk.top())
                except FileNotFoundError:
                    raise StepFailure(NOT_FOUND, f"{path!r} does not exist", path=path) from None
                try:
                    info = os.fstat(fd)
                    self._check_regular(info, path)
                    if info.st_size > self.limits.max_file_bytes:
                        raise self._too_large(info.st_size, path)
                    data = _read_at_most(fd, self.limits.max_file_bytes + 1)
                finally:
                    os.close(fd)
            if len(data) > self.limits.max_file_bytes:
                raise self._too_large(len(data), path)
            try:
                content = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise StepFailure(
                    NOT_TEXT,
                    f"{path!r} is not UTF-8 text (invalid byte at offset {exc.start})",
                    path=path,
                    offset=exc.start,
                ) from None
            return {"path": path, "content": content, "size": len(data)}

        return self._run("read", path, body)

    def _check_regular(self, info: os.stat_result, display: str) -> None:
        if stat.S_ISDIR(info.st_mode):
            raise StepFailure(IS_A_DIRECTORY, f"{display!r} is a directory", path=display)
        if not stat.S_ISREG(info.st_mode):
            raise StepFailure(NOT_A_FILE, f"{display!r} is not a regular file", path=display)
        if info.st_nlink > 1:
            raise StepFailure(
                HARDLINK,
                f"{display!r} has {info.st_nlink} hard links; refusing to touch its content",
                path=display,
                links=info.st_nlink,
            )

    def write(self, path: str, content: str) -> dict[str, Any]:
        """Create or replace a text file; ``{"path", "size", "created"}``."""
        parts = parse_path(path)
        data = _encode_content(content)
        self._check_extension(parts[-1], path)
        if len(data) > self.limits.max_file_bytes:
            raise self._too_large(len(data), path)

        def body() -> dict[str, Any]:
            with self._open_root(path) as walk:
                name = walk.resolve(parts, follow_last=False)
                assert name is not None
                dir_fd = walk.top()
                info = _lstat(dir_fd, name)
                if info is not None:
                    if stat.S_ISLNK(info.st_mode):
                        raise self._refuse_link(walk, name, path)
                    self._check_regular(info, path)
                try:
                    fd = os.open(name, _WRITE_FLAGS, 0o644, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        raise self._refuse_link(walk, name, path) from None
                    raise
                try:
                    self._check_regular(os.fstat(fd), path)
                    os.ftruncate(fd, 0)
                    view = memoryview(data)
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            return {"path": path, "size": len(data), "created": info is None}

        return self._run("write", path, body)

    def delete(self, path: str) -> dict[str, Any]:
        """Delete a file or an empty directory; ``{"path", "type"}``."""
        parts = parse_path(path)

        def body() -> dict[str, Any]:
            with self._open_root(path) as walk:
                name = walk.resolve(parts, follow_last=False)
                assert name is not None
                dir_fd = walk.top()
                info = _lstat(dir_fd, name)
                if info is None:
                    raise StepFailure(NOT_FOUND, f"{path!r} does not exist", path=path)
                if stat.S_ISLNK(info.st_mode):
                    raise self._refuse_link(walk, name, path)
                if stat.S_ISDIR(info.st_mode):
                    os.rmdir(name, dir_fd=dir_fd)
                    return {"path": path, "type": "directory"}
                self._check_extension(name, path)
                os.unlink(name, dir_fd=dir_fd)
                return {"path": path, "type": "file" if stat.S_ISREG(info.st_mode) else "other"}

        return self._run("delete", path, body)

    def rename(self, source: str, destination: str) -> dict[str, Any]:
        """Rename ``source`` to ``destination`` (which must not exist);
        ``{"source", "destination", "type"}``."""
        src_parts = parse_path(source)
        dst_parts = parse_path(destination)

        def body() -> dict[str, Any]:
            with self._open_root(source) as src_walk, self._open_root(destination) as dst_walk:
                src_name = src_walk.resolve(src_parts, follow_last=False)
                assert src_name is not None
                info = _lstat(src_walk.top(), src_name)
                if info is None:
                    raise StepFailure(NOT_FOUND, f"{source!r} does not exist", path=source)
                if stat.S_ISLNK(info.st_mode):
                    raise self._refuse_link(src_walk, src_name, source)
                is_dir = stat.S_ISDIR(info.st_mode)
                if not is_dir:
                    self._check_extension(src_name, source)
                    self._check_extension(dst_parts[-1], destination)
                dst_name = dst_walk.resolve(dst_parts, follow_last=False)
                assert dst_name is not None
                existing = _lstat(dst_walk.top(), dst_name)
                if existing is not None:
                    if stat.S_ISLNK(existing.st_mode):
                        raise self._refuse_link(dst_walk, dst_name, destination)
                    raise StepFailure(
                        EXISTS, f"{destination!r} already exists", path=destination
                    )
                os.rename(
                    src_name, dst_name, src_dir_fd=src_walk.top(), dst_dir_fd=dst_walk.top()
                )
            kind = "directory" if is_dir else ("file" if stat.S_ISREG(info.st_mode) else "other")
            return {"source": source, "destination": destination, "type": kind}

        return self._run("rename", source, body)

    def list_dir(self, path: str = ".") -> dict[str, Any]:
        """``{"path", "entries", "skipped"}``: entries sorted by name, each
        ``{"name", "type", "size"}`` (type file, directory, symlink or other; size for files,
        else null). Links are listed, not followed. ``skipped`` counts names that are not
        valid UTF-8 (they cannot be addressed by any path)."""
        parts = parse_path(path, allow_root=True)

        def body() -> dict[str, Any]:
            with self._open_root(path) as walk:
                name = walk.resolve(parts, follow_last=True)
                if name is not None:
                    if _lstat(walk.top(), name) is None:
                        raise StepFailure(NOT_FOUND, f"{path!r} does not exist", path=path)
                    raise StepFailure(NOT_A_DIRECTORY, f"{path!r} is not a directory", path=path)
                dir_fd = walk.top()
                entries: list[dict[str, Any]] = []
                skipped = 0
                for entry_name in os.listdir(dir_fd):
                    if not _encodable(entry_name):
                        skipped += 1
                        continue
                    info = _lstat(dir_fd, entry_name)
                    if info is None:
                        continue
                    kind = _kind(info.st_mode)
                    entries.append(
                        {
                            "name": entry_name,
                            "type": kind,
                            "size": info.st_size if kind == "file" else None,
                        }
                    )
            entries.sort(key=lambda item: str(item["name"]))
            return {"path": path, "entries": entries, "skipped": skipped}

        return self._run("list", path, body)

    def mkdir(self, path: str, *, parents: bool = False) -> dict[str, Any]:
        """Create a directory; ``{"path", "created"}`` (``created`` false if it existed)."""
        parts = parse_path(path)
        if not isinstance(parents, bool):
            raise StepFailure(ARGUMENTS_INVALID, "parents must be a boolean", argument="parents")

        def body() -> dict[str, Any]:
            with self._open_root(path) as walk:
                name = walk.resolve(parts, follow_last=False, create_dirs=parents)
                assert name is not None
                dir_fd = walk.top()
                info = _lstat(dir_fd, name)
                if info is None:
                    try:
                        os.mkdir(name, 0o755, dir_fd=dir_fd)
                        return {"path": path, "created": True}
                    except FileExistsError:
                        info = _lstat(dir_fd, name)
                        if info is None:
                            raise
                if stat.S_ISLNK(info.st_mode):
                    raise self._refuse_link(walk, name, path)
                if stat.S_ISDIR(info.st_mode):
                    return {"path": path, "created": False}
                raise StepFailure(EXISTS, f"{path!r} exists and is not a directory", path=path)

        return self._run("mkdir", path, body)

    # -- state --

    def state(self) -> list[dict[str, Any]]:
        """Every file, directory, link and special file under the root, sorted by path bytes.

        Entries: ``{"path", "type": "directory"}``, ``{"path", "type": "file", "size",
        "sha256"}``, ``{"path", "type": "symlink", "target"}``, ``{"path", "type": "other"}``.
        A path (or link target) that is not valid UTF-8 is given as ``path_hex``
        (``target_hex``) instead. Modes, owners and times are not part of the state.
        """
        try:
            return self._state()
        except OSError as exc:
            raise _os_failure(exc, "state of", ".") from None

    def _state(self) -> list[dict[str, Any]]:
        keyed: list[tuple[bytes, dict[str, Any]]] = []
        root_fd = self._open_root(".").stack.pop()
        todo: list[tuple[int, bytes]] = [(root_fd, b"")]
        try:
            while todo:
                dir_fd, prefix = todo.pop()
                try:
                    for entry_name in os.listdir(dir_fd):
                        raw = os.fsencode(entry_name)
                        rel = prefix + raw
                        info = _lstat(dir_fd, entry_name)
                        if info is None:
                            continue
                        entry = _bytes_field("path", rel)
                        kind = _kind(info.st_mode)
                        entry["type"] = kind
                        if kind == "directory":
                            child = os.open(entry_name, _DIR_FLAGS, dir_fd=dir_fd)
                            todo.append((child, rel + b"/"))
                        elif kind == "file":
                            size, digest = _hash_file(dir_fd, entry_name)
                            entry["size"] = size
                            entry["sha256"] = digest
                        elif kind == "symlink":
                            target = os.fsencode(os.readlink(entry_name, dir_fd=dir_fd))
                            entry.update(_bytes_field("target", target))
                        keyed.append((rel, entry))
                finally:
                    os.close(dir_fd)
        finally:
            for dir_fd, _ in todo:
                os.close(dir_fd)
        keyed.sort(key=lambda item: item[0])
        return [entry for _, entry in keyed]

    def state_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`state`."""
        return canonical_hash(self.state())


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _bytes_field(key: str, raw: bytes) -> dict[str, Any]:
    try:
        return {key: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{key}_hex": raw.hex()}


def _hash_file(dir_fd: int, name: str) -> tuple[int, str]:
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return size, digest.hexdigest()


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(_CHUNK, remaining))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _encode_content(content: object) -> bytes:
    if not isinstance(content, str):
        raise StepFailure(ARGUMENTS_INVALID, "content must be a string", argument="content")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StepFailure(
            ARGUMENTS_INVALID,
            f"content contains a lone surrogate at index {exc.start}; it has no UTF-8 form",
            argument="content",
        ) from None


_ARG_TYPES: Final[Mapping[str, Mapping[str, tuple[type, bool]]]] = {
    "read": {"path": (str, True)},
    "write": {"path": (str, True), "content": (str, True)},
    "delete": {"path": (str, True)},
    "rename": {"source": (str, True), "destination": (str, True)},
    "list": {"path": (str, False)},
    "mkdir": {"path": (str, True), "parents": (bool, False)},
}


def _check_args(spec: OperationSpec, args: object) -> dict[str, Any]:
    """The argument checks of the operation's JSON Schema, done here too (defence in depth)."""
    if not isinstance(args, Mapping):
        raise StepFailure(
            ARGUMENTS_INVALID, f"{spec.tool_name} arguments must be an object", tool=spec.tool_name
        )
    expected = _ARG_TYPES[spec.operation]
    for key in args:
        if key not in expected:
            raise StepFailure(
                ARGUMENTS_INVALID,
                f"{spec.tool_name} takes no argument {str(key)!r}",
                tool=spec.tool_name,
                argument=str(key),
            )
    checked: dict[str, Any] = {}
    for key, (kind, required) in expected.items():
        if key not in args:
            if required:
                raise StepFailure(
                    ARGUMENTS_INVALID,
                    f"{spec.tool_name} requires the argument {key!r}",
                    tool=spec.tool_name,
                    argument=key,
                )
            continue
        value = args[key]
        if not isinstance(value, kind):
            raise StepFailure(
                ARGUMENTS_INVALID,
                f"{spec.tool_name} argument {key!r} must be a {kind.__name__}",
                tool=spec.tool_name,
                argument=key,
            )
        checked[key] = value
    return checked
