"""The policy: loading, normalization, hashing, load errors and the AUTHORIZE decision."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from tracelock.core.canonical import dumps
from tracelock.core.hashing import canonical_hash, is_hex_digest
from tracelock.errors import PolicyError
from tracelock.runtime.outcomes import Outcome, StepFailure, all_codes, lookup_code
from tracelock.runtime.policy.policy import (
    BUDGETS,
    AuthorizationRequest,
    Decision,
    Policy,
    PolicyDuplicateError,
    PolicyFileError,
    PolicyMissingKeyError,
    PolicyRequestError,
    PolicySyntaxError,
    PolicyTypeError,
    PolicyUnknownKeyError,
    PolicyValueError,
    PolicyVersionError,
    Usage,
)
from tracelock.runtime.policy.sandbox import SandboxLimits

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "policies"

EMPTY_DOCUMENT = {
    "version": 1,
    "approval_for_irreversible": False,
    "tools": [],
    "llm": {"allow": False, "models": [], "max_tokens": None},
    "budgets": dict.fromkeys(BUDGETS),
    "fs": {"operations": [], "max_file_bytes": 1_048_576, "extensions": None, "approval": []},
}


def tool(name: str, args: dict[str, Any] | None = None, **kw: Any) -> AuthorizationRequest:
    return AuthorizationRequest("tool", name, args or {}, **kw)


def llm(model: str = "m", max_tokens: int = 100) -> AuthorizationRequest:
    return AuthorizationRequest("llm", "chat", {}, model=model, max_tokens=max_tokens)


def fs(operation: str, args: dict[str, Any] | None = None) -> AuthorizationRequest:
    return AuthorizationRequest("fs", f"fs.{operation}", args or {"path": "a.txt"})


def one_tool(**entry: Any) -> Policy:
    return Policy.from_mapping({"version": 1, "tools": [{"name": "t", **entry}]})


# -- loading and normalization --------------------------------------------------------------


def test_minimal_policy_is_normalized_with_every_default() -> None:
    policy = Policy.from_mapping({"version": 1})
    assert policy.document == EMPTY_DOCUMENT
    assert policy.hash == canonical_hash(EMPTY_DOCUMENT)
    assert is_hex_digest(policy.hash)
    assert policy.canonical_bytes == dumps(EMPTY_DOCUMENT)


def test_document_is_a_fresh_copy() -> None:
    policy = Policy.from_mapping({"version": 1})
    policy.document["tools"].append("junk")
    assert policy.document == EMPTY_DOCUMENT


def test_examples_in_toml_and_yaml_hash_the_same() -> None:
    toml_policy = Policy.load(EXAMPLES / "research-agent.toml")
    yaml_policy = Policy.load(EXAMPLES / "research-agent.yaml")
    assert toml_policy.document == yaml_policy.document
    assert toml_policy.hash == yaml_policy.hash
    assert toml_policy == yaml_policy
    assert Policy.from_mapping(toml_policy.document).hash == toml_policy.hash


def test_yml_extension_and_text_constructors(tmp_path: Path) -> None:
    (tmp_path / "p.yml").write_text("version: 1\n")
    assert Policy.load(tmp_path / "p.yml").hash == Policy.from_yaml("version: 1").hash
    assert Policy.from_toml("version = 1").hash == Policy.from_yaml("version: 1").hash


def test_explicit_defaults_and_order_do_not_change_the_hash() -> None:
    terse = Policy.from_mapping(
        {
            "version": 1,
            "tools": [{"name": "b"}, {"name": "a", "args": {"x": {"enum": [3, 1, 2]}}}],
            "llm": {"allow": True, "models": ["z", "y"]},
            "fs": {"operations": ["write", "read"]},
        }
    )
    verbose = Policy.from_mapping(
        {
            "version": 1,
            "approval_for_irreversible": False,
            "tools": [
                {
                    "name": "a",
                    "allow": True,
                    "approval": False,
                    "strict_args": False,
                    "args": {"x": {"enum": [1, 2, 3], "required": False}},
                },
                {"name": "b", "allow": True, "args": {}},
            ],
            "llm": {"allow": True, "models": ["y", "z"], "max_tokens": None},
            "budgets": {"tokens": None},
            "fs": {"operations": ["read", "write"], "max_file_bytes": 1_048_576},
        }
    )
    assert terse.hash == verbose.hash


def test_numbers_are_json_numbers() -> None:
    as_int = one_tool(args={"n": {"min": 1, "max": 5}})
    as_float = one_tool(args={"n": {"min": 1.0, "max": 5.0}})
    assert as_int.hash == as_float.hash
    assert one_tool(args={"n": {"min": 1.5}}).document["tools"][0]["args"]["n"]["min"] == 1.5


def test_toml_and_yaml_array_of_tables_forms() -> None:
    toml_text = """
version = 1
[[tools]]
name = "search"
[tools.args.q]
max_length = 10
[[tools]]
name = "mail"
approval = true
"""
    yaml_text = """
version: 1
tools:
- {name: mail, approval: true}
- name: search
  args: {q: {max_length: 10}}
"""
    assert Policy.from_toml(toml_text).hash == Policy.from_yaml(yaml_text).hash


def test_sandbox_limits_come_from_the_fs_table() -> None:
    policy = Policy.from_mapping(
        {"version": 1, "fs": {"max_file_bytes": 10, "extensions": [".txt", ""]}}
    )
    assert policy.sandbox_limits() == SandboxLimits(10, frozenset({".txt", ""}))
    assert Policy.from_mapping({"version": 1}).sandbox_limits() == SandboxLimits()


# -- load errors ----------------------------------------------------------------------------

LOAD_ERRORS: list[tuple[Any, type[PolicyError], str]] = [
    ({}, PolicyVersionError, "version"),
    ({"version": "1"}, PolicyVersionError, "version"),
    ({"version": True}, PolicyVersionError, "version"),
    ({"version": 2, "future": {}}, PolicyVersionError, "version"),
    ({"version": 1.0}, PolicyVersionError, "version"),
    ([], PolicyTypeError, ""),
    (None, PolicyTypeError, ""),
    ("version = 1", PolicyTypeError, ""),
    ({"version": 1, "colour": "red"}, PolicyUnknownKeyError, "colour"),
    ({"version": 1, 7: "x"}, PolicyTypeError, ""),
    ({"version": 1, "approval_for_irreversible": "yes"}, PolicyTypeError,
     "approval_for_irreversible"),
    ({"version": 1, "tools": {"t": {}}}, PolicyTypeError, "tools"),
    ({"version": 1, "tools": ["t"]}, PolicyTypeError, "tools[0]"),
    ({"version": 1, "tools": [{}]}, PolicyMissingKeyError, "tools[0].name"),
    ({"version": 1, "tools": [{"name": ""}]}, PolicyValueError, "tools[0].name"),
    ({"version": 1, "tools": [{"name": 5}]}, PolicyTypeError, "tools[0].name"),
    ({"version": 1, "tools": [{"name": "fs.read"}]}, PolicyValueError, "tools[0].name"),
    ({"version": 1, "tools": [{"name": "t"}, {"name": "t"}]}, PolicyDuplicateError,
     "tools[1].name"),
    ({"version": 1, "tools": [{"name": "t", "colour": 1}]}, PolicyUnknownKeyError,
     "tools[0].colour"),
    ({"version": 1, "tools": [{"name": "t", "allow": 1}]}, PolicyTypeError, "tools[0].allow"),
    ({"version": 1, "tools": [{"name": "t", "allow": False, "approval": True}]},
     PolicyValueError, "tools[0]"),
    ({"version": 1, "tools": [{"name": "t", "args": []}]}, PolicyTypeError, "tools[0].args"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": 5}}]}, PolicyTypeError,
     "tools[0].args.q"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"regex": "x"}}}]},
     PolicyUnknownKeyError, "tools[0].args.q.regex"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"pattern": "("}}}]},
     PolicyValueError, "tools[0].args.q.pattern"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"pattern": 5}}}]},
     PolicyTypeError, "tools[0].args.q.pattern"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"type": "str"}}}]},
     PolicyValueError, "tools[0].args.q.type"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"enum": []}}}]},
     PolicyValueError, "tools[0].args.q.enum"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"enum": [1, 1.0]}}}]},
     PolicyDuplicateError, "tools[0].args.q.enum[1]"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"max_length": -1}}}]},
     PolicyValueError, "tools[0].args.q.max_length"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"min": 2, "max": 1}}}]},
     PolicyValueError, "tools[0].args.q"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"min": float("nan")}}}]},
     PolicyValueError, "tools[0].args.q.min"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"max": float("inf")}}}]},
     PolicyValueError, "tools[0].args.q.max"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"min": True}}}]},
     PolicyTypeError, "tools[0].args.q.min"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"const": datetime.date(2020, 1, 1)}}}]},
     PolicyTypeError, "tools[0].args.q.const"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"const": {"a": {1, 2}}}}}]},
     PolicyTypeError, "tools[0].args.q.const.a"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"const": 2**60}}}]},
     PolicyValueError, "tools[0].args.q.const"),
    ({"version": 1, "tools": [{"name": "t", "args": {"q": {"prefix": "\ud800"}}}]},
     PolicyValueError, "tools[0].args.q.prefix"),
    ({"version": 1, "llm": {"allow": True}}, PolicyMissingKeyError, "llm.models"),
    ({"version": 1, "llm": {"allow": True, "models": "m"}}, PolicyTypeError, "llm.models"),
    ({"version": 1, "llm": {"allow": True, "models": ["m", "m"]}}, PolicyDuplicateError,
     "llm.models[1]"),
    ({"version": 1, "llm": {"allow": True, "models": [""]}}, PolicyValueError, "llm.models[0]"),
    ({"version": 1, "llm": {"max_tokens": -5}}, PolicyValueError, "llm.max_tokens"),
    ({"version": 1, "llm": {"temperature": 0}}, PolicyUnknownKeyError, "llm.temperature"),
    ({"version": 1, "budgets": {"tokens": -1}}, PolicyValueError, "budgets.tokens"),
    ({"version": 1, "budgets": {"tokens": 1.5}}, PolicyTypeError, "budgets.tokens"),
    ({"version": 1, "budgets": {"cost_micro_usd": "2.50"}}, PolicyTypeError,
     "budgets.cost_micro_usd"),
    ({"version": 1, "budgets": {"effects": False}}, PolicyTypeError, "budgets.effects"),
    ({"version": 1, "budgets": {"tokens": 2**53}}, PolicyValueError, "budgets.tokens"),
    ({"version": 1, "budgets": {"cost": 1}}, PolicyUnknownKeyError, "budgets.cost"),
    ({"version": 1, "fs": {"operations": ["read", "chmod"]}}, PolicyValueError,
     "fs.operations[1]"),
    ({"version": 1, "fs": {"operations": ["read", "read"]}}, PolicyDuplicateError,
     "fs.operations[1]"),
    ({"version": 1, "fs": {"extensions": [".tar.gz"]}}, PolicyValueError, "fs.extensions[0]"),
    ({"version": 1, "fs": {"extensions": ["txt"]}}, PolicyValueError, "fs.extensions[0]"),
    ({"version": 1, "fs": {"extensions": [".a/b"]}}, PolicyValueError, "fs.extensions[0]"),
    ({"version": 1, "fs": {"max_file_bytes": -1}}, PolicyValueError, "fs.max_file_bytes"),
    ({"version": 1, "fs": {"approval": ["nuke"]}}, PolicyValueError, "fs.approval[0]"),
    ({"version": 1, "fs": []}, PolicyTypeError, "fs"),
]


@pytest.mark.parametrize(("mapping", "error", "path"), LOAD_ERRORS)
def test_malformed_policies_are_rejected_naming_the_key_path(
    mapping: Any, error: type[PolicyError], path: str
) -> None:
    with pytest.raises(error) as info:
        Policy.from_mapping(mapping)
    assert type(info.value) is error
    assert info.value.details["path"] == path
    if path:
        assert path in info.value.message


def test_error_details_are_always_json() -> None:
    for version in (2, 2**70, -(2**70)):
        with pytest.raises(PolicyVersionError) as info:
            Policy.from_mapping({"version": version})
        dumps(info.value.to_dict())


SYNTAX_ERRORS = [
    ("toml", "version = 1\nversion = 1\n"),
    ("toml", "version = 1\n[[tools]]\nname = 'a'\nname = 'b'\n"),
    ("toml", "version = \n"),
    ("toml", "version = 1\n[fs]\n[fs]\n"),
    ("yaml", "version: 1\nversion: 1\n"),
    ("yaml", "version: 1\nllm: {allow: true, allow: false}\n"),
    ("yaml", "version: 1\nx: &a [1]\ny: *a\n"),
    ("yaml", "version: 1\ntools: [\n"),
    ("yaml", "version: 1\nwhen: !!python/object:os.system {}\n"),
    ("yaml", "version: 1\nbad: 2001-02-31\n"),
]


@pytest.mark.parametrize(("fmt", "text"), SYNTAX_ERRORS)
def test_syntax_errors(fmt: str, text: str) -> None:
    with pytest.raises(PolicySyntaxError):
        if fmt == "toml":
            Policy.from_toml(text)
        else:
            Policy.from_yaml(text)


def test_yaml_documents_that_are_not_tables() -> None:
    for text in ("", "- 1\n", "just text", "null"):
        with pytest.raises(PolicyTypeError):
            Policy.from_yaml(text)


def test_yaml_non_json_scalars_are_type_errors() -> None:
    with pytest.raises(PolicyTypeError) as info:
        Policy.from_yaml("version: 1\ntools: [{name: t, args: {d: {const: 2001-02-03}}}]\n")
    assert info.value.details["path"] == "tools[0].args.d.const"
    with pytest.raises(PolicyTypeError):
        Policy.from_yaml("version: 1\ntools: [{name: t, args: {d: {const: !!binary aGk=}}}]\n")
    with pytest.raises(PolicyValueError):
        Policy.from_yaml("version: 1\nbudgets: {tokens: .inf}\n".replace(".inf", "-3"))


def test_file_errors(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text("{}")
    with pytest.raises(PolicyFileError):
        Policy.load(tmp_path / "p.json")
    with pytest.raises(PolicyFileError):
        Policy.load(tmp_path / "missing.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(PolicyFileError):
        Policy.load(tmp_path / "dir.toml")
    (tmp_path / "latin.toml").write_bytes(b"version = 1 # caf\xe9\n")
    with pytest.raises(PolicySyntaxError):
        Policy.load(tmp_path / "latin.toml")


def test_load_errors_are_policy_errors_with_distinct_codes() -> None:
    classes = [
        PolicyFileError,
        PolicySyntaxError,
        PolicyVersionError,
        PolicyUnknownKeyError,
        PolicyMissingKeyError,
        PolicyTypeError,
        PolicyValueError,
        PolicyDuplicateError,
    ]
    codes = {cls.code for cls in classes}
    assert len(codes) == len(classes)
    assert all(issubclass(cls, PolicyError) and code.startswith("POLICY_")
               for cls, code in zip(classes, [c.code for c in classes], strict=True))


def test_every_code_is_documented() -> None:
    text = (REPO / "docs" / "errors.md").read_text()
    exception_codes = [
        cls.code
        for cls in (
            PolicyFileError,
            PolicySyntaxError,
            PolicyVersionError,
            PolicyUnknownKeyError,
            PolicyMissingKeyError,
            PolicyTypeError,
            PolicyValueError,
            PolicyDuplicateError,
            PolicyRequestError,
        )
    ] + ["SANDBOX_ROOT_INVALID"]
    step_codes = [c.code for c in all_codes() if c.code.startswith(("POLICY_", "SANDBOX_"))]
    assert len(step_codes) == 9 + 18
    for code in exception_codes + step_codes:
        assert f"`{code}`" in text, code
    policy_doc = (REPO / "docs" / "policy.md").read_text()
    for code in exception_codes + step_codes:
        assert f"`{code}`" in policy_doc, code


# -- authorize: deny by default and permissions ---------------------------------------------

EMPTY = Policy.from_mapping({"version": 1})


@pytest.mark.parametrize(
    "request_",
    [
        tool("anything"),
        tool("fs.read", {"path": "a"}),
        llm(),
        fs("read"),
        fs("list", {}),
        AuthorizationRequest("fs", "fs.chmod", {}),
        AuthorizationRequest("fs", "read", {}),
    ],
)
def test_empty_policy_denies_everything(request_: AuthorizationRequest) -> None:
    decision = EMPTY.authorize(request_, Usage())
    assert not decision.allowed
    assert not decision.requires_approval
    assert decision.code is not None
    assert lookup_code(decision.code).outcome is Outcome.DENIED


def test_tool_not_listed_and_explicitly_denied() -> None:
    policy = Policy.from_mapping(
        {"version": 1, "tools": [{"name": "ok"}, {"name": "bad", "allow": False}]}
    )
    assert policy.authorize(tool("ok"), Usage()).allowed
    assert policy.authorize(tool("other"), Usage()).code == "POLICY_TOOL_NOT_ALLOWED"
    denied = policy.authorize(tool("bad"), Usage())
    assert denied.code == "POLICY_TOOL_DENIED"
    assert denied.details == {"tool": "bad"}
    assert policy.authorize(tool("OK"), Usage()).code == "POLICY_TOOL_NOT_ALLOWED"


CONSTRAINT_CASES: list[tuple[dict[str, Any], Any, bool]] = [
    ({"type": "string"}, "x", True),
    ({"type": "string"}, 1, False),
    ({"type": "integer"}, 3, True),
    ({"type": "integer"}, 3.0, True),
    ({"type": "integer"}, 3.5, False),
    ({"type": "integer"}, True, False),
    ({"type": "number"}, 3.5, True),
    ({"type": "number"}, "3", False),
    ({"type": "boolean"}, False, True),
    ({"type": "boolean"}, 0, False),
    ({"type": "array"}, [1], True),
    ({"type": "object"}, {"a": 1}, True),
    ({"type": "object"}, [], False),
    ({"type": "null"}, None, True),
    ({"const": 1}, 1.0, True),
    ({"const": 1}, True, False),
    ({"const": {"a": [1, "x"]}}, {"a": [1, "x"]}, True),
    ({"const": {"a": [1, "x"]}}, {"a": ["x", 1]}, False),
    ({"enum": ["GET", "HEAD"]}, "GET", True),
    ({"enum": ["GET", "HEAD"]}, "get", False),
    ({"enum": [None, 0]}, False, False),
    ({"min_length": 2}, "ab", True),
    ({"min_length": 2}, "a", False),
    ({"min_length": 2}, 22, False),
    ({"max_length": 2}, "\u00e9\u00e9", True),  # code points, not bytes
    ({"max_length": 2}, "abc", False),
    ({"max_length": 2}, [1, 2, 3], False),
    ({"pattern": "[a-z]+"}, "abc", True),
    ({"pattern": "[a-z]+"}, "abc1", False),  # full match
    ({"pattern": "[a-z]+"}, "1abc", False),
    ({"pattern": "[a-z]+"}, ["abc"], False),
    ({"pattern": "a|b"}, "ab", False),
    ({"prefix": "https://x/"}, "https://x/y", True),
    ({"prefix": "https://x/"}, "https://x.evil/", False),
    ({"prefix": "https://x/"}, 5, False),
    ({"min": 0, "max": 10}, 10, True),
    ({"min": 0, "max": 10}, 10.5, False),
    ({"min": 0, "max": 10}, -1, False),
    ({"min": 0}, "5", False),
    ({"max": 1.5}, 1.5, True),
    ({"max": 2**53 - 1}, 2**53 - 1, True),
    ({}, {"anything": [1, 2]}, True),
]


@pytest.mark.parametrize(("constraint", "value", "ok"), CONSTRAINT_CASES)
def test_argument_constraints(constraint: dict[str, Any], value: Any, ok: bool) -> None:
    policy = one_tool(args={"a": constraint})
    decision = policy.authorize(tool("t", {"a": value}), Usage())
    assert decision.allowed is ok
    if not ok:
        assert decision.code == "POLICY_ARGUMENT_REJECTED"
        assert decision.details["argument"] == "a"
        assert decision.details["constraint"] in constraint


def test_constraints_are_checked_in_a_fixed_order() -> None:
    policy = one_tool(args={"a": {"type": "string", "max_length": 1, "pattern": "x"}})
    assert policy.authorize(tool("t", {"a": 5}), Usage()).details["constraint"] == "type"
    assert policy.authorize(tool("t", {"a": "yy"}), Usage()).details["constraint"] == "max_length"
    assert policy.authorize(tool("t", {"a": "y"}), Usage()).details["constraint"] == "pattern"
    two = one_tool(args={"b": {"max": 1}, "a": {"max": 1}})
    assert two.authorize(tool("t", {"a": 5, "b": 5}), Usage()).details["argument"] == "a"


def test_required_and_strict_args() -> None:
    policy = one_tool(strict_args=True, args={"q": {"required": True}, "n": {}})
    assert policy.authorize(tool("t", {"q": 1}), Usage()).allowed
    assert policy.authorize(tool("t", {"q": 1, "n": 2}), Usage()).allowed
    missing = policy.authorize(tool("t", {"n": 2}), Usage())
    assert (missing.code, missing.details["constraint"]) == ("POLICY_ARGUMENT_REJECTED", "required")
    extra = policy.authorize(tool("t", {"q": 1, "z": 0}), Usage())
    assert extra.details == {"tool": "t", "argument": "z", "constraint": "strict_args"}
    lax = one_tool(args={"q": {"max": 1}})
    assert lax.authorize(tool("t", {"z": 99}), Usage()).allowed
    assert lax.authorize(tool("t", {}), Usage()).allowed


def test_patterns_match_the_whole_value_without_flags() -> None:
    policy = one_tool(args={"to": {"pattern": r"[a-z]+@example\.org"}})
    assert policy.authorize(tool("t", {"to": "bob@example.org"}), Usage()).allowed
    for bad in ("bob@example.org\n", "bob@example.org.evil", "BOB@example.org", "bob@exampleXorg"):
        assert not policy.authorize(tool("t", {"to": bad}), Usage()).allowed, bad


# -- approval -------------------------------------------------------------------------------


def test_approval_flags() -> None:
    policy = Policy.from_mapping(
        {
            "version": 1,
            "tools": [{"name": "mail", "approval": True}, {"name": "rm"}],
            "fs": {"operations": ["read", "delete", "write"], "approval": ["delete"]},
        }
    )
    mail = policy.authorize(tool("mail"), Usage())
    assert (mail.allowed, mail.requires_approval, mail.code) == (True, True, None)
    assert "approval" in mail.reason
    rm = policy.authorize(tool("rm", side_effect="irreversible"), Usage())
    assert (rm.allowed, rm.requires_approval) == (True, False)
    assert policy.authorize(fs("delete"), Usage()).requires_approval
    assert not policy.authorize(fs("read"), Usage()).requires_approval
    strict = Policy.from_mapping(
        {"version": 1, "approval_for_irreversible": True, "tools": [{"name": "rm"}]}
    )
    assert strict.authorize(tool("rm", side_effect="irreversible"), Usage()).requires_approval
    assert not strict.authorize(tool("rm", side_effect="idempotent"), Usage()).requires_approval


def test_a_denial_never_asks_for_approval() -> None:
    policy = one_tool(approval=True, args={"a": {"max": 1}})
    decision = policy.authorize(tool("t", {"a": 2}), Usage())
    assert (decision.allowed, decision.requires_approval) == (False, False)


# -- LLM ------------------------------------------------------------------------------------


def test_llm_rules() -> None:
    policy = Policy.from_mapping(
        {"version": 1, "llm": {"allow": True, "models": ["small", "large"], "max_tokens": 1000}}
    )
    assert policy.authorize(llm("small", 1000), Usage()).allowed
    assert policy.authorize(llm("medium"), Usage()).code == "POLICY_MODEL_NOT_ALLOWED"
    capped = policy.authorize(llm("large", 1001), Usage())
    assert capped.code == "POLICY_LLM_MAX_TOKENS"
    assert capped.details == {"requested": 1001, "limit": 1000}
    closed = Policy.from_mapping({"version": 1, "llm": {"allow": False, "models": ["small"]}})
    assert closed.authorize(llm("small"), Usage()).code == "POLICY_LLM_NOT_ALLOWED"


# -- budgets --------------------------------------------------------------------------------


def budget_policy(**budgets: int) -> Policy:
    return Policy.from_mapping(
        {
            "version": 1,
            "tools": [{"name": "t"}],
            "llm": {"allow": True, "models": ["m"]},
            "fs": {"operations": ["read"]},
            "budgets": budgets,
        }
    )


def test_call_count_budgets() -> None:
    policy = budget_policy(llm_calls=2, effects=5)
    assert policy.authorize(llm(), Usage(llm_calls=1, effects=1)).allowed
    spent = policy.authorize(llm(), Usage(llm_calls=2, effects=2))
    assert spent.code == "POLICY_BUDGET_EXCEEDED"
    assert spent.details == {"budget": "llm_calls", "limit": 2, "used": 2, "requested": 1}
    # llm_calls does not apply to tools; effects applies to every kind
    assert policy.authorize(tool("t"), Usage(llm_calls=9, effects=4)).allowed
    for request in (tool("t"), fs("read"), llm()):
        decision = policy.authorize(request, Usage(effects=5))
        assert decision.details["budget"] == "effects"


def test_token_budget_is_prospective() -> None:
    policy = budget_policy(tokens=1000)
    assert policy.authorize(llm(max_tokens=400), Usage(tokens=600)).allowed
    decision = policy.authorize(llm(max_tokens=401), Usage(tokens=600))
    assert decision.details == {"budget": "tokens", "limit": 1000, "used": 600, "requested": 401}
    assert not policy.authorize(llm(max_tokens=0), Usage(tokens=1000)).allowed
    assert policy.authorize(tool("t"), Usage(tokens=10**6)).allowed


def test_cost_and_wall_time_budgets_apply_to_every_kind() -> None:
    policy = budget_policy(cost_micro_usd=2_500_000, wall_time_ms=60_000)
    for request in (tool("t"), fs("read"), llm()):
        assert policy.authorize(request, Usage(cost_micro_usd=2_499_999, elapsed_ms=59_999)).allowed
        cost = policy.authorize(request, Usage(cost_micro_usd=2_500_000))
        assert cost.details == {
            "budget": "cost_micro_usd",
            "limit": 2_500_000,
            "used": 2_500_000,
            "requested": 0,
        }
        time = policy.authorize(request, Usage(elapsed_ms=60_000))
        assert time.details["budget"] == "wall_time_ms"


def test_budgets_are_checked_in_a_fixed_order_after_permissions() -> None:
    policy = budget_policy(**dict.fromkeys(BUDGETS, 0))
    assert policy.authorize(llm(), Usage()).details["budget"] == "llm_calls"
    assert policy.authorize(tool("t"), Usage()).details["budget"] == "cost_micro_usd"
    assert policy.authorize(tool("nope"), Usage()).code == "POLICY_TOOL_NOT_ALLOWED"


def test_budget_accessor() -> None:
    policy = budget_policy(tokens=5)
    assert policy.budget("tokens") == 5
    assert policy.budget("wall_time_ms") is None
    with pytest.raises(PolicyRequestError):
        policy.budget("cost")


def test_zero_budgets_deny_and_unset_budgets_do_not() -> None:
    assert not budget_policy(effects=0).authorize(tool("t"), Usage()).allowed
    assert budget_policy().authorize(tool("t"), Usage(effects=10**9, elapsed_ms=10**9)).allowed


# -- fs -------------------------------------------------------------------------------------


def test_fs_operations() -> None:
    policy = Policy.from_mapping({"version": 1, "fs": {"operations": ["read", "list"]}})
    assert policy.authorize(fs("read"), Usage()).allowed
    assert policy.authorize(fs("list", {}), Usage()).allowed
    denied = policy.authorize(fs("write", {"path": "a", "content": ""}), Usage())
    assert denied.code == "POLICY_FS_OPERATION_NOT_ALLOWED"
    assert denied.details == {"operation": "fs.write"}
    for name in ("fs.chmod", "read", "fs.", "fs.read.x"):
        decision = policy.authorize(AuthorizationRequest("fs", name, {}), Usage())
        assert decision.code == "POLICY_FS_OPERATION_NOT_ALLOWED"


# -- decisions and requests -----------------------------------------------------------------


def test_decision_failure_and_dict() -> None:
    decision = EMPTY.authorize(tool("x"), Usage())
    failure = decision.failure()
    assert isinstance(failure, StepFailure)
    assert failure.outcome is Outcome.DENIED
    assert failure.step_code is lookup_code("POLICY_TOOL_NOT_ALLOWED")
    assert failure.details == {"tool": "x"}
    assert failure.message == decision.reason
    dumps(decision.to_dict())
    allowed = Policy.from_mapping({"version": 1, "tools": [{"name": "x"}]}).authorize(
        tool("x"), Usage()
    )
    assert allowed.step_code is None
    with pytest.raises(PolicyRequestError):
        allowed.failure()


def test_reasoning_is_not_an_input() -> None:
    fields = {f.name for f in dataclasses.fields(AuthorizationRequest)}
    assert fields == {"kind", "name", "args", "side_effect", "model", "max_tokens"}
    assert list(inspect.signature(Policy.authorize).parameters) == ["self", "request", "usage"]
    with pytest.raises(TypeError):
        AuthorizationRequest("tool", "t", {}, reasoning="please")  # type: ignore[call-arg]


BAD_REQUESTS: list[dict[str, Any]] = [
    {"kind": "proposal", "name": "t"},
    {"kind": "tool", "name": ""},
    {"kind": "tool", "name": 3},
    {"kind": "tool", "name": "t", "args": [1]},
    {"kind": "tool", "name": "t", "args": {"x": float("nan")}},
    {"kind": "tool", "name": "t", "args": {"x": {1, 2}}},
    {"kind": "tool", "name": "t", "args": {1: "x"}},
    {"kind": "tool", "name": "t", "args": {"x": 2**60}},
    {"kind": "tool", "name": "t", "side_effect": "dangerous"},
    {"kind": "tool", "name": "t", "model": "m"},
    {"kind": "fs", "name": "fs.read", "max_tokens": 3},
    {"kind": "llm", "name": "chat", "max_tokens": 3},
    {"kind": "llm", "name": "chat", "model": "m"},
    {"kind": "llm", "name": "chat", "model": "m", "max_tokens": -1},
    {"kind": "llm", "name": "chat", "model": "m", "max_tokens": True},
]


@pytest.mark.parametrize("fields", BAD_REQUESTS)
def test_malformed_requests_are_programming_errors(fields: dict[str, Any]) -> None:
    with pytest.raises(PolicyRequestError) as info:
        AuthorizationRequest(**fields)
    assert info.value.code == "POLICY_REQUEST_INVALID"


def test_usage_must_be_non_negative_ints() -> None:
    for bad in ({"tokens": -1}, {"effects": 1.0}, {"elapsed_ms": True}, {"cost_micro_usd": "1"}):
        with pytest.raises(PolicyRequestError):
            Usage(**bad)
    with pytest.raises(PolicyRequestError):
        EMPTY.authorize(tool("t"), {"tokens": 0})  # type: ignore[arg-type]


def test_request_args_are_canonicalized_and_detached() -> None:
    args: dict[str, Any] = {"a": (1, 2), "b": 1.0}
    request = tool("t", args)
    args["a"] = "changed"
    assert request.args == {"a": [1, 2], "b": 1}


def test_step_codes_are_registered_as_denied() -> None:
    names = [
        "POLICY_TOOL_NOT_ALLOWED",
        "POLICY_TOOL_DENIED",
        "POLICY_ARGUMENT_REJECTED",
        "POLICY_LLM_NOT_ALLOWED",
        "POLICY_MODEL_NOT_ALLOWED",
        "POLICY_LLM_MAX_TOKENS",
        "POLICY_BUDGET_EXCEEDED",
        "POLICY_FS_OPERATION_NOT_ALLOWED",
    ]
    for name in names:
        assert lookup_code(name).outcome is Outcome.DENIED
        assert re.fullmatch(r"[A-Z][A-Z_]+", name)


def test_decision_is_immutable() -> None:
    decision = EMPTY.authorize(tool("x"), Usage())
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.allowed = True  # type: ignore[misc]
    assert isinstance(decision, Decision)
