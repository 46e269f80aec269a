"""Tools: schemas derived from type hints or given explicitly, validation against them, and
the definitions that are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import pytest

from tests.runtime.runtime_helpers import allow, effect_of, runtime_at
from tracelock.runtime.errors import StepError
from tracelock.runtime.tools.tools import (
    RetryPolicy,
    Tool,
    ToolDefinitionError,
    schema_from_signature,
)


def search(
    query: str,
    limit: int,
    mode: Literal["fast", "exact"] = "fast",
    ids: list[int] | None = None,
    note: Optional[str] = None,  # noqa: UP045 - the typing spelling is what is under test
    ratio: float = 1.0,
    flags: dict[str, bool] | None = None,
    extra: Any = None,
) -> dict[str, Any]:
    return {"query": query, "limit": limit, "mode": mode, "ids": ids, "note": note}


SEARCH_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer"},
        "mode": {"enum": ["fast", "exact"]},
        "ids": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "ratio": {"type": "number"},
        "flags": {
            "anyOf": [
                {"type": "object", "additionalProperties": {"type": "boolean"}},
                {"type": "null"},
            ]
        },
        "extra": {},
    },
    "required": ["query", "limit"],
    "additionalProperties": False,
}


def test_schema_is_derived_from_type_hints() -> None:
    assert schema_from_signature(search) == SEARCH_SCHEMA


def test_a_registered_tool_carries_the_derived_schema_and_its_settings(tmp_path: Path) -> None:
    with runtime_at(tmp_path, allow("search")) as runtime:
        registered = runtime.tool(side_effect="read_only", timeout=2.5)(search)
        tool = runtime.tools["search"]
        assert registered is search
        assert search.__tracelock_tool__ == "search"  # type: ignore[attr-defined]
        assert tool.schema == SEARCH_SCHEMA
        assert tool.side_effect == "read_only"
        assert tool.timeout_ms == 2500
        assert tool.is_async is False


def test_the_idempotency_key_parameter_is_not_part_of_the_schema(tmp_path: Path) -> None:
    with runtime_at(tmp_path) as runtime:

        @runtime.tool(side_effect="idempotent")
        def charge(amount: int, idempotency_key: str | None = None) -> int:
            return amount

        tool = runtime.tools["charge"]
        assert tool.wants_idempotency_key is True
        assert set(tool.schema["properties"]) == {"amount"}
        assert tool.schema["required"] == ["amount"]


GOOD = {"query": "q", "limit": 3}


@pytest.mark.parametrize(
    "args",
    [
        GOOD,
        {**GOOD, "mode": "exact"},
        {**GOOD, "ids": [1, 2, 3]},
        {**GOOD, "ids": None, "note": None},
        {**GOOD, "note": "n", "ratio": 2, "flags": {"a": True}, "extra": [{"x": None}]},
    ],
)
def test_arguments_that_satisfy_the_derived_schema_pass(tmp_path: Path, args: dict[str, Any]) -> None:
    with runtime_at(tmp_path, allow("search")) as runtime:
        runtime.tool()(search)
        result = runtime.run(lambda ctx, _: ctx.call("search", **args))
        assert result.outcome == "SUCCESS", result.error
        assert result.output["query"] == "q"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param({"query": "q"}, id="missing-required"),
        pytest.param({**GOOD, "unknown": 1}, id="unknown-argument"),
        pytest.param({**GOOD, "mode": "slow"}, id="literal-outside-enum"),
        pytest.param({**GOOD, "ids": [1, "2"]}, id="list-item-type"),
        pytest.param({**GOOD, "ids": 5}, id="list-not-array"),
        pytest.param({**GOOD, "limit": "3"}, id="int-as-string"),
        pytest.param({**GOOD, "limit": True}, id="bool-is-not-int"),
        pytest.param({**GOOD, "note": 7}, id="optional-wrong-type"),
        pytest.param({**GOOD, "flags": {"a": "yes"}}, id="dict-value-type"),
        pytest.param({**GOOD, "query": None}, id="required-not-optional"),
    ],
)
def test_arguments_that_violate_the_derived_schema_fail_validation(
    tmp_path: Path, args: dict[str, Any]
) -> None:
    with runtime_at(tmp_path, allow("search")) as runtime:
        runtime.tool()(search)
        result = runtime.run(lambda ctx, _: ctx.call("search", **args))
        assert (result.outcome, result.code) == ("VALIDATION_ERROR", "ARGS_SCHEMA_MISMATCH")
        effect = effect_of(runtime, result.run_id, 0)
        assert (effect["phase"], effect["attempts"], effect["args"]) == ("VALIDATE", 0, args)


def test_an_explicit_schema_is_used_as_given(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "maxLength": 3}},
        "required": ["q"],
        "additionalProperties": False,
    }
    with runtime_at(tmp_path, allow("lookup")) as runtime:

        @runtime.tool(schema=schema)
        def lookup(**kwargs: Any) -> str:
            return str(kwargs["q"]).upper()

        assert runtime.tools["lookup"].schema == schema

        def agent(ctx: Any, _: Any) -> Any:
            try:
                ctx.call("lookup", q="long")
            except StepError as failure:
                refused = failure.step_code
            return [ctx.call("lookup", q="abc"), refused]

        result = runtime.run(agent)
        assert result.output == ["ABC", "ARGS_SCHEMA_MISMATCH"]


def test_a_tool_can_be_called_by_its_function(tmp_path: Path) -> None:
    with runtime_at(tmp_path, allow("double")) as runtime:

        @runtime.tool(name="double")
        def twice(n: int) -> int:
            return 2 * n

        result = runtime.run(lambda ctx, n: ctx.call(twice, n=n), 21)
        assert result.output == 42
        assert effect_of(runtime, result.run_id, 0)["name"] == "double"


class Widget:
    pass


def takes_widget(w: Widget) -> None: ...


def takes_set(s: set[int]) -> None: ...


def takes_varargs(*values: int) -> None: ...


def takes_kwargs(**values: int) -> None: ...


def plain(x: int) -> int:
    return x


@pytest.mark.parametrize(
    ("register", "func"),
    [
        pytest.param({"name": "bad name"}, plain, id="space-in-name"),
        pytest.param({"name": "a/b"}, plain, id="slash-in-name"),
        pytest.param({"name": "naïve"}, plain, id="non-ascii-name"),
        pytest.param(
            {"side_effect": "irreversible", "retry": RetryPolicy(max_attempts=2)},
            plain,
            id="irreversible-with-retries",
        ),
        pytest.param({}, takes_widget, id="class-annotation"),
        pytest.param({}, takes_set, id="set-annotation"),
        pytest.param({}, takes_varargs, id="varargs"),
        pytest.param({}, takes_kwargs, id="kwargs-without-schema"),
        pytest.param({"timeout": 0}, plain, id="zero-timeout"),
        pytest.param({"timeout": -1.0}, plain, id="negative-timeout"),
        pytest.param({"side_effect": "sometimes"}, plain, id="unknown-side-effect"),
        pytest.param({"schema": {"type": 12}}, plain, id="invalid-json-schema"),
    ],
)
def test_bad_definitions_raise_and_register_nothing(
    tmp_path: Path, register: dict[str, Any], func: Any
) -> None:
    with runtime_at(tmp_path) as runtime:
        before = set(runtime.tools)
        with pytest.raises(ToolDefinitionError) as caught:
            runtime.tool(**register)(func)
        assert caught.value.code == "TOOL_DEFINITION_INVALID"
        assert set(runtime.tools) == before


def test_an_unresolvable_annotation_is_a_definition_error() -> None:
    def broken(x: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    with pytest.raises(ToolDefinitionError, match="type hints"):
        schema_from_signature(broken)


def test_a_second_tool_with_the_same_name_is_refused(tmp_path: Path) -> None:
    with runtime_at(tmp_path) as runtime:
        runtime.tool(name="same")(plain)
        runtime.tool(name="same")(plain)  # the same function again is harmless
        with pytest.raises(ToolDefinitionError, match="already registered"):
            runtime.tool(name="same")(lambda x: x)
        assert runtime.tools["same"].func is plain


@pytest.mark.parametrize(
    "kwargs", [{"max_attempts": 0}, {"max_attempts": 2, "delays_ms": (10, -1)}]
)
def test_bad_retry_policies_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ToolDefinitionError):
        RetryPolicy(**kwargs)


def test_retry_delays_are_fixed_and_the_last_one_repeats() -> None:
    policy = RetryPolicy(max_attempts=5, delays_ms=(100, 250))
    assert [policy.delay_before(attempt) for attempt in (2, 3, 4, 5)] == [100, 250, 250, 250]
    assert RetryPolicy(max_attempts=3).delay_before(2) == 0


def test_tool_validation_is_a_pure_function_of_the_arguments() -> None:
    tool = Tool(name="t", func=plain, side_effect="read_only", schema=schema_from_signature(plain))
    assert tool.validate({"x": 1}) is None
    first = tool.validate({"x": "1"})
    assert first is not None
    assert tool.validate({"x": "1"}) == first


class Tally:
    def __init__(self) -> None:
        self.total = 0

    def bump(self, by: int) -> int:
        self.total += by
        return self.total


def test_a_bound_method_can_be_a_tool(tmp_path: Path) -> None:
    tally = Tally()
    with runtime_at(tmp_path, allow("bump")) as runtime:
        assert runtime.tool()(tally.bump) == tally.bump
        assert runtime.tools["bump"].schema["required"] == ["by"]
        result = runtime.run(lambda ctx, _: [ctx.call("bump", by=2), ctx.call(tally.bump, by=3)])
        assert result.output == [2, 5]
        assert tally.total == 5
