"""Hypothesis fuzzing of the sandbox: random paths and operations never touch anything outside
the root, and every failure carries a registered step code of the right outcome."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tracelock.core.hashing import canonical_hash
from tracelock.runtime.outcomes import Outcome, StepFailure, lookup_code
from tracelock.runtime.policy.sandbox import OPERATIONS, Sandbox, SandboxLimits

COMPONENTS = [
    "..",
    ".",
    "",
    "a",
    "b.txt",
    "sub",
    "abs_dir",
    "rel_dir",
    "rel_file.txt",
    "chain",
    "mid",
    "loop",
    "inside",
    "secret.txt",
    "outside",
    "root",
    "C:",
    "\\",
    "..\\..",
    "\x00",
    "\uff0e\uff0e",
    "\u202e",
    "e\u0301",
    "\u00e9",
    "\u2215",
    " ",
    "~",
    "%2e%2e",
]

component = st.one_of(st.sampled_from(COMPONENTS), st.text(max_size=6))
paths = st.one_of(
    st.builds(
        lambda parts, lead: ("/" if lead else "") + "/".join(parts),
        st.lists(component, min_size=1, max_size=5),
        st.booleans(),
    ),
    st.text(max_size=20),
)


@contextmanager
def fuzz_layout() -> Iterator[tuple[Path, Path, Sandbox]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root, outside = base / "root", base / "outside"
        (outside / "dir").mkdir(parents=True)
        (outside / "secret.txt").write_text("secret")
        root.mkdir()
        (root / "sub").mkdir()
        (root / "inside").write_text("inside")
        os.symlink(outside, root / "abs_dir")
        os.symlink("../outside", root / "rel_dir")
        os.symlink("../outside/secret.txt", root / "rel_file.txt")
        os.symlink("rel_dir", root / "chain")
        os.symlink("../../outside", root / "sub" / "mid")
        os.symlink("loop", root / "loop")
        yield base, outside, Sandbox(root, SandboxLimits(max_file_bytes=64))


def call(sandbox: Sandbox, tool: str, args: dict[str, Any]) -> None:
    try:
        result = sandbox.execute(tool, args)
    except StepFailure as failure:
        registered = lookup_code(failure.step_code.code)
        assert registered is failure.step_code
        assert failure.outcome is not Outcome.SUCCESS
        if failure.step_code.code == "SANDBOX_PATH_INVALID":
            assert failure.outcome is Outcome.VALIDATION_ERROR
    else:
        assert isinstance(result, dict)


operations = st.one_of(
    st.tuples(st.just("fs.read"), st.fixed_dictionaries({"path": paths})),
    st.tuples(
        st.just("fs.write"),
        st.fixed_dictionaries({"path": paths, "content": st.text(max_size=80)}),
    ),
    st.tuples(st.just("fs.delete"), st.fixed_dictionaries({"path": paths})),
    st.tuples(
        st.just("fs.rename"), st.fixed_dictionaries({"source": paths, "destination": paths})
    ),
    st.tuples(st.just("fs.list"), st.fixed_dictionaries({"path": paths})),
    st.tuples(
        st.just("fs.mkdir"), st.fixed_dictionaries({"path": paths, "parents": st.booleans()})
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, min_size=1, max_size=12))
def test_random_operations_never_escape(ops: list[tuple[str, dict[str, Any]]]) -> None:
    with fuzz_layout() as (base, outside, sandbox):
        before = Sandbox(outside).state_hash()
        for tool, args in ops:
            assert tool in OPERATIONS
            call(sandbox, tool, args)
        assert Sandbox(outside).state_hash() == before
        assert sorted(os.listdir(base)) == ["outside", "root"]


@settings(max_examples=300, deadline=None)
@given(paths)
def test_a_successful_write_lands_exactly_at_the_path_inside_the_root(path: str) -> None:
    with fuzz_layout() as (base, outside, sandbox):
        before = Sandbox(outside).state_hash()
        try:
            sandbox.write(path, "fuzz")
        except StepFailure as failure:
            assert lookup_code(failure.step_code.code) is failure.step_code
        else:
            # a write never follows a link, so the written file is exactly root/path
            written = base / "root" / path
            assert not written.is_symlink()
            assert written.read_text() == "fuzz"
            assert written.resolve().is_relative_to((base / "root").resolve())
        assert Sandbox(outside).state_hash() == before


@settings(max_examples=200, deadline=None)
@given(st.lists(operations, min_size=1, max_size=8))
def test_same_operations_on_same_state_give_same_outcomes(
    ops: list[tuple[str, dict[str, Any]]],
) -> None:
    transcripts: list[list[Any]] = []
    hashes: list[str] = []
    for _ in range(2):
        transcript: list[Any] = []
        with fuzz_layout() as (base, _, sandbox):
            for tool, args in ops:
                try:
                    transcript.append(sandbox.execute(tool, args))
                except StepFailure as failure:
                    transcript.append((failure.step_code.code, failure.details))
            # the planted absolute link names the temporary directory, which differs per run
            state = [
                {**e, "target": e["target"].replace(str(base), "<base>")} if "target" in e else e
                for e in sandbox.state()
            ]
            hashes.append(canonical_hash(state))
        transcripts.append(transcript)
    assert transcripts[0] == transcripts[1]
    assert hashes[0] == hashes[1]
