"""The sandboxed filesystem toolset: confinement, limits, codes, schemas and the state hash."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest

from tracelock.runtime.outcomes import Outcome, StepFailure, lookup_code
from tracelock.runtime.policy.sandbox import (
    FS_OPERATIONS,
    MAX_SYMLINK_HOPS,
    OPERATIONS,
    Sandbox,
    SandboxLimits,
    SandboxRootError,
    file_extension,
    parse_path,
)

SECRET = "outside secret\n"


@dataclass
class Layout:
    base: Path
    root: Path
    outside: Path
    sandbox: Sandbox

    def outside_hash(self) -> str:
        return Sandbox(self.outside).state_hash()

    def base_names(self) -> list[str]:
        return sorted(os.listdir(self.base))


def make_layout(base: Path, limits: SandboxLimits | None = None) -> Layout:
    root = base / "root"
    outside = base / "outside"
    root.mkdir(parents=True)
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "dir" / "inner.txt").write_text(SECRET)
    return Layout(base, root, outside, Sandbox(root, limits))


@pytest.fixture
def lay(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def fails(code: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> StepFailure:
    with pytest.raises(StepFailure) as info:
        func(*args, **kwargs)
    assert info.value.step_code.code == code, info.value.message
    assert lookup_code(code) is info.value.step_code
    return info.value


# -- path syntax ----------------------------------------------------------------------------

INVALID_PATHS = [
    "",
    "/etc/passwd",
    "/",
    "//server/share",
    "..",
    "../x.txt",
    "a/../b.txt",
    "a/..",
    ".",
    "./a.txt",
    "a/./b.txt",
    "a/",
    "a//b.txt",
    "a\\b.txt",
    "..\\x.txt",
    "C:x.txt",
    "c:/x.txt",
    "C:\\x.txt",
    "a\x00b.txt",
    "a\nb.txt",
    "\x7f.txt",
    "\u202etxt.exe",  # right-to-left override
    "a\u200bb.txt",  # zero-width space
    "\ufeffa.txt",  # byte order mark
    "a\u00a0b.txt",  # no-break space
    "a\u3000b.txt",  # ideographic space
    "a\u2028b.txt",  # line separator
    "\ue000.txt",  # private use
    "e\u0301.txt",  # decomposed: not NFC
    "\ud800.txt",  # lone surrogate
    "x" * 256,
    "/".join(["d" * 200] * 21),
]


@pytest.mark.parametrize("path", INVALID_PATHS)
def test_invalid_paths_are_validation_errors(lay: Layout, path: str) -> None:
    before = lay.outside_hash()
    for op in (lay.sandbox.read, lay.sandbox.delete, lay.sandbox.mkdir):
        failure = fails("SANDBOX_PATH_INVALID", op, path)
        assert failure.outcome is Outcome.VALIDATION_ERROR
    fails("SANDBOX_PATH_INVALID", lay.sandbox.write, path, "x")
    fails("SANDBOX_PATH_INVALID", lay.sandbox.rename, path, "ok.txt")
    fails("SANDBOX_PATH_INVALID", lay.sandbox.rename, "ok.txt", path)
    if path != ".":
        fails("SANDBOX_PATH_INVALID", lay.sandbox.list_dir, path)
    assert lay.outside_hash() == before
    assert os.listdir(lay.root) == []


@pytest.mark.parametrize("value", [None, 1, b"a.txt", ["a.txt"], True])
def test_non_string_paths(value: object) -> None:
    with pytest.raises(StepFailure) as info:
        parse_path(value)
    assert info.value.step_code.code == "SANDBOX_PATH_INVALID"


def test_valid_paths_are_returned_unchanged() -> None:
    assert parse_path("a/b/c.txt") == ("a", "b", "c.txt")
    assert parse_path("\u00e9t\u00e9/\u65e5\u672c.md") == ("\u00e9t\u00e9", "\u65e5\u672c.md")
    assert parse_path("with space.txt") == ("with space.txt",)
    assert parse_path("...") == ("...",)
    assert parse_path(".hidden") == (".hidden",)
    assert parse_path(".", allow_root=True) == ()
    assert parse_path("x" * 255) == ("x" * 255,)


def test_lookalike_characters_stay_literal_names_inside_the_root(lay: Layout) -> None:
    """Fullwidth dots, division slash, two-dot leader: ordinary names, never separators."""
    before = lay.outside_hash()
    names = ["\uff0e\uff0e", "a\u2215b.txt", "\u2025", "\uff0f.txt", "\u2044x.txt"]
    for name in names:
        lay.sandbox.write(name, "inside")
        assert (lay.root / name).read_text() == "inside"
    lay.sandbox.mkdir("\uff0e\uff0e\uff0f")
    lay.sandbox.write("\uff0e\uff0e\uff0f/x.txt", "deep")
    assert (lay.root / "\uff0e\uff0e\uff0f" / "x.txt").read_text() == "deep"
    assert lay.outside_hash() == before
    assert lay.base_names() == ["outside", "root"]


# -- symbolic links -------------------------------------------------------------------------


def plant_links(lay: Layout) -> None:
    root = lay.root
    os.symlink(lay.outside, root / "abs_dir")  # absolute, to the outside directory
    os.symlink(lay.outside / "secret.txt", root / "abs_file.txt")
    os.symlink("../outside", root / "rel_dir")  # relative, climbing out
    os.symlink("../outside/secret.txt", root / "rel_file.txt")
    os.symlink("chain2", root / "chain1")  # chain ending outside
    os.symlink("chain3", root / "chain2")
    os.symlink("../outside", root / "chain3")
    os.symlink("chain_file2.txt", root / "chain_file1.txt")
    os.symlink("../outside/secret.txt", root / "chain_file2.txt")
    (root / "sub").mkdir()
    os.symlink("../../outside", root / "sub" / "up")  # a link dir in the middle of a path
    os.symlink("../..", root / "sub" / "dotdot")
    os.symlink("/", root / "slash")
    os.symlink(str(lay.outside / "new.txt"), root / "dangling.txt")  # dangling, outside
    os.symlink("loop_b", root / "loop_a")
    os.symlink("loop_a", root / "loop_b")


ESCAPING = [
    "abs_dir/secret.txt",
    "abs_file.txt",
    "rel_dir/secret.txt",
    "rel_file.txt",
    "chain1/secret.txt",
    "chain_file1.txt",
    "sub/up/secret.txt",
    "sub/up/dir/inner.txt",
    "sub/dotdot/outside/secret.txt",
    "slash/etc/passwd",
    "dangling.txt",
]


@pytest.mark.parametrize("path", ESCAPING)
def test_reading_through_an_escaping_link_is_denied(lay: Layout, path: str) -> None:
    plant_links(lay)
    failure = fails("SANDBOX_PATH_ESCAPE", lay.sandbox.read, path)
    assert failure.outcome is Outcome.DENIED
    assert SECRET not in failure.message


@pytest.mark.parametrize("path", ESCAPING)
def test_mutating_through_an_escaping_link_is_denied(lay: Layout, path: str) -> None:
    plant_links(lay)
    before = lay.outside_hash()
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.write, path, "pwned")
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.delete, path)
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.rename, path, "moved.txt")
    lay.sandbox.write("mine.txt", "x")
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.rename, "mine.txt", path)
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.mkdir, path)
    assert lay.outside_hash() == before
    assert lay.base_names() == ["outside", "root"]


@pytest.mark.parametrize("path", ["abs_dir", "rel_dir", "chain1", "sub/up", "sub/dotdot", "slash"])
def test_listing_an_escaping_directory_is_denied(lay: Layout, path: str) -> None:
    plant_links(lay)
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.list_dir, path)


@pytest.mark.parametrize("path", ["abs_dir/new.txt", "rel_dir/new.txt", "sub/up/dir/new.txt"])
def test_creating_through_an_escaping_directory_link_is_denied(lay: Layout, path: str) -> None:
    plant_links(lay)
    before = lay.outside_hash()
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.write, path, "pwned")
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.mkdir, path)
    fails("SANDBOX_PATH_ESCAPE", lay.sandbox.mkdir, path + "/deeper", parents=True)
    assert lay.outside_hash() == before
    assert not (lay.outside / "new.txt").exists()


def test_symlink_loops_end_with_a_loop_code(lay: Layout) -> None:
    plant_links(lay)
    failure = fails("SANDBOX_SYMLINK_LOOP", lay.sandbox.read, "loop_a")
    assert failure.outcome is Outcome.EXECUTION_ERROR
    fails("SANDBOX_SYMLINK_LOOP", lay.sandbox.read, "loop_a/x.txt")
    # a mutation on a looping final link is refused as a link, not followed
    fails("SANDBOX_SYMLINK", lay.sandbox.write, "loop_a", "x")


def test_long_chains_inside_the_root_are_bounded(lay: Layout) -> None:
    (lay.root / "target.txt").write_text("end")
    os.symlink("target.txt", lay.root / "c0")
    for i in range(1, MAX_SYMLINK_HOPS + 2):
        os.symlink(f"c{i - 1}", lay.root / f"c{i}")
    assert lay.sandbox.read(f"c{MAX_SYMLINK_HOPS - 1}")["content"] == "end"
    fails("SANDBOX_SYMLINK_LOOP", lay.sandbox.read, f"c{MAX_SYMLINK_HOPS + 1}")


def test_links_inside_the_root_are_followed_for_reading_and_listing(lay: Layout) -> None:
    (lay.root / "real").mkdir()
    (lay.root / "real" / "f.txt").write_text("inside")
    os.symlink("real", lay.root / "alias")
    os.symlink("real/f.txt", lay.root / "f_alias.txt")
    os.symlink("../real/f.txt", lay.root / "real" / "self.txt")
    os.symlink("real/..", lay.root / "rootish")
    assert lay.sandbox.read("alias/f.txt")["content"] == "inside"
    assert lay.sandbox.read("f_alias.txt")["content"] == "inside"
    assert lay.sandbox.read("alias/self.txt")["content"] == "inside"
    assert lay.sandbox.read("rootish/real/f.txt")["content"] == "inside"
    names = [e["name"] for e in lay.sandbox.list_dir("alias")["entries"]]
    assert names == ["f.txt", "self.txt"]
    # an intermediate link inside the root may be written through
    lay.sandbox.write("alias/new.txt", "via alias")
    assert (lay.root / "real" / "new.txt").read_text() == "via alias"


def test_mutations_never_act_through_a_final_link_even_inside_the_root(lay: Layout) -> None:
    (lay.root / "real.txt").write_text("keep")
    (lay.root / "dir").mkdir()
    os.symlink("real.txt", lay.root / "link.txt")
    os.symlink("dir", lay.root / "dirlink")
    fails("SANDBOX_SYMLINK", lay.sandbox.write, "link.txt", "changed")
    fails("SANDBOX_SYMLINK", lay.sandbox.delete, "link.txt")
    fails("SANDBOX_SYMLINK", lay.sandbox.rename, "link.txt", "other.txt")
    fails("SANDBOX_SYMLINK", lay.sandbox.rename, "real.txt", "link.txt")
    fails("SANDBOX_SYMLINK", lay.sandbox.mkdir, "dirlink")
    fails("SANDBOX_SYMLINK", lay.sandbox.delete, "dirlink")
    assert (lay.root / "real.txt").read_text() == "keep"
    assert (lay.root / "link.txt").is_symlink()


def test_hard_links_are_refused_for_content_access(lay: Layout) -> None:
    try:
        os.link(lay.outside / "secret.txt", lay.root / "hard.txt")
    except OSError:
        pytest.skip("hard links are not supported on this filesystem")
    before = lay.outside_hash()
    fails("SANDBOX_HARDLINK", lay.sandbox.read, "hard.txt")
    fails("SANDBOX_HARDLINK", lay.sandbox.write, "hard.txt", "pwned")
    assert lay.outside_hash() == before
    # removing the name is harmless to the other link
    lay.sandbox.delete("hard.txt")
    assert (lay.outside / "secret.txt").read_text() == SECRET


def test_special_files_are_not_opened(lay: Layout) -> None:
    os.mkfifo(lay.root / "pipe.txt")
    fails("SANDBOX_NOT_A_FILE", lay.sandbox.read, "pipe.txt")  # must not block
    fails("SANDBOX_NOT_A_FILE", lay.sandbox.write, "pipe.txt", "x")
    entries = lay.sandbox.list_dir()["entries"]
    assert entries == [{"name": "pipe.txt", "type": "other", "size": None}]
    assert lay.sandbox.delete("pipe.txt") == {"path": "pipe.txt", "type": "other"}


# -- operations and execution errors --------------------------------------------------------


def test_round_trip_of_every_operation(lay: Layout) -> None:
    sb = lay.sandbox
    assert sb.mkdir("docs") == {"path": "docs", "created": True}
    assert sb.mkdir("docs") == {"path": "docs", "created": False}
    assert sb.write("docs/a.txt", "h\u00e9llo\n") == {
        "path": "docs/a.txt",
        "size": 7,
        "created": True,
    }
    assert sb.write("docs/a.txt", "again") == {"path": "docs/a.txt", "size": 5, "created": False}
    assert sb.read("docs/a.txt") == {"path": "docs/a.txt", "content": "again", "size": 5}
    assert sb.rename("docs/a.txt", "b.txt") == {
        "source": "docs/a.txt",
        "destination": "b.txt",
        "type": "file",
    }
    assert sb.list_dir(".") == {
        "path": ".",
        "entries": [
            {"name": "b.txt", "type": "file", "size": 5},
            {"name": "docs", "type": "directory", "size": None},
        ],
        "skipped": 0,
    }
    assert sb.delete("b.txt") == {"path": "b.txt", "type": "file"}
    assert sb.delete("docs") == {"path": "docs", "type": "directory"}
    assert sb.list_dir() == {"path": ".", "entries": [], "skipped": 0}


def test_write_truncates_and_keeps_text_exact(lay: Layout) -> None:
    lay.sandbox.write("t.txt", "a long first version\r\n")
    lay.sandbox.write("t.txt", "\ufeffshort\r\n")
    assert (lay.root / "t.txt").read_bytes() == "\ufeffshort\r\n".encode()
    assert lay.sandbox.read("t.txt")["content"] == "\ufeffshort\r\n"


def test_mkdir_parents(lay: Layout) -> None:
    fails("SANDBOX_NOT_FOUND", lay.sandbox.mkdir, "a/b/c")
    assert lay.sandbox.mkdir("a/b/c", parents=True) == {"path": "a/b/c", "created": True}
    assert (lay.root / "a" / "b" / "c").is_dir()
    (lay.root / "file.txt").write_text("x")
    fails("SANDBOX_NOT_A_DIRECTORY", lay.sandbox.mkdir, "file.txt/d", parents=True)
    fails("SANDBOX_EXISTS", lay.sandbox.mkdir, "file.txt")


def test_execution_errors(lay: Layout) -> None:
    sb = lay.sandbox
    (lay.root / "d").mkdir()
    (lay.root / "d" / "f.txt").write_text("x")
    (lay.root / "bin.txt").write_bytes(b"\xff\xfe\x00")
    cases: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
        ("SANDBOX_NOT_FOUND", sb.read, ("missing.txt",)),
        ("SANDBOX_NOT_FOUND", sb.read, ("nodir/x.txt",)),
        ("SANDBOX_NOT_FOUND", sb.write, ("nodir/x.txt", "x")),
        ("SANDBOX_NOT_FOUND", sb.delete, ("missing.txt",)),
        ("SANDBOX_NOT_FOUND", sb.rename, ("missing.txt", "y.txt")),
        ("SANDBOX_NOT_FOUND", sb.rename, ("d/f.txt", "nodir/y.txt")),
        ("SANDBOX_NOT_FOUND", sb.list_dir, ("missing",)),
        ("SANDBOX_IS_A_DIRECTORY", sb.read, ("d",)),
        ("SANDBOX_IS_A_DIRECTORY", sb.write, ("d", "x")),
        ("SANDBOX_NOT_A_DIRECTORY", sb.list_dir, ("d/f.txt",)),
        ("SANDBOX_NOT_A_DIRECTORY", sb.read, ("d/f.txt/x.txt",)),
        ("SANDBOX_NOT_A_DIRECTORY", sb.write, ("d/f.txt/x.txt", "x")),
        ("SANDBOX_NOT_EMPTY", sb.delete, ("d",)),
        ("SANDBOX_EXISTS", sb.rename, ("bin.txt", "d/f.txt")),
        ("SANDBOX_EXISTS", sb.rename, ("bin.txt", "d")),
        ("SANDBOX_INVALID_TARGET", sb.rename, ("d", "d/inner")),
        ("SANDBOX_NOT_TEXT", sb.read, ("bin.txt",)),
    ]
    before = Sandbox(lay.root).state_hash()
    for code, func, args in cases:
        failure = fails(code, func, *args)
        assert failure.outcome is Outcome.EXECUTION_ERROR
        assert failure.details["path"] in args
    assert Sandbox(lay.root).state_hash() == before


def test_non_utf8_names_are_skipped_by_list_and_hashed_as_hex(lay: Layout) -> None:
    fd = os.open(os.fsencode(lay.root) + b"/bad\xff.txt", os.O_CREAT | os.O_WRONLY, 0o644)
    os.close(fd)
    (lay.root / "good.txt").write_text("g")
    listing = lay.sandbox.list_dir()
    assert listing["skipped"] == 1
    assert [e["name"] for e in listing["entries"]] == ["good.txt"]
    state = lay.sandbox.state()
    assert {"path_hex": b"bad\xff.txt".hex(), "type": "file", "size": 0,
            "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"} in state


# -- limits ---------------------------------------------------------------------------------


def test_size_limit_counts_utf8_bytes(tmp_path: Path) -> None:
    lay = make_layout(tmp_path, SandboxLimits(max_file_bytes=10))
    assert lay.sandbox.write("ok.txt", "\u00e9" * 5)["size"] == 10
    failure = fails("SANDBOX_FILE_TOO_LARGE", lay.sandbox.write, "big.txt", "\u00e9" * 6)
    assert failure.outcome is Outcome.DENIED
    assert failure.details == {"path": "big.txt", "size": 12, "limit": 10}
    assert not (lay.root / "big.txt").exists()
    (lay.root / "planted.txt").write_text("x" * 11)
    fails("SANDBOX_FILE_TOO_LARGE", lay.sandbox.read, "planted.txt")
    assert lay.sandbox.read("ok.txt")["size"] == 10


def test_zero_size_limit_allows_only_empty_files(tmp_path: Path) -> None:
    lay = make_layout(tmp_path, SandboxLimits(max_file_bytes=0))
    lay.sandbox.write("empty.txt", "")
    fails("SANDBOX_FILE_TOO_LARGE", lay.sandbox.write, "one.txt", "x")


def test_extension_limits(tmp_path: Path) -> None:
    lay = make_layout(tmp_path, SandboxLimits(extensions=frozenset({".txt", ""})))
    sb = lay.sandbox
    sb.write("notes.txt", "ok")
    sb.write("README", "ok")
    failure = fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.write, "run.py", "print()")
    assert failure.outcome is Outcome.DENIED
    assert failure.details["extension"] == ".py"
    fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.write, "NOTES.TXT", "case matters")
    fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.rename, "notes.txt", "notes.sh")
    (lay.root / "planted.exe").write_text("x")
    fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.read, "planted.exe")
    fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.delete, "planted.exe")
    fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.rename, "planted.exe", "planted.txt")
    # directories have no extension rule
    sb.mkdir("pkg.py")
    sb.rename("pkg.py", "lib.d")
    sb.delete("lib.d")
    # a link inside the root cannot launder an extension
    os.symlink("planted.exe", lay.root / "innocent.txt")
    fails("SANDBOX_EXTENSION_NOT_ALLOWED", sb.read, "innocent.txt")


@pytest.mark.parametrize(
    ("name", "extension"),
    [
        ("a.txt", ".txt"),
        ("a.tar.gz", ".gz"),
        ("README", ""),
        (".bashrc", ""),
        ("a.", ""),
        ("..a", ".a"),
        ("...", ""),
        ("A.TXT", ".TXT"),
    ],
)
def test_file_extension(name: str, extension: str) -> None:
    assert file_extension(name) == extension


# -- dispatch, schemas, side effects --------------------------------------------------------


def test_operations_table() -> None:
    assert sorted(OPERATIONS) == sorted(f"fs.{op}" for op in FS_OPERATIONS)
    effects = {name: spec.side_effect for name, spec in OPERATIONS.items()}
    assert effects == {
        "fs.read": "read_only",
        "fs.list": "read_only",
        "fs.write": "idempotent",
        "fs.mkdir": "idempotent",
        "fs.delete": "irreversible",
        "fs.rename": "irreversible",
    }
    schema = OPERATIONS["fs.read"].args_schema()
    schema["properties"].clear()
    assert OPERATIONS["fs.read"].args_schema()["properties"]  # a fresh copy each time


GOOD_ARGS: dict[str, dict[str, Any]] = {
    "fs.write": {"path": "a.txt", "content": "x"},
    "fs.read": {"path": "a.txt"},
    "fs.list": {},
    "fs.mkdir": {"path": "d", "parents": True},
    "fs.rename": {"source": "a.txt", "destination": "d/b.txt"},
    "fs.delete": {"path": "d/b.txt"},
}

BAD_ARGS = [
    ("fs.read", {}),
    ("fs.read", {"path": 3}),
    ("fs.read", {"path": "a.txt", "mode": "r"}),
    ("fs.write", {"path": "a.txt"}),
    ("fs.write", {"path": "a.txt", "content": None}),
    ("fs.write", {"path": "a.txt", "content": b"bytes"}),
    ("fs.mkdir", {"path": "d", "parents": "yes"}),
    ("fs.rename", {"source": "a.txt"}),
    ("fs.list", {"path": None}),
    ("fs.delete", []),
]


def test_execute_dispatches_by_tool_name(lay: Layout) -> None:
    for tool, args in GOOD_ARGS.items():
        result = lay.sandbox.execute(tool, args)
        assert isinstance(result, dict)
    assert os.listdir(lay.root) == ["d"]


@pytest.mark.parametrize(("tool", "args"), BAD_ARGS)
def test_execute_rejects_bad_arguments_like_the_schema(
    lay: Layout, tool: str, args: Any
) -> None:
    validate = fastjsonschema.compile(OPERATIONS[tool].args_schema())
    with pytest.raises(fastjsonschema.JsonSchemaException):
        validate(args)
    failure = fails("SANDBOX_ARGUMENTS_INVALID", lay.sandbox.execute, tool, args)
    assert failure.outcome is Outcome.VALIDATION_ERROR


def test_schemas_accept_good_arguments() -> None:
    for tool, args in GOOD_ARGS.items():
        fastjsonschema.compile(OPERATIONS[tool].args_schema())(args)


def test_unknown_operation_and_unencodable_content(lay: Layout) -> None:
    fails("SANDBOX_UNKNOWN_OPERATION", lay.sandbox.execute, "fs.chmod", {"path": "a"})
    fails("SANDBOX_UNKNOWN_OPERATION", lay.sandbox.execute, "read", {"path": "a"})
    fails("SANDBOX_ARGUMENTS_INVALID", lay.sandbox.write, "a.txt", "\ud800")
    assert os.listdir(lay.root) == []


def test_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(SandboxRootError):
        Sandbox(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(SandboxRootError) as info:
        Sandbox(tmp_path / "file")
    assert info.value.code == "SANDBOX_ROOT_INVALID"


def test_root_given_through_a_symlink_is_resolved_once(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "via")
    sb = Sandbox(tmp_path / "via")
    assert sb.root == (tmp_path / "real").resolve()
    sb.write("x.txt", "x")
    assert (tmp_path / "real" / "x.txt").exists()


def test_a_root_swapped_for_a_link_after_construction_is_refused(tmp_path: Path) -> None:
    lay = make_layout(tmp_path)
    lay.root.rmdir()
    os.symlink(lay.outside, lay.root)
    before = lay.outside_hash()
    failure = fails("SANDBOX_IO_ERROR", lay.sandbox.write, "x.txt", "pwned")
    assert failure.details["errno"] in ("ELOOP", "ENOTDIR")
    fails("SANDBOX_IO_ERROR", lay.sandbox.read, "secret.txt")
    fails("SANDBOX_IO_ERROR", lay.sandbox.state_hash)
    assert lay.outside_hash() == before


# -- state hash and determinism -------------------------------------------------------------


def test_state_hash_is_stable_and_tracks_changes(lay: Layout) -> None:
    sb = lay.sandbox
    empty = sb.state_hash()
    assert sb.state_hash() == empty
    sb.write("a.txt", "one")
    one = sb.state_hash()
    assert one != empty
    assert sb.state_hash() == one
    sb.write("a.txt", "two")
    assert sb.state_hash() not in (one, empty)
    sb.write("a.txt", "one")
    assert sb.state_hash() == one
    sb.mkdir("d")
    with_dir = sb.state_hash()
    assert with_dir != one
    sb.rename("a.txt", "d/a.txt")
    assert sb.state_hash() not in (with_dir, one)
    sb.rename("d/a.txt", "a.txt")
    assert sb.state_hash() == with_dir
    os.symlink("a.txt", lay.root / "l")
    assert sb.state_hash() != with_dir


def test_state_hash_ignores_creation_order_modes_and_times(tmp_path: Path) -> None:
    first = make_layout(tmp_path / "one")
    second = make_layout(tmp_path / "two")
    for name, content in [("b.txt", "B"), ("a.txt", "A")]:
        first.sandbox.write(name, content)
    first.sandbox.mkdir("z")
    second.sandbox.mkdir("z")
    for name, content in [("a.txt", "A"), ("b.txt", "B")]:
        second.sandbox.write(name, content)
    os.chmod(second.root / "a.txt", 0o600)
    os.utime(second.root / "b.txt", (1, 1))
    assert first.sandbox.state_hash() == second.sandbox.state_hash()
    assert [e["path"] for e in first.sandbox.state()] == ["a.txt", "b.txt", "z"]


def test_same_request_same_state_same_outcome(tmp_path: Path) -> None:
    layouts = [make_layout(tmp_path / name) for name in ("x", "y")]
    for lay in layouts:
        plant_links(lay)
        lay.sandbox.write("f.txt", "content")
    assert layouts[0].sandbox.state_hash() != ""
    requests: list[tuple[str, dict[str, Any]]] = [
        ("fs.read", {"path": "f.txt"}),
        ("fs.read", {"path": "rel_file.txt"}),
        ("fs.write", {"path": "chain1/x.txt", "content": "x"}),
        ("fs.list", {"path": "sub"}),
        ("fs.rename", {"source": "f.txt", "destination": "sub/g.txt"}),
        ("fs.delete", {"path": "loop_a"}),
        ("fs.read", {"path": "../f.txt"}),
    ]
    results: list[list[Any]] = [[], []]
    for index, lay in enumerate(layouts):
        for tool, args in requests:
            try:
                results[index].append(lay.sandbox.execute(tool, args))
            except StepFailure as failure:
                results[index].append((failure.step_code.code, failure.message, failure.details))
    assert results[0] == results[1]
