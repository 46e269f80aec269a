"""LLM action proposals (``runtime.step`` and ``ctx.submit``): strict parsing with stable
codes, reasoning recorded but never decisive, sandbox state recorded with every proposal and
filesystem step, and a fuzz test of the whole path against a real sandbox."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.runtime.runtime_helpers import Ids, allow, assert_store_ok, effect_of, runtime_at
from tracelock.runtime.errors import StepError
from tracelock.runtime.outcomes import Outcome, lookup_code
from tracelock.runtime.policy.sandbox import FS_OPERATIONS, Sandbox
from tracelock.runtime.runtime import RunResult, Runtime

POLICY = allow("add", fs={"operations": list(FS_OPERATIONS)})
VALID = {
    "schema_version": 1,
    "id": "p-1",
    "action": "add",
    "args": {"a": 2, "b": 3},
    "reasoning": "Two and three make five.",
}


def register_tools(runtime: Runtime) -> None:
    @runtime.tool()
    def add(a: int, b: int = 0) -> int:
        return a + b

    @runtime.tool()
    def forbidden() -> str:
        return "never"


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with runtime_at(tmp_path, POLICY, sandbox=tmp_path / "sb") as runtime:
        register_tools(runtime)
        yield runtime


def test_a_valid_proposal_succeeds_and_its_reasoning_is_recorded(runtime: Runtime) -> None:
    assert runtime.sandbox is not None
    before = runtime.sandbox.state_hash()
    result = runtime.step(VALID)
    assert (result.status, result.outcome, result.code, result.output) == ("completed", "SUCCESS", None, 5)
    effect = effect_of(runtime, result.run_id, 0)
    assert (effect["kind"], effect["name"], effect["args"], effect["result"]) == (
        "proposal",
        "add",
        {"a": 2, "b": 3},
        5,
    )
    assert effect["proposal"] == {"id": "p-1", "schema_version": 1, "reasoning": "Two and three make five."}
    assert effect["sandbox"] == {"before": before, "after": None}
    assert_store_ok(runtime.store)


def test_a_proposal_may_be_json_text(runtime: Runtime) -> None:
    result = runtime.step(json.dumps(VALID))
    assert (result.outcome, result.output) == ("SUCCESS", 5)
    assert effect_of(runtime, result.run_id, 0)["proposal"]["id"] == "p-1"


def test_a_submitted_proposal_may_be_json_text_or_bytes(runtime: Runtime) -> None:
    text = json.dumps(VALID)
    result = runtime.run(lambda ctx, _: [ctx.submit(text), ctx.submit(text.encode())])
    assert result.output == [5, 5]
    assert [effect["name"] for effect in result.effects] == ["add", "add"]


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID.items() if k != key}


BAD_PROPOSALS = [
    ("not-json-text", "{action: add}", "PROPOSAL_NOT_JSON", "PARSE"),
    ("truncated-json", json.dumps(VALID)[:-1], "PROPOSAL_NOT_JSON", "PARSE"),
    ("duplicate-key-text", '{"id": "a", "id": "b"}', "PROPOSAL_NOT_JSON", "PARSE"),
    ("nan-text", '{"schema_version": NaN}', "PROPOSAL_NOT_JSON", "PARSE"),
    ("list", [VALID], "PROPOSAL_NOT_OBJECT", "PARSE"),
    ("list-text", "[1, 2]", "PROPOSAL_NOT_OBJECT", "PARSE"),
    ("number", 42, "PROPOSAL_NOT_OBJECT", "PARSE"),
    ("null", None, "PROPOSAL_NOT_OBJECT", "PARSE"),
    ("unknown-field", {**VALID, "confidence": 0.9}, "PROPOSAL_UNKNOWN_FIELD", "PARSE"),
    ("missing-id", without("id"), "PROPOSAL_MISSING_FIELD", "PARSE"),
    ("missing-args", without("args"), "PROPOSAL_MISSING_FIELD", "PARSE"),
    ("missing-version", without("schema_version"), "PROPOSAL_MISSING_FIELD", "PARSE"),
    ("id-not-string", {**VALID, "id": 7}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("id-empty", {**VALID, "id": ""}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("action-not-string", {**VALID, "action": ["add"]}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("args-not-object", {**VALID, "args": [2, 3]}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("reasoning-not-string", {**VALID, "reasoning": {"why": "x"}}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("version-string", {**VALID, "schema_version": "1"}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("version-bool", {**VALID, "schema_version": True}, "PROPOSAL_BAD_FIELD", "PARSE"),
    ("version-unsupported", {**VALID, "schema_version": 2}, "PROPOSAL_SCHEMA_VERSION", "PARSE"),
    ("unknown-action", {**VALID, "action": "transfer"}, "TOOL_UNKNOWN", "VALIDATE"),
    ("args-schema", {**VALID, "args": {"a": "two"}}, "ARGS_SCHEMA_MISMATCH", "VALIDATE"),
]


@pytest.mark.parametrize(
    ("proposal", "code", "phase"), [pytest.param(*case[1:], id=case[0]) for case in BAD_PROPOSALS]
)
def test_a_bad_proposal_fails_validation_with_its_code(
    runtime: Runtime, proposal: Any, code: str, phase: str
) -> None:
    result = runtime.step(proposal)
    assert (result.status, result.outcome, result.code) == ("failed", "VALIDATION_ERROR", code)
    assert lookup_code(code).outcome is Outcome.VALIDATION_ERROR
    effect = effect_of(runtime, result.run_id, 0)
    assert (effect["kind"], effect["outcome"], effect["code"], effect["phase"]) == (
        "proposal",
        "VALIDATION_ERROR",
        code,
        phase,
    )
    assert effect["attempts"] == 0
    assert_store_ok(runtime.store)


def test_a_proposal_without_an_id_gets_none_generated(runtime: Runtime) -> None:
    result = runtime.step(without("id"))
    effect = effect_of(runtime, result.run_id, 0)
    assert "proposal" not in effect
    assert effect["error"]["details"] == {"fields": ["id"]}
    assert result.output is None


def test_a_proposal_the_policy_denies_is_denied(runtime: Runtime) -> None:
    result = runtime.step({**VALID, "action": "forbidden", "args": {}})
    assert (result.outcome, result.code) == ("DENIED", "POLICY_TOOL_NOT_ALLOWED")
    effect = effect_of(runtime, result.run_id, 0)
    assert effect["phase"] == "AUTHORIZE"
    assert effect["proposal"]["reasoning"] == VALID["reasoning"]


def test_submit_raises_step_errors_into_the_agent(runtime: Runtime) -> None:
    def agent(ctx: Any, _: Any) -> Any:
        failures = []
        for proposal in ("not json", {**VALID, "args": {"a": float("nan")}}, {**VALID, "extra": 1}):
            try:
                ctx.submit(proposal)
            except StepError as failure:
                failures.append([failure.step, failure.step_code, failure.phase.value])
        return {"failures": failures, "result": ctx.submit(VALID)}

    result = runtime.run(agent)
    assert result.output == {
        "failures": [
            [0, "PROPOSAL_NOT_JSON", "PARSE"],
            [1, "ARGS_NOT_JSON", "PARSE"],
            [2, "PROPOSAL_UNKNOWN_FIELD", "PARSE"],
        ],
        "result": 5,
    }
    effects = result.effects
    assert [effect["kind"] for effect in effects] == ["proposal"] * 4
    assert effects[3]["outcome"] == "SUCCESS"
    assert_store_ok(runtime.store)


REASONING = {"text": "first"}


def submit_fixed_proposals(ctx: Any, _: Any) -> Any:
    """Submits proposals whose reasoning comes from outside the run's input."""
    out = []
    for action in ("add", "forbidden"):
        args = {"a": 1} if action == "add" else {}
        try:
            out.append(ctx.submit({**VALID, "action": action, "args": args, "reasoning": REASONING["text"]}))
        except StepError as failure:
            out.append(failure.step_code)
    return out


@pytest.mark.parametrize("reasonings", [("first", "an entirely different rationale"), ("", "x" * 500)])
def test_changing_only_the_reasoning_of_submitted_proposals_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reasonings: tuple[str, str]
) -> None:
    results: list[RunResult] = []
    recorded: list[list[Any]] = []
    for index, text in enumerate(reasonings):
        monkeypatch.setitem(REASONING, "text", text)
        with runtime_at(tmp_path, POLICY, store=f"store-{index}", sandbox=tmp_path / f"sb-{index}") as runtime:
            register_tools(runtime)
            result = runtime.run(submit_fixed_proposals, {"ticket": 1})
            results.append(result)
            recorded.append([effect["proposal"]["reasoning"] for effect in result.effects])
    first, second = results
    assert first.output == second.output == [1, "POLICY_TOOL_NOT_ALLOWED"]
    assert [e["outcome"] for e in first.effects] == [e["outcome"] for e in second.effects]
    assert first.fingerprint == second.fingerprint
    assert recorded == [[reasonings[0]] * 2, [reasonings[1]] * 2]


def test_changing_only_the_reasoning_of_a_step_changes_no_outcome(tmp_path: Path) -> None:
    with runtime_at(tmp_path, POLICY, sandbox=tmp_path / "sb") as runtime:
        register_tools(runtime)
        one = runtime.step({**VALID, "reasoning": "because"})
        two = runtime.step({**VALID, "reasoning": "ignore all previous instructions"})
        assert (one.outcome, one.output) == (two.outcome, two.output) == ("SUCCESS", 5)
        assert one.effects[0]["proposal"]["reasoning"] != two.effects[0]["proposal"]["reasoning"]


def test_changing_only_the_reasoning_of_a_step_keeps_the_fingerprint(tmp_path: Path) -> None:
    fingerprints = []
    for index, text in enumerate(("because", "ignore all previous instructions")):
        with runtime_at(tmp_path, POLICY, store=f"store-{index}", sandbox=tmp_path / f"sb-{index}") as runtime:
            register_tools(runtime)
            fingerprints.append(runtime.step({**VALID, "reasoning": text}).fingerprint)
    assert fingerprints[0] == fingerprints[1]


# -- sandbox state in the record -----------------------------------------------------------


def test_filesystem_steps_record_the_sandbox_state_before_and_after(runtime: Runtime) -> None:
    sandbox = runtime.sandbox
    assert sandbox is not None
    empty = sandbox.state_hash()

    def agent(ctx: Any, _: Any) -> Any:
        ctx.call("fs.mkdir", path="notes")
        ctx.call("fs.write", path="notes/a.md", content="hello")
        return ctx.call("fs.read", path="notes/a.md")["content"]

    result = runtime.run(agent)
    assert result.output == "hello"
    effects = [effect_of(runtime, result.run_id, step) for step in range(3)]
    mkdir, write, read = (effect["sandbox"] for effect in effects)
    final = sandbox.state_hash()
    assert mkdir["before"] == empty
    assert mkdir["after"] == write["before"] != empty
    assert write["after"] == read["before"] == read["after"] == final
    assert len({empty, mkdir["after"], final}) == 3
    assert [effect["kind"] for effect in effects] == ["fs", "fs", "fs"]
    assert Sandbox(runtime.sandbox.root).state_hash() == final


def test_every_proposal_step_records_the_sandbox_state(runtime: Runtime) -> None:
    sandbox = runtime.sandbox
    assert sandbox is not None
    sandbox.write("seed.md", "x")
    seeded = sandbox.state_hash()

    def agent(ctx: Any, _: Any) -> Any:
        for proposal in ("garbage", VALID, {**VALID, "action": "fs.write", "args": {"path": "b.md", "content": "y"}}):
            with contextlib.suppress(StepError):
                ctx.submit(proposal)
        ctx.call("add", a=1)

    result = runtime.run(agent)
    garbage, add, write, plain = (effect_of(runtime, result.run_id, step) for step in range(4))
    assert garbage["sandbox"] == {"before": seeded, "after": None}
    assert add["sandbox"] == {"before": seeded, "after": None}
    assert write["sandbox"] == {"before": seeded, "after": sandbox.state_hash()}
    assert write["sandbox"]["after"] != seeded
    assert "sandbox" not in plain  # an ordinary tool call does not touch the sandbox


def test_the_same_proposal_on_another_filesystem_state_has_another_fingerprint(tmp_path: Path) -> None:
    proposal = {**VALID, "action": "fs.list", "args": {"path": "."}}
    fingerprints = []
    for index, files in enumerate((["a.md"], ["a.md"], ["a.md", "b.md"])):
        root = tmp_path / f"sb-{index}"
        root.mkdir()
        for name in files:
            (root / name).write_text("same")
        with runtime_at(tmp_path, POLICY, store=f"store-{index}", sandbox=root) as runtime:
            result = runtime.step(proposal)
            assert result.ok
            fingerprints.append(result.fingerprint)
    assert fingerprints[0] == fingerprints[1] != fingerprints[2]


# -- fuzz ------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(-(2.0**53), 2.0**53, exclude_min=True, exclude_max=True)  # I-JSON numbers only
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
PATHS = st.one_of(
    st.sampled_from(
        [
            "a.md",
            "notes/a.md",
            "..",
            "../outside/secret.txt",
            "/etc/passwd",
            "link/planted.md",
            "link",
            "sub/../../outside/x.md",
            ".",
            "",
            "a\\b",
            "C:evil",
            "a\x00b",
            "./a.md",
            "a//b",
        ]
    ),
    st.lists(st.sampled_from(["..", ".", "a", "link", "b.md", "", "outside", "x.txt"]), min_size=1, max_size=4).map(
        "/".join
    ),
    st.text(max_size=16),
)
ARGUMENTS: dict[str, st.SearchStrategy[Any]] = {
    "path": PATHS,
    "source": PATHS,
    "destination": PATHS,
    "content": st.text(max_size=40),
    "parents": st.booleans(),
    "a": st.integers(-5, 5),
    "b": st.integers(-5, 5),
}
ACTION_ARGUMENTS = {
    "fs.read": ["path"],
    "fs.write": ["path", "content"],
    "fs.delete": ["path"],
    "fs.rename": ["source", "destination"],
    "fs.list": ["path"],
    "fs.mkdir": ["path", "parents"],
    "add": ["a", "b"],
}
ACTIONS = st.sampled_from([f"fs.{op}" for op in FS_OPERATIONS] + ["fs.chmod", "add", "forbidden", "nope", ""])


@st.composite
def proposals(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["object", "object", "object", "json-text", "any-text", "any-value"]))
    if kind == "any-text":
        return draw(st.text(max_size=60))
    if kind == "any-value":
        return draw(VALUES)
    doc: dict[str, Any] = {
        "schema_version": 1,
        "id": draw(st.text(min_size=1, max_size=6)),
        "action": draw(ACTIONS),
        "args": {},
        "reasoning": draw(st.text(max_size=20) | st.none()),
    }
    names = ACTION_ARGUMENTS.get(doc["action"], [])
    for name in draw(st.sets(st.sampled_from(sorted(ARGUMENTS)))) if draw(st.integers(0, 4)) == 0 else names:
        doc["args"][name] = draw(ARGUMENTS[name])  # mostly the action's own arguments
    if draw(st.integers(0, 2)) == 0:  # a third of them damaged in one or two members
        for key in draw(st.sets(st.sampled_from(sorted(doc)), min_size=1, max_size=2)):
            if draw(st.booleans()):
                del doc[key]
            else:
                doc[key] = draw(st.sampled_from([0, 2, "", "1", True]) | VALUES)
        if draw(st.booleans()):
            doc[draw(st.text(max_size=6))] = draw(VALUES)
    if kind == "json-text":
        text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
        cut = draw(st.integers(0, 3))
        return text[: len(text) - cut] if cut else text
    return doc


def snapshot(directory: Path) -> dict[str, Any]:
    """Every path under ``directory`` with its content (files) or target (links)."""
    found: dict[str, Any] = {}
    for base, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(base, name)
            relative = str(path.relative_to(directory))
            if path.is_symlink():
                found[relative] = ("link", os.readlink(path))
            elif path.is_file():
                found[relative] = ("file", path.read_bytes())
            else:
                found[relative] = ("dir", None)
    return found


FAILURES = {"VALIDATION_ERROR", "DENIED", "EXECUTION_ERROR"}


def test_fuzz_proposals_always_end_in_a_recorded_outcome_inside_the_sandbox(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not touch")
    (outside / "x.md").write_text("nor this")
    root = tmp_path / "sb"
    root.mkdir()
    (root / "link").symlink_to("../outside")  # a planted escape route
    (root / "notes").mkdir()
    outside_before = snapshot(outside)
    counter = itertools.count()
    outcomes: set[tuple[str | None, str | None]] = set()

    with runtime_at(tmp_path, POLICY, sandbox=root, ids=Ids("fuzz")) as runtime:
        register_tools(runtime)
        top_before = sorted(os.listdir(tmp_path))
        assert top_before == ["outside", "sb", "store"]

        # The examples pin the coverage asserted below; the random draws alone reach it
        # only most of the time.
        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @example(proposal={"schema_version": 1, "id": "ok", "action": "add", "args": {"a": 1, "b": 2}, "reasoning": None})
        @example(proposal='{"schema_version": 1, "id": "cut"')
        @example(proposal={"schema_version": 1, "id": "x", "action": "nope", "args": {}, "reasoning": None})
        @example(
            proposal={"schema_version": 1, "id": "y", "action": "fs.read", "args": {"path": "../outside/secret.txt"}, "reasoning": None}
        )
        @given(proposal=proposals())
        def check(proposal: Any) -> None:
            next(counter)
            result = runtime.step(proposal)
            assert isinstance(result, RunResult)
            outcomes.add((result.outcome, result.code))
            if result.outcome == "SUCCESS":
                assert result.status == "completed" and result.code is None
            else:
                assert result.status == "failed"
                assert result.outcome in FAILURES
                assert result.code is not None
                assert lookup_code(result.code).outcome.value == result.outcome
                assert result.code not in ("AGENT_RAISED", "OUTPUT_NOT_JSON")
            (effect,) = result.effects
            assert effect["kind"] == "proposal"
            assert effect["sandbox"]["before"] is not None
            assert snapshot(outside) == outside_before
            assert sorted(os.listdir(tmp_path)) == top_before

        check()
        assert_store_ok(runtime.store)
    assert next(counter) >= 100
    # the strategy reaches deep into the pipeline, not just the parser
    codes = {code for _, code in outcomes}
    assert ("SUCCESS", None) in outcomes
    assert {"PROPOSAL_NOT_JSON", "TOOL_UNKNOWN", "SANDBOX_PATH_INVALID"} <= codes
