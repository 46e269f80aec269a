"""Diffs compare leaves by their RFC 8785 canonical form wherever a diff is shown: replay's
divergence report, `diff` and `drift` (issue 17, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelock import Runtime, Toolkit
from tracelock.core.canonical import MAX_SAFE_INTEGER, dumps
from tracelock.core.jsondiff import diff, same_value
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.compare import first_difference, run_difference
from tracelock.runtime.replay.drift import detect_drift

POLICY = {"version": 1, "tools": [{"name": "search"}]}
kit = Toolkit()


@kit.tool(timeout=None)
def search(query: str, limit: float, offset: float, exact: bool = False) -> list[str]:
    return [query] * 2


def recorded(ctx: Any, task: dict[str, Any]) -> list[str]:
    return list(ctx.call("search", query=task["q"], limit=500, offset=0))


def new_query_same_numbers(ctx: Any, task: dict[str, Any]) -> list[str]:
    # 5e2 and 0.0 are the recorded 500 and 0 in canonical form: only the query changed.
    return list(ctx.call("search", query=task["q"] + "!", limit=5e2, offset=0.0))


def new_query_bool_for_int(ctx: Any, task: dict[str, Any]) -> list[str]:
    return list(ctx.call("search", query=task["q"] + "!", limit=500, offset=False))


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    handle = Runtime(tmp_path / "store", POLICY, toolkits=(kit,))
    yield handle
    handle.close()


def test_replay_divergence_lists_only_the_fields_whose_canonical_form_changed(runtime: Runtime) -> None:
    run_id = runtime.run(recorded, {"q": "order"}).run_id
    report = runtime.replay(run_id, new_query_same_numbers)
    divergence = report.divergence or {}
    assert divergence["kind"] == "changed_effect" and divergence["step"] == 0
    assert [change["path"] for change in divergence["diff"]] == ["/args/query"]
    assert divergence["fields"] == ["args"]
    # false is not 0 in canonical form, although it is in Python
    divergence = runtime.replay(run_id, new_query_bool_for_int).divergence or {}
    assert [change["path"] for change in divergence["diff"]] == ["/args/offset", "/args/query"]

    def respelled(ctx: Any, task: dict[str, Any]) -> list[str]:
        return list(ctx.call("search", query=task["q"], limit=5e2, offset=-0.0))

    assert runtime.replay(run_id, respelled).matched


_variant = {"code": recorded}


def switchable(ctx: Any, task: dict[str, Any]) -> list[str]:
    return _variant["code"](ctx, task)


def test_run_difference_names_the_changed_leaf_only(runtime: Runtime) -> None:
    a = runtime.run(switchable, {"q": "order"}).run_id
    _variant["code"] = new_query_same_numbers
    try:
        b = runtime.run(switchable, {"q": "order"}).run_id
    finally:
        _variant["code"] = recorded
    ra, rb = load_run(runtime.store, a), load_run(runtime.store, b)
    difference = run_difference(ra, rb) or {}
    assert difference["component"] == "effects" and difference["step"] == 0 and difference["kind"] == "argument"
    assert difference["diff"] == [{"path": "/args/query", "op": "changed", "recorded": "order", "requested": "order!"}]


def test_projections_are_compared_canonically() -> None:
    base = {"agent": "a", "input": "h", "policy": "p", "effects": [], "routing": [{"agent": "x", "tried": 1}],
            "outcome": "SUCCESS", "code": None, "output": "o"}
    assert first_difference(base, base | {"routing": [{"agent": "x", "tried": 1.0}]}) is None
    difference = first_difference(base, base | {"routing": [{"agent": "x", "tried": True}]})
    assert difference is not None and difference["component"] == "routing"


_counter = {"n": 0}


def alternating(ctx: Any, task: dict[str, Any]) -> list[str]:
    _counter["n"] += 1
    limit = 500 if _counter["n"] % 2 else 5e2  # the same number, written two ways
    return list(ctx.call("search", query=f"{task['q']} {_counter['n']}", limit=limit, offset=0))


def test_drift_reports_the_differing_leaf_as_a_pointer() -> None:
    def make(store: Any) -> Runtime:
        return Runtime(store, POLICY, toolkits=(kit,))

    report = detect_drift(make, alternating, {"q": "x"}, 2)
    drift = report.drift or {}
    assert drift["step"] == 0 and drift["field"] == "args"
    assert [change["path"] for change in drift["diff"]] == ["/args/query"]


# -- properties of the diff itself -------------------------------------------------------

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False, max_value=1e15, min_value=-1e15)
    | st.text(max_size=8)
)
_json = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def _respelled(value: Any) -> Any:
    """The same JSON value written differently in Python: integers as floats (where exact),
    arrays as tuples."""
    if isinstance(value, dict):
        return {key: _respelled(item) for key, item in value.items()}
    if isinstance(value, list):
        return tuple(_respelled(item) for item in value)
    if type(value) is int and abs(value) < 2**53:
        return float(value)
    return value


@settings(max_examples=300, deadline=None)
@given(_json, _json)
def test_no_difference_exactly_when_the_canonical_forms_are_equal(a: Any, b: Any) -> None:
    for left, right in ((a, _respelled(a)), (a, b), (a, _respelled(b))):
        same = dumps(left) == dumps(right)
        assert (diff(left, right, limit=10_000) == []) == same
        assert same_value(left, right) == same


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _json, min_size=1, max_size=5), st.data())
def test_changing_one_member_reports_that_member_alone(value: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(value)))
    replacement = data.draw(_json.filter(lambda new: dumps(new) != dumps(value[key])))
    changed = _respelled(value) | {key: replacement}
    paths = {change["path"] for change in diff(value, changed, limit=10_000)}
    token = "/" + key.replace("~", "~0").replace("/", "~1")
    assert paths and all(path == token or path.startswith(token + "/") for path in paths)
