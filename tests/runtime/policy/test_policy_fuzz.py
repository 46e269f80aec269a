"""Hypothesis: the loader never fails with anything but a PolicyError, TOML and YAML agree,
and authorize is deterministic, deny-by-default and monotone in the budgets."""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelock.core.canonical import dumps
from tracelock.errors import CanonicalError, PolicyError
from tracelock.runtime.outcomes import Outcome, lookup_code
from tracelock.runtime.policy.policy import (
    BUDGETS,
    CONSTRAINT_KEYS,
    AuthorizationRequest,
    Decision,
    Policy,
    Usage,
)
from tracelock.runtime.policy.sandbox import FS_OPERATIONS


class _JsonNumberDumper(yaml.SafeDumper):
    """PyYAML's dumper, told what the policy loader reads as a number: the loader follows
    JSON and reads ``1e3`` and ``0E0`` (an exponent without a dot) as numbers, where YAML 1.1
    reads strings, so a string of that shape must be written quoted to read back the same."""


_JsonNumberDumper.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _dump_yaml(value: Any, **options: Any) -> str:
    return yaml.dump(value, Dumper=_JsonNumberDumper, **options)

KNOWN_KEYS = sorted(
    {
        "version",
        "approval_for_irreversible",
        "tools",
        "llm",
        "budgets",
        "fs",
        "name",
        "allow",
        "approval",
        "strict_args",
        "args",
        "models",
        "max_tokens",
        "operations",
        "max_file_bytes",
        "extensions",
        *BUDGETS,
        *CONSTRAINT_KEYS,
    }
)

# -- arbitrary values (the loader must survive anything) ------------------------------------

weird_text = st.one_of(
    st.text(max_size=8),
    st.text(st.characters(exclude_categories=()), max_size=4),  # includes lone surrogates
    st.sampled_from(["", "fs.read", "read", ".txt", "(", "[a-z]+", "\ud800", "m1"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    weird_text,
    st.binary(max_size=4),
    st.dates(),
    st.datetimes(),
    st.times(),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), weird_text, st.integers(-2, 2), st.none())
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=5),
        st.frozensets(st.integers(0, 3), max_size=2),
    ),
    max_leaves=25,
)
documents = st.one_of(
    values,
    st.builds(
        lambda body, version: {**body, "version": version} if version != "absent" else body,
        st.dictionaries(keys, values, max_size=6),
        st.sampled_from([1, 1, 1, 2, 0, "1", True, 1.0, None, "absent"]),
    ),
)


def loads_or_policy_error(load: Any, value: Any) -> Policy | None:
    try:
        policy = load(value)
    except PolicyError as exc:
        assert exc.code.startswith("POLICY_")
        assert isinstance(exc.message, str) and exc.message
        dumps(exc.to_dict())  # details are JSON-ready
        return None
    assert isinstance(policy, Policy)
    return policy


@settings(max_examples=400, deadline=None)
@given(documents)
def test_random_mappings_load_or_raise_policy_error(value: Any) -> None:
    policy = loads_or_policy_error(Policy.from_mapping, value)
    if policy is not None:
        assert Policy.from_mapping(policy.document) == policy


# -- valid documents ------------------------------------------------------------------------

def canonicalizes(value: Any) -> bool:
    try:
        dumps(value)
    except CanonicalError:
        return False
    return True


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False).filter(canonicalizes),
    st.text(max_size=5),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
constraints = st.fixed_dictionaries(
    {},
    optional={
        "required": st.booleans(),
        "type": st.sampled_from(["string", "integer", "number", "boolean", "array", "object", "null"]),
        "const": json_values,
        "enum": st.lists(json_values, min_size=1, max_size=4, unique_by=dumps),
        "min_length": st.integers(0, 4),
        "max_length": st.integers(4, 8),
        "pattern": st.sampled_from(["[a-z]*", "x.*", r"\d+", "", "a|b", "(?i)ab"]),
        "prefix": st.text(max_size=3),
        "min": st.one_of(st.integers(-5, 0), st.floats(-5, 0)),
        "max": st.one_of(st.integers(0, 5), st.floats(0, 5)),
    },
)
tool_names = st.text("abxyz_.-", min_size=1, max_size=5).filter(lambda s: not s.startswith("fs."))
arg_names = st.sampled_from(["a", "b", "c", "query", "to"])
allowed_tool = st.fixed_dictionaries(
    {"name": tool_names},
    optional={
        "allow": st.just(True),
        "approval": st.booleans(),
        "strict_args": st.booleans(),
        "args": st.dictionaries(arg_names, constraints, max_size=3),
    },
)
denied_tool = st.fixed_dictionaries({"name": tool_names, "allow": st.just(False)})
models = ["m1", "m2", "m3"]
llm_tables = st.one_of(
    st.fixed_dictionaries({}, optional={"allow": st.just(False)}),
    st.fixed_dictionaries(
        {"allow": st.just(True), "models": st.lists(st.sampled_from(models), min_size=1, unique=True)},
        optional={"max_tokens": st.integers(0, 500)},
    ),
)
valid_documents = st.fixed_dictionaries(
    {"version": st.just(1)},
    optional={
        "approval_for_irreversible": st.booleans(),
        "tools": st.lists(
            st.one_of(allowed_tool, denied_tool), max_size=4, unique_by=lambda t: t["name"]
        ),
        "llm": llm_tables,
        "budgets": st.fixed_dictionaries(
            {}, optional={name: st.integers(0, 1000) for name in BUDGETS}
        ),
        "fs": st.fixed_dictionaries(
            {},
            optional={
                "operations": st.lists(st.sampled_from(FS_OPERATIONS), unique=True),
                "approval": st.lists(st.sampled_from(FS_OPERATIONS), unique=True),
                "max_file_bytes": st.integers(0, 10**6),
                "extensions": st.lists(st.sampled_from([".txt", ".md", "", ".json"]), unique=True),
            },
        ),
    },
)


def toml_value(value: Any) -> str:
    """A small TOML emitter for the test (inline tables only)."""
    if value is None:
        raise ValueError("TOML has no null")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        assert math.isfinite(value)
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def to_toml(document: dict[str, Any]) -> str:
    return "".join(f"{toml_value(key)} = {toml_value(value)}\n" for key, value in document.items())


def has_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(has_null(v) for v in value)
    return False


@settings(max_examples=300, deadline=None)
@given(valid_documents)
def test_valid_documents_hash_the_same_from_every_form(document: dict[str, Any]) -> None:
    policy = Policy.from_mapping(document)
    assert Policy.from_mapping(policy.document).hash == policy.hash
    # (allow_unicode=True would emit a raw U+0085 that PyYAML reads back as a line break)
    assert Policy.from_yaml(_dump_yaml(document)).hash == policy.hash
    assert Policy.from_yaml(json.dumps(document)).hash == policy.hash  # JSON is YAML
    if not has_null(document):
        assert Policy.from_toml(to_toml(document)).hash == policy.hash


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths_of(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(paths_of(item, (*prefix, index)))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any, action: str) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if not rest and action == "delete":
            del copy[head]
        elif not rest and action == "add":
            copy[new[0]] = new[1]
        else:
            copy[head] = replaced(value[head], rest, new, action)
        return copy
    copy_list = list(value)
    copy_list[head] = replaced(value[head], rest, new, action)
    return copy_list


@settings(max_examples=400, deadline=None)
@given(valid_documents, st.data())
def test_mutated_documents_load_or_raise_policy_error(document: dict[str, Any], data: Any) -> None:
    path = data.draw(st.sampled_from(paths_of(document)))
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "replace":
        new: Any = data.draw(values)
    else:
        new = (data.draw(keys), data.draw(values))
        if not path:
            action = "replace"
            new = {**document, str(new[0]): new[1]}
    mutated = replaced(document, path, new, action) if path or action == "replace" else document
    loads_or_policy_error(Policy.from_mapping, mutated)


# -- text -----------------------------------------------------------------------------------

toml_fragments = st.sampled_from(
    [
        "version = 1\n",
        "version = 2\n",
        "[[tools]]\n",
        "name = 'x'\n",
        "[tools.args.q]\n",
        "pattern = '('\n",
        "max_length = -1\n",
        "[llm]\n",
        "allow = true\n",
        "models = ['m']\n",
        "[budgets]\n",
        "tokens = 1e400\n",
        "[fs]\n",
        "operations = ['read']\n",
        "x = 1979-05-27T07:32:00Z\n",
        "y = nan\n",
        "z = [[[[[]]]]]\n",
        "= \n",
        '"\\ud800" = 1\n',
    ]
)
yaml_fragments = st.sampled_from(
    [
        "version: 1\n",
        "tools:\n",
        "- name: x\n",
        "  args: {q: {pattern: '('}}\n",
        "llm: {allow: yes, models: [m]}\n",
        "budgets: {tokens: .inf}\n",
        "fs: {operations: [read, read]}\n",
        "a: &x 1\n",
        "b: *x\n",
        "? [1, 2]\n: 3\n",
        "c: !!binary aGk=\n",
        "d: 2001-02-31\n",
        "e: !!set {a, b}\n",
        "f: !!python/name:os.system\n",
        '"\\ud800": 1\n',
        "version: 1\nversion: 2\n",
        "<<: {version: 1}\n",
        "--- \n",
        "%YAML 1.1\n---\n",
        "g: 0x_1F\n",
        "h: 1_000\n",
        "i: !!float 1e999\n",
        "j: !!int 99999999999999999999999999\n",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(toml_fragments, max_size=8).map("".join)))
def test_random_toml_text_loads_or_raises_policy_error(text: str) -> None:
    loads_or_policy_error(Policy.from_toml, text)


def yaml_or_nothing(value: Any) -> str:
    try:
        return _dump_yaml(value, allow_unicode=True)
    except (yaml.YAMLError, UnicodeError):  # sets, tuples, times... have no safe YAML form
        return ""


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(yaml_fragments, max_size=8).map("".join),
        values.map(yaml_or_nothing),
    )
)
def test_random_yaml_text_loads_or_raises_policy_error(text: str) -> None:
    loads_or_policy_error(Policy.from_yaml, text)


@settings(max_examples=300, deadline=None)
@given(valid_documents, st.data())
def test_mutated_policy_text_loads_or_raises_policy_error(
    document: dict[str, Any], data: Any
) -> None:
    text = data.draw(
        st.sampled_from(
            [_dump_yaml(document), to_toml(document) if not has_null(document) else ""]
        )
    )
    if text:
        position = data.draw(st.integers(0, len(text)))
        insert = data.draw(st.text(max_size=3))
        cut = data.draw(st.integers(0, 3))
        text = text[:position] + insert + text[position + cut :]
    loads_or_policy_error(Policy.from_yaml, text)
    loads_or_policy_error(Policy.from_toml, text)


def test_deeply_nested_text_is_a_syntax_error_not_a_crash() -> None:
    for text in ("a = " + "[" * 5000 + "]" * 5000, "a: " + "[" * 5000 + "]" * 5000):
        loads_or_policy_error(Policy.from_toml, text)
        loads_or_policy_error(Policy.from_yaml, text)


def test_deeply_nested_mapping_is_a_policy_error() -> None:
    value: Any = 1
    for _ in range(5000):
        value = [value]
    document = {"version": 1, "tools": [{"name": "t", "args": {"a": {"const": value}}}]}
    assert loads_or_policy_error(Policy.from_mapping, document) is None
    when = datetime.datetime(2020, 1, 1)
    assert loads_or_policy_error(Policy.from_mapping, {"version": 1, "x": when}) is None


# -- authorize properties -------------------------------------------------------------------

usages = st.builds(
    Usage,
    llm_calls=st.integers(0, 1200),
    tokens=st.integers(0, 1200),
    cost_micro_usd=st.integers(0, 1200),
    effects=st.integers(0, 1200),
    elapsed_ms=st.integers(0, 1200),
)
arg_values = st.dictionaries(st.sampled_from(["a", "b", "c", "query", "to", "zz"]), json_values,
                             max_size=4)


@st.composite
def requests(draw: Any, document: dict[str, Any]) -> AuthorizationRequest:
    kind = draw(st.sampled_from(["tool", "llm", "fs"]))
    side_effect = draw(st.sampled_from(["read_only", "idempotent", "irreversible"]))
    if kind == "tool":
        listed = [t["name"] for t in document.get("tools", [])]
        name = draw(st.sampled_from(listed) if listed and draw(st.booleans()) else tool_names)
        return AuthorizationRequest("tool", name, draw(arg_values), side_effect)
    if kind == "llm":
        return AuthorizationRequest(
            "llm",
            "chat",
            {},
            side_effect,
            model=draw(st.sampled_from([*models, "other"])),
            max_tokens=draw(st.integers(0, 600)),
        )
    operation = draw(st.sampled_from([*FS_OPERATIONS, "chmod"]))
    return AuthorizationRequest("fs", f"fs.{operation}", {"path": "a.txt"}, side_effect)


def check_decision(decision: Decision) -> None:
    if decision.allowed:
        assert decision.code is None
    else:
        assert decision.code is not None
        assert lookup_code(decision.code).outcome is Outcome.DENIED
        assert not decision.requires_approval
    dumps(decision.to_dict())


@settings(max_examples=500, deadline=None)
@given(valid_documents, st.data())
def test_authorize_is_deterministic(document: dict[str, Any], data: Any) -> None:
    policy = Policy.from_mapping(document)
    twin = Policy.from_yaml(_dump_yaml(policy.document))
    request = data.draw(requests(document))
    usage = data.draw(usages)
    first = policy.authorize(request, usage)
    check_decision(first)
    assert policy.authorize(request, usage) == first
    assert twin.authorize(request, usage) == first
    copy = AuthorizationRequest(
        request.kind,
        request.name,
        json.loads(json.dumps(dict(request.args))),
        request.side_effect,
        request.model,
        request.max_tokens,
    )
    assert policy.authorize(copy, Usage(**vars(usage))) == first


@settings(max_examples=500, deadline=None)
@given(valid_documents, st.data())
def test_static_decision_is_authorize(document: dict[str, Any], data: Any) -> None:
    """A memoized decision is the decision authorize makes whatever the arguments and usage."""
    policy = Policy.from_mapping(document)
    request = data.draw(requests(document))
    fields = (request.kind, request.name, request.side_effect, request.model, request.max_tokens)
    static = policy.static_decision(*fields)
    decision = policy.authorize(request, data.draw(usages))
    budgeted = any(limit is not None for limit in policy.document["budgets"].values())
    tool = next((t for t in policy.document["tools"] if t["name"] == request.name), None)
    reads_args = (
        request.kind == "tool"
        and tool is not None
        and tool["allow"]
        and bool(tool["args"] or tool["strict_args"])
    )
    if budgeted or reads_args:
        assert static is None
        return
    assert static == decision
    assert policy.static_decision(*fields) is static  # memoized
    assert policy.static_decision(request.kind, request.name, True) is None  # type: ignore[arg-type]


def test_static_decision_keeps_exact_types_apart() -> None:
    policy = Policy.from_mapping({"version": 1, "llm": {"allow": True, "models": ["m"], "max_tokens": 1}})
    allowed = policy.static_decision("llm", "llm", model="m", max_tokens=1)
    assert allowed is not None and allowed.allowed
    assert policy.static_decision("llm", "llm", model="m", max_tokens=True) is None
    assert policy.static_decision("llm", "llm", model="m", max_tokens=1.0) is None  # type: ignore[arg-type]
    assert policy.static_decision("proposal", "p") is None


@settings(max_examples=300, deadline=None)
@given(valid_documents, st.data())
def test_deny_by_default(document: dict[str, Any], data: Any) -> None:
    policy = Policy.from_mapping(document)
    usage = data.draw(usages)
    listed = {t["name"] for t in document.get("tools", [])}
    name = data.draw(tool_names.filter(lambda n: n not in listed))
    decision = policy.authorize(AuthorizationRequest("tool", name, data.draw(arg_values)), usage)
    assert decision.code == "POLICY_TOOL_NOT_ALLOWED"
    llm_table = document.get("llm", {})
    if not llm_table.get("allow", False):
        request = AuthorizationRequest("llm", "chat", {}, model="m1", max_tokens=1)
        assert policy.authorize(request, usage).code == "POLICY_LLM_NOT_ALLOWED"
    operations = set(document.get("fs", {}).get("operations", []))
    for operation in FS_OPERATIONS:
        if operation not in operations:
            request = AuthorizationRequest("fs", f"fs.{operation}", {"path": "a"})
            assert policy.authorize(request, usage).code == "POLICY_FS_OPERATION_NOT_ALLOWED"
    empty = Policy.from_mapping({"version": 1})
    assert not empty.authorize(data.draw(requests(document)), usage).allowed


small_budgets = st.fixed_dictionaries({}, optional={name: st.integers(0, 50) for name in BUDGETS})
small_usages = st.builds(
    Usage,
    llm_calls=st.integers(0, 60),
    tokens=st.integers(0, 60),
    cost_micro_usd=st.integers(0, 60),
    effects=st.integers(0, 60),
    elapsed_ms=st.integers(0, 60),
)


@settings(max_examples=300, deadline=None)
@given(valid_documents, small_budgets, st.data())
def test_budgets_are_monotone_in_usage(
    document: dict[str, Any], budgets: dict[str, int], data: Any
) -> None:
    document = {**document, "budgets": budgets}
    policy = Policy.from_mapping(document)
    request = data.draw(requests(document))
    low = data.draw(small_usages)
    high = Usage(
        **{name: value + data.draw(st.integers(0, 30)) for name, value in vars(low).items()}
    )
    at_low = policy.authorize(request, low)
    at_high = policy.authorize(request, high)
    if at_low.code == "POLICY_BUDGET_EXCEEDED":
        assert at_high.code == "POLICY_BUDGET_EXCEEDED"
    if at_high.allowed:
        assert at_low == at_high
    if not at_low.allowed and at_low.code != "POLICY_BUDGET_EXCEEDED":
        assert at_high == at_low  # permission and argument denials do not depend on usage
