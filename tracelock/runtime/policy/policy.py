"""The policy: a deny-by-default rule set loaded from TOML or YAML, and the AUTHORIZE decision.

A policy document (schema ``version = 1``) allows tools by name with argument constraints,
marks tools that need human approval, controls LLM calls, sets per-run budgets and configures
the sandboxed filesystem toolset. Loading checks the whole document before anything is
used: a malformed policy raises a :class:`~tracelock.errors.PolicyError` subclass naming the
key path, and nothing of it applies.

``Policy.document`` is the normalized document (every default written out, unordered lists
sorted), ``Policy.hash`` the SHA-256 of its canonical JSON: a TOML and a YAML file that say
the same thing have the same hash.

``Policy.authorize(request, usage)`` is a pure function of the request, the policy and the
run's recorded counters. It never sees a proposal's reasoning text. See ``docs/policy.md``.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

import orjson
import yaml

from tracelock.core.canonical import MAX_SAFE_INTEGER, dumps, loads
from tracelock.core.hashing import canonical_hash
from tracelock.errors import CanonicalError, PolicyError, RuntimeFault
from tracelock.runtime.outcomes import Outcome, StepCode, StepFailure, lookup_code, register_code
from tracelock.runtime.policy.sandbox import (
    DEFAULT_MAX_FILE_BYTES,
    FS_OPERATIONS,
    SandboxLimits,
    SideEffect,
)

__all__ = [
    "BUDGETS",
    "CONSTRAINT_KEYS",
    "DAILY_BUDGETS",
    "DAILY_SCOPES",
    "SUPPORTED_VERSIONS",
    "AuthorizationRequest",
    "Decision",
    "Policy",
    "PolicyDuplicateError",
    "PolicyFileError",
    "PolicyMissingKeyError",
    "PolicyRequestError",
    "PolicySyntaxError",
    "PolicyTypeError",
    "PolicyUnknownKeyError",
    "PolicyValueError",
    "PolicyVersionError",
    "RequestKind",
    "Usage",
]

SUPPORTED_VERSIONS: Final = (1,)
#: Budget names, in the order they are checked.
BUDGETS: Final = ("llm_calls", "tokens", "cost_micro_usd", "effects", "wall_time_ms")
#: Argument constraint keys, in the order they are checked.
CONSTRAINT_KEYS: Final = (
    "required",
    "type",
    "const",
    "enum",
    "min_length",
    "max_length",
    "pattern",
    "prefix",
    "min",
    "max",
)
_TYPES: Final = ("string", "integer", "number", "boolean", "array", "object", "null")
_SIDE_EFFECTS: Final = ("read_only", "idempotent", "irreversible")
_KINDS: Final = ("tool", "llm", "fs", "http")
_MAX_NESTING: Final = 64
#: Most decisions Policy.static_decision keeps, and most HTTP rule matches (each starts
#: over past this).
_STATIC_DECISIONS: Final = 1024
_EXTENSION = re.compile(r"\.[^./\\\x00]+")

RequestKind = Literal["tool", "llm", "fs", "http"]

# -- step codes (all DENIED: they end a step in the AUTHORIZE phase) -------------------------

TOOL_NOT_ALLOWED = register_code(
    "POLICY_TOOL_NOT_ALLOWED",
    Outcome.DENIED,
    "the tool is not listed in the policy (deny by default)",
)
TOOL_DENIED = register_code(
    "POLICY_TOOL_DENIED", Outcome.DENIED, "the policy denies the tool explicitly (allow = false)"
)
ARGUMENT_REJECTED = register_code(
    "POLICY_ARGUMENT_REJECTED",
    Outcome.DENIED,
    "an argument violates the tool's constraints (details: argument, constraint)",
)
LLM_NOT_ALLOWED = register_code(
    "POLICY_LLM_NOT_ALLOWED", Outcome.DENIED, "the policy does not allow LLM calls"
)
MODEL_NOT_ALLOWED = register_code(
    "POLICY_MODEL_NOT_ALLOWED", Outcome.DENIED, "the model is not in the policy's llm.models"
)
LLM_MAX_TOKENS = register_code(
    "POLICY_LLM_MAX_TOKENS",
    Outcome.DENIED,
    "the call requests more tokens than the policy's llm.max_tokens per call",
)
BUDGET_EXCEEDED = register_code(
    "POLICY_BUDGET_EXCEEDED",
    Outcome.DENIED,
    "a run budget is spent (details: budget, limit, used, requested)",
)
FS_OPERATION_NOT_ALLOWED = register_code(
    "POLICY_FS_OPERATION_NOT_ALLOWED",
    Outcome.DENIED,
    "the filesystem operation is not in the policy's fs.operations",
)
HTTP_NOT_ALLOWED = register_code(
    "POLICY_HTTP_NOT_ALLOWED",
    Outcome.DENIED,
    "no http.allow rule matches the request's host, method and path (deny by default)",
)

# -- load errors ----------------------------------------------------------------------------


class PolicyFileError(PolicyError):
    """The policy file cannot be read or has an unsupported extension."""

    code: ClassVar[str] = "POLICY_FILE"


class PolicySyntaxError(PolicyError):
    """The text is not valid TOML / YAML (including duplicate keys and YAML aliases)."""

    code: ClassVar[str] = "POLICY_SYNTAX"


class PolicyVersionError(PolicyError):
    """``version`` is missing, not an integer, or not a supported schema version."""

    code: ClassVar[str] = "POLICY_VERSION"


class PolicyUnknownKeyError(PolicyError):
    """A key the schema does not define (including an unknown constraint)."""

    code: ClassVar[str] = "POLICY_UNKNOWN_KEY"


class PolicyMissingKeyError(PolicyError):
    """A required key is absent."""

    code: ClassVar[str] = "POLICY_MISSING_KEY"


class PolicyTypeError(PolicyError):
    """A value has the wrong type."""

    code: ClassVar[str] = "POLICY_TYPE"


class PolicyValueError(PolicyError):
    """A value has the right type but is not acceptable (bad regex, negative budget, ...)."""

    code: ClassVar[str] = "POLICY_VALUE"


class PolicyDuplicateError(PolicyError):
    """Two tool entries share a name, or a list repeats an item."""

    code: ClassVar[str] = "POLICY_DUPLICATE"


class PolicyRequestError(RuntimeFault):
    """The gateway passed a malformed authorization request or usage (a programming error)."""

    code: ClassVar[str] = "POLICY_REQUEST_INVALID"


# -- reading helpers ------------------------------------------------------------------------


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _where(path: str) -> str:
    return path if path else "the document root"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def _type_error(path: str, expected: str, value: object) -> PolicyTypeError:
    return PolicyTypeError(
        f"{_where(path)} must be {expected}, not {_type_name(value)}",
        details={"path": path, "expected": expected, "found": _type_name(value)},
    )


def _value_error(path: str, why: str) -> PolicyValueError:
    return PolicyValueError(f"{_where(path)}: {why}", details={"path": path})


def _table(value: object, path: str, allowed: tuple[str, ...] | None) -> Mapping[str, Any]:
    """A mapping with string keys; with ``allowed``, only those keys."""
    if not isinstance(value, Mapping):
        raise _type_error(path, "a table", value)
    for key in value:
        if not isinstance(key, str):
            raise PolicyTypeError(
                f"{_where(path)} has a key {key!r} of type {_type_name(key)}; keys are strings",
                details={"path": path, "found": _type_name(key)},
            )
        _text(key, _join(path, "<key>"))
        if allowed is not None and key not in allowed:
            raise PolicyUnknownKeyError(
                f"unknown key {_join(path, key)} (allowed here: {', '.join(allowed)})",
                details={"path": _join(path, key), "allowed": list(allowed)},
            )
    return value


def _text(value: object, path: str, *, non_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _type_error(path, "a string", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _value_error(path, "contains a lone surrogate (not valid Unicode text)") from None
    if non_empty and value == "":
        raise _value_error(path, "must not be empty")
    return value


def _bool(table: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    if key not in table or table[key] is None:
        return default
    value = table[key]
    if not isinstance(value, bool):
        raise _type_error(_join(path, key), "a boolean", value)
    return value


def _count(value: object, path: str) -> int:
    """A non-negative integer that canonical JSON can carry exactly."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(path, "an integer", value)
    if value < 0:
        raise _value_error(path, f"must not be negative (got {value})")
    if value > MAX_SAFE_INTEGER:
        raise _value_error(path, f"must be at most {MAX_SAFE_INTEGER} (2**53-1)")
    return value


def _optional_count(table: Mapping[str, Any], key: str, path: str, default: int | None) -> int | None:
    if key not in table or table[key] is None:
        return default
    return _count(table[key], _join(path, key))


def _array(value: object, path: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise _type_error(path, "an array", value)
    return list(value)


def _string_set(value: object, path: str, *, choices: tuple[str, ...] | None = None) -> list[str]:
    """An array of distinct strings, returned sorted (the order carries no meaning)."""
    items = _array(value, path)
    seen: set[str] = set()
    for index, item in enumerate(items):
        where = _join(path, index)
        text = _text(item, where)
        if choices is not None and text not in choices:
            raise _value_error(where, f"{text!r} is not one of {', '.join(choices)}")
        if text in seen:
            raise PolicyDuplicateError(
                f"{where} repeats {text!r}", details={"path": where, "item": text}
            )
        seen.add(text)
    return sorted(seen)


def _number(value: object, path: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(path, "a number", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _value_error(path, "must be a finite number")
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        raise _value_error(path, f"must be within +/-{MAX_SAFE_INTEGER} (2**53-1)")
    _canonical(value, path)  # e.g. 1e17 would be written as an integer beyond 2**53-1
    return value


def _json_value(value: object, path: str, depth: int = 0) -> Any:
    """A plain JSON value (tuples become lists, mappings dicts), or a load error."""
    if depth > _MAX_NESTING:
        raise _value_error(path, f"is nested deeper than {_MAX_NESTING} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _number(value, path)
    if isinstance(value, str):
        return _text(value, path)
    if isinstance(value, (list, tuple)):
        return [_json_value(item, _join(path, i), depth + 1) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        table = _table(value, path, None)
        return {key: _json_value(item, _join(path, key), depth + 1) for key, item in table.items()}
    raise _type_error(path, "a JSON value", value)


# -- normalization --------------------------------------------------------------------------

_TOP_KEYS: Final = (
    "version",
    "approval_for_irreversible",
    "tools",
    "llm",
    "budgets",
    "fs",
    "http",
    "approvals",
    "daily_budgets",
)
_TOOL_KEYS: Final = ("name", "allow", "approval", "strict_args", "args", "approval_ttl_ms")
_APPROVALS_KEYS: Final = ("ttl_ms",)
#: The scopes of the daily budgets: per agent, per tenant (a key the caller gives a run).
DAILY_SCOPES: Final = ("agent", "tenant")
#: Daily budget names, in the order they are checked.
DAILY_BUDGETS: Final = ("runs", "llm_calls", "tokens", "cost_micro_usd", "effects")
_LLM_KEYS: Final = ("allow", "models", "max_tokens", "prices")
_PRICE_KEYS: Final = ("input", "output")
_HTTP_KEYS: Final = ("allow",)
_HTTP_RULE_KEYS: Final = ("host", "methods", "paths", "class")
_HTTP_METHODS: Final = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
_FS_KEYS: Final = ("operations", "max_file_bytes", "extensions", "approval")


def _normalize(raw: object) -> dict[str, Any]:
    top = _table(raw, "", None)
    if "version" not in top:
        raise PolicyVersionError(
            "the policy has no 'version' key (this runtime reads version 1)",
            details={"path": "version", "supported": list(SUPPORTED_VERSIONS)},
        )
    version = top["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise PolicyVersionError(
            f"version must be an integer, not {_type_name(version)}",
            details={"path": "version", "supported": list(SUPPORTED_VERSIONS)},
        )
    if version not in SUPPORTED_VERSIONS:
        raise PolicyVersionError(
            f"policy schema version {version} is not supported (supported: 1)",
            details={
                "path": "version",
                "found": version if abs(version) <= MAX_SAFE_INTEGER else str(version),
                "supported": list(SUPPORTED_VERSIONS),
            },
        )
    _table(top, "", _TOP_KEYS)
    document = {
        "version": version,
        "approval_for_irreversible": _bool(top, "approval_for_irreversible", "", False),
        "tools": _normalize_tools(top.get("tools"), "tools"),
        "llm": _normalize_llm(top.get("llm"), "llm"),
        "budgets": _normalize_budgets(top.get("budgets"), "budgets"),
        "fs": _normalize_fs(top.get("fs"), "fs"),
    }
    # Written only when present, so that the hash of every policy without it is unchanged.
    if top.get("http") is not None:
        document["http"] = _normalize_http(top["http"], "http")
    if top.get("approvals") is not None:
        approvals = _table(top["approvals"], "approvals", _APPROVALS_KEYS)
        document["approvals"] = {"ttl_ms": _optional_count(approvals, "ttl_ms", "approvals", None)}
    if top.get("daily_budgets") is not None:
        document["daily_budgets"] = _normalize_daily(top["daily_budgets"], "daily_budgets")
    return document


def _normalize_daily(value: object, path: str) -> dict[str, Any]:
    """``daily_budgets.agent`` and ``daily_budgets.tenant``: each budget written out (null:
    unlimited), both scopes always present."""
    table = _table(value, path, DAILY_SCOPES)
    document: dict[str, Any] = {}
    for scope in DAILY_SCOPES:
        where = _join(path, scope)
        limits = _table(table.get(scope) if table.get(scope) is not None else {}, where, DAILY_BUDGETS)
        document[scope] = {name: _optional_count(limits, name, where, None) for name in DAILY_BUDGETS}
    return document


def _normalize_http(value: object, path: str) -> dict[str, Any]:
    table = _table(value, path, _HTTP_KEYS)
    rules: list[dict[str, Any]] = []
    where = _join(path, "allow")
    for index, raw in enumerate(_array(table.get("allow", []), where)):
        at = _join(where, index)
        rule = _table(raw, at, _HTTP_RULE_KEYS)
        if "host" not in rule:
            raise PolicyMissingKeyError(f"{_join(at, 'host')} is missing (name the host)", details={"path": _join(at, "host")})
        host = _text(rule["host"], _join(at, "host"), non_empty=True).lower()
        methods = [m.upper() for m in _string_set(rule.get("methods", ["GET"]), _join(at, "methods"))]
        for position, method in enumerate(methods):
            if method not in _HTTP_METHODS:
                raise _value_error(
                    _join(_join(at, "methods"), position),
                    f"{method!r} is not one of {', '.join(_HTTP_METHODS)}",
                )
        paths = _string_set(rule.get("paths", ["/**"]), _join(at, "paths"))
        for position, pattern in enumerate(paths):
            if not pattern.startswith("/"):
                raise _value_error(_join(_join(at, "paths"), position), "a path pattern starts with '/'")
        side_effect = rule.get("class")
        if side_effect is not None:
            side_effect = _text(side_effect, _join(at, "class"))
            if side_effect not in _SIDE_EFFECTS:
                raise _value_error(_join(at, "class"), f"{side_effect!r} is not one of {', '.join(_SIDE_EFFECTS)}")
        rules.append({"host": host, "methods": sorted(set(methods)), "paths": paths, "class": side_effect})
    rules.sort(key=lambda rule: dumps(rule))
    return {"allow": rules}


def _path_pattern(pattern: str) -> re.Pattern[str]:
    """``**`` matches anything (``/`` included), ``*`` anything within one segment."""
    parts = re.split(r"(\*\*|\*)", pattern)
    text = "".join(".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part) for part in parts)
    return re.compile(text)


def _normalize_tools(value: object, path: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    entries = _array(value, path)
    by_name: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(entries):
        where = _join(path, index)
        table = _table(entry, where, _TOOL_KEYS)
        if "name" not in table:
            raise PolicyMissingKeyError(
                f"{_join(where, 'name')} is missing: every tool entry needs a name",
                details={"path": _join(where, "name")},
            )
        name = _text(table["name"], _join(where, "name"), non_empty=True)
        if name.startswith("fs."):
            raise _value_error(
                _join(where, "name"),
                f"{name!r}: names starting with 'fs.' are the filesystem toolset, "
                "configured in [fs]",
            )
        if name in by_name:
            raise PolicyDuplicateError(
                f"{_join(where, 'name')}: tool {name!r} is listed twice",
                details={"path": _join(where, "name"), "tool": name},
            )
        allow = _bool(table, "allow", where, True)
        approval = _bool(table, "approval", where, False)
        strict_args = _bool(table, "strict_args", where, False)
        args_raw = table.get("args")
        args: dict[str, dict[str, Any]] = {}
        if args_raw is not None:
            args_table = _table(args_raw, _join(where, "args"), None)
            for arg_name, constraint in args_table.items():
                arg_where = _join(_join(where, "args"), arg_name)
                _text(arg_name, arg_where, non_empty=True)
                args[arg_name] = _normalize_constraint(constraint, arg_where)
        approval_ttl = _optional_count(table, "approval_ttl_ms", where, None)
        if not allow and (approval or strict_args or args or approval_ttl is not None):
            raise _value_error(
                where,
                f"tool {name!r} has allow = false; a denied tool takes no approval, "
                "approval_ttl_ms, strict_args or args",
            )
        by_name[name] = {
            "name": name,
            "allow": allow,
            "approval": approval,
            "strict_args": strict_args,
            "args": args,
        }
        if approval_ttl is not None:
            # Written only when set, so that the hash of every policy without it is unchanged.
            by_name[name]["approval_ttl_ms"] = approval_ttl
    return [by_name[name] for name in sorted(by_name)]


def _normalize_constraint(value: object, path: str) -> dict[str, Any]:
    table = _table(value, path, CONSTRAINT_KEYS)
    out: dict[str, Any] = {"required": _bool(table, "required", path, False)}
    for key in CONSTRAINT_KEYS[1:]:
        if key not in table:
            continue
        where = _join(path, key)
        raw = table[key]
        if key == "type":
            text = _text(raw, where)
            if text not in _TYPES:
                raise _value_error(where, f"{text!r} is not one of {', '.join(_TYPES)}")
            out[key] = text
        elif key == "const":
            out[key] = _json_value(raw, where)
        elif key == "enum":
            items = _array(raw, where)
            if not items:
                raise _value_error(where, "must list at least one value")
            keyed: dict[bytes, Any] = {}
            for index, item in enumerate(items):
                item_where = _join(where, index)
                normal = _json_value(item, item_where)
                canonical = _canonical(normal, item_where)
                if canonical in keyed:
                    raise PolicyDuplicateError(
                        f"{item_where} repeats a value", details={"path": item_where}
                    )
                keyed[canonical] = normal
            out[key] = [keyed[canonical] for canonical in sorted(keyed)]
        elif key in ("min_length", "max_length"):
            out[key] = _count(raw, where)
        elif key == "pattern":
            text = _text(raw, where)
            try:
                re.compile(text)
            except (re.error, OverflowError, RecursionError, ValueError) as exc:
                raise _value_error(where, f"not a valid regular expression ({exc})") from None
            out[key] = text
        elif key == "prefix":
            out[key] = _text(raw, where)
        else:  # min, max
            out[key] = _number(raw, where)
    if "min" in out and "max" in out and out["min"] > out["max"]:
        raise _value_error(path, "min is greater than max")
    if "min_length" in out and "max_length" in out and out["min_length"] > out["max_length"]:
        raise _value_error(path, "min_length is greater than max_length")
    return out


def _canonical(value: Any, path: str) -> bytes:
    try:
        return dumps(value)
    except CanonicalError as exc:
        raise _value_error(path, f"has no canonical JSON form ({exc.message})") from None


def _normalize_llm(value: object, path: str) -> dict[str, Any]:
    table = _table(value if value is not None else {}, path, _LLM_KEYS)
    allow = _bool(table, "allow", path, False)
    models: list[str] = []
    if table.get("models") is not None:
        models = _string_set(table["models"], _join(path, "models"))
        for index, model in enumerate(models):
            if model == "":
                raise _value_error(_join(_join(path, "models"), index), "must not be empty")
    if allow and not models:
        raise PolicyMissingKeyError(
            f"{path}.allow is true but {path}.models lists no model (name each allowed model)",
            details={"path": _join(path, "models")},
        )
    max_tokens = _optional_count(table, "max_tokens", path, None)
    document: dict[str, Any] = {"allow": allow, "models": models, "max_tokens": max_tokens}
    if table.get("prices") is not None:
        where = _join(path, "prices")
        prices: dict[str, dict[str, int]] = {}
        for model, raw in _table(table["prices"], where, None).items():
            at = _join(where, model)
            price = _table(raw, at, _PRICE_KEYS)
            for key in _PRICE_KEYS:
                if key not in price:
                    raise PolicyMissingKeyError(f"{_join(at, key)} is missing (give both input and output)", details={"path": _join(at, key)})
            prices[model] = {key: _count(price[key], _join(at, key)) for key in _PRICE_KEYS}
        # Written only when present, so that the hash of every policy without it is unchanged.
        document["prices"] = prices
    return document


def _normalize_budgets(value: object, path: str) -> dict[str, int | None]:
    table = _table(value if value is not None else {}, path, BUDGETS)
    return {name: _optional_count(table, name, path, None) for name in BUDGETS}


def _normalize_fs(value: object, path: str) -> dict[str, Any]:
    table = _table(value if value is not None else {}, path, _FS_KEYS)
    operations: list[str] = []
    if table.get("operations") is not None:
        operations = _string_set(table["operations"], _join(path, "operations"), choices=FS_OPERATIONS)
    approval: list[str] = []
    if table.get("approval") is not None:
        approval = _string_set(table["approval"], _join(path, "approval"), choices=FS_OPERATIONS)
    extensions: list[str] | None = None
    if table.get("extensions") is not None:
        where = _join(path, "extensions")
        extensions = _string_set(table["extensions"], where)
        for index, extension in enumerate(extensions):
            if extension != "" and not _EXTENSION.fullmatch(extension):
                raise _value_error(
                    _join(where, index),
                    f"{extension!r} is not an extension: write '.txt' (one dot, then no "
                    "'.', '/', '\\\\' or NUL), or '' for files without one",
                )
    max_file_bytes = _optional_count(table, "max_file_bytes", path, DEFAULT_MAX_FILE_BYTES)
    return {
        "operations": operations,
        "max_file_bytes": max_file_bytes,
        "extensions": extensions,
        "approval": approval,
    }


# -- YAML -----------------------------------------------------------------------------------


class _StrictYamlLoader(yaml.SafeLoader):
    """Safe YAML that refuses duplicate keys and aliases (no billion laughs, no cycles)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not allowed in a policy", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key; construct_mapping reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads ``1e3`` (an exponent without a dot) as a string; JSON and YAML 1.2 read a
# number. Policies follow JSON here.
_StrictYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _join_surrogate_pairs(value: object) -> object:
    """PyYAML reads the escape pair ``"\\ud83d\\ude00"`` as two lone surrogates; as in JSON,
    a high surrogate followed by a low one is one character. Lone surrogates stay (and are
    rejected later)."""
    if isinstance(value, str):
        if not any("\ud800" <= char <= "\udfff" for char in value):
            return value
        try:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            return value
    if isinstance(value, list):
        return [_join_surrogate_pairs(item) for item in value]
    if isinstance(value, dict):
        joined = {_join_surrogate_pairs(k): _join_surrogate_pairs(v) for k, v in value.items()}
        if len(joined) != len(value):
            raise PolicySyntaxError(
                "not valid YAML: two keys of a mapping are the same text", details={"format": "yaml"}
            )
        return joined
    return value


def _parse_yaml(text: str) -> object:
    try:
        parsed = yaml.load(text, Loader=_StrictYamlLoader)  # a SafeLoader subclass
        return _join_surrogate_pairs(parsed)
    except yaml.YAMLError as exc:
        raise PolicySyntaxError(f"not valid YAML: {exc}", details={"format": "yaml"}) from None
    except RecursionError:
        raise PolicySyntaxError(
            "not acceptable YAML: nested too deeply", details={"format": "yaml"}
        ) from None
    except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
        # PyYAML's constructors can raise these for scalars such as impossible timestamps.
        raise PolicySyntaxError(
            f"not acceptable YAML: {type(exc).__name__}: {exc}", details={"format": "yaml"}
        ) from None


def _parse_toml(text: str) -> object:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicySyntaxError(f"not valid TOML: {exc}", details={"format": "toml"}) from None
    except RecursionError:
        raise PolicySyntaxError(
            "not acceptable TOML: nested too deeply", details={"format": "toml"}
        ) from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise PolicySyntaxError(
            f"not acceptable TOML: {type(exc).__name__}: {exc}", details={"format": "toml"}
        ) from None


_FORMATS: Final = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}

# -- requests, usage, decisions -------------------------------------------------------------


@dataclass(frozen=True)
class AuthorizationRequest:
    """What the gateway asks in the AUTHORIZE phase.

    ``kind`` is ``"tool"``, ``"llm"`` or ``"fs"`` (``name`` then is ``fs.read`` ...);
    ``args`` the JSON arguments (canonicalized on construction); ``side_effect`` the declared
    class of the effect. ``model`` and ``max_tokens`` are required for ``llm`` and must be
    ``None`` otherwise. There is deliberately no place for a proposal's reasoning text.
    """

    kind: RequestKind
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    side_effect: SideEffect = "read_only"
    model: str | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise PolicyRequestError(f"request kind must be one of {', '.join(_KINDS)}")
        if not isinstance(self.name, str) or not self.name:
            raise PolicyRequestError("request name must be a non-empty string")
        if self.side_effect not in _SIDE_EFFECTS:
            raise PolicyRequestError(f"side_effect must be one of {', '.join(_SIDE_EFFECTS)}")
        if not isinstance(self.args, Mapping):
            raise PolicyRequestError("request args must be a JSON object")
        try:
            # dumps() proves the arguments canonical; its own bytes need no strict parser.
            args = orjson.loads(dumps(dict(self.args)))
        except CanonicalError as exc:
            raise PolicyRequestError(f"request args are not canonical JSON: {exc.message}") from None
        object.__setattr__(self, "args", args)
        if self.kind == "llm":
            if not isinstance(self.model, str) or not self.model:
                raise PolicyRequestError("an llm request needs a model name")
            if (
                isinstance(self.max_tokens, bool)
                or not isinstance(self.max_tokens, int)
                or self.max_tokens < 0
            ):
                raise PolicyRequestError("an llm request needs max_tokens, a non-negative int")
        elif self.model is not None or self.max_tokens is not None:
            raise PolicyRequestError("model and max_tokens belong to llm requests only")


@dataclass(frozen=True)
class Usage:
    """The run's counters so far, as recorded in the journal (elapsed from the journaled clock)."""

    llm_calls: int = 0
    tokens: int = 0
    cost_micro_usd: int = 0
    effects: int = 0
    elapsed_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("llm_calls", "tokens", "cost_micro_usd", "effects", "elapsed_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PolicyRequestError(f"usage.{name} must be a non-negative int")

    def used(self, budget: str) -> int:
        """The counter a budget is checked against."""
        counter = "elapsed_ms" if budget == "wall_time_ms" else budget
        value: int = getattr(self, counter)
        return value


@dataclass(frozen=True)
class Decision:
    """The outcome of AUTHORIZE. When denied, ``code`` is a registered DENIED step code."""

    allowed: bool
    requires_approval: bool
    code: str | None
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def step_code(self) -> StepCode | None:
        return lookup_code(self.code) if self.code is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the journal."""
        return {
            "allowed": self.allowed,
            "requires_approval": self.requires_approval,
            "code": self.code,
            "reason": self.reason,
            "details": dict(self.details),
        }

    def failure(self) -> StepFailure:
        """The ``StepFailure`` that ends a denied step (raise it in the AUTHORIZE phase)."""
        if self.allowed or self.code is None:
            raise PolicyRequestError("an allowed decision has no failure")
        return StepFailure(lookup_code(self.code), self.reason, **dict(self.details))


def _deny(step_code: StepCode, reason: str, **details: Any) -> Decision:
    return Decision(False, False, step_code.code, reason, details)


# -- argument constraints -------------------------------------------------------------------


def _json_type_matches(kind: str, value: Any) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return isinstance(value, (int, float))  # number


def _violation(
    constraint: Mapping[str, Any], value: Any, patterns: Mapping[str, re.Pattern[str]]
) -> str | None:
    """The first constraint ``value`` violates (in CONSTRAINT_KEYS order), or None."""
    for key in CONSTRAINT_KEYS[1:]:
        if key not in constraint:
            continue
        bound = constraint[key]
        if key == "type":
            ok = _json_type_matches(bound, value)
        elif key == "const":
            ok = dumps(value) == dumps(bound)
        elif key == "enum":
            ok = dumps(value) in {dumps(item) for item in bound}
        elif key == "min_length":
            ok = isinstance(value, (str, list)) and len(value) >= bound
        elif key == "max_length":
            ok = isinstance(value, (str, list)) and len(value) <= bound
        elif key == "pattern":
            ok = isinstance(value, str) and patterns[bound].fullmatch(value) is not None
        elif key == "prefix":
            ok = isinstance(value, str) and value.startswith(bound)
        elif key == "min":
            ok = _json_type_matches("number", value) and value >= bound
        else:  # max
            ok = _json_type_matches("number", value) and value <= bound
        if not ok:
            return key
    return None


# -- the policy -----------------------------------------------------------------------------


class Policy:
    """A loaded, validated, immutable policy."""

    def __init__(self, mapping: object) -> None:
        """Validate and normalize a parsed document; same as :meth:`from_mapping`."""
        document = _normalize(mapping)
        self._canonical = _canonical(document, "")
        self._hash = canonical_hash(document)
        self._doc: dict[str, Any] = loads(self._canonical)
        self._tools: dict[str, dict[str, Any]] = {t["name"]: t for t in self._doc["tools"]}
        self._patterns: dict[str, re.Pattern[str]] = {}
        for tool in self._doc["tools"]:
            for constraint in tool["args"].values():
                if "pattern" in constraint:
                    text = constraint["pattern"]
                    self._patterns[text] = re.compile(text)
        # Without budgets, the usage never changes a decision (see static_decision).
        self._unbudgeted = all(limit is None for limit in self._doc["budgets"].values())
        self._static: dict[tuple[str, str, str, str | None, int | None], Decision] = {}
        self._http_rules: list[tuple[dict[str, Any], list[re.Pattern[str]]]] = [
            (rule, [_path_pattern(pattern) for pattern in rule["paths"]])
            for rule in self._doc.get("http", {}).get("allow", [])
        ]
        # The rule (its index in _http_rules, or -1 for none) each request was matched to: a
        # captured request is matched once, when its door asks for its class, and AUTHORIZE
        # finds the same match here.
        self._http_matches: dict[tuple[str, str, str], int] = {}

    # -- loading --

    @classmethod
    def from_mapping(cls, mapping: object) -> Policy:
        """Validate and normalize a parsed document (a dict as TOML or YAML would give)."""
        return cls(mapping)

    @classmethod
    def from_toml(cls, text: str) -> Policy:
        return cls.from_mapping(_parse_toml(text))

    @classmethod
    def from_yaml(cls, text: str) -> Policy:
        return cls.from_mapping(_parse_yaml(text))

    @classmethod
    def load(cls, path: Path | str) -> Policy:
        """Load a ``.toml``, ``.yaml`` or ``.yml`` file (the extension chooses the format)."""
        file = Path(path)
        fmt = _FORMATS.get(file.suffix.lower())
        if fmt is None:
            raise PolicyFileError(
                f"policy file {str(file)!r}: unsupported extension {file.suffix!r} "
                "(use .toml, .yaml or .yml)",
                details={"file": str(file)},
            )
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise PolicyFileError(
                f"policy file {str(file)!r} cannot be read: {exc.strerror or exc}",
                details={"file": str(file)},
            ) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PolicySyntaxError(
                f"policy file {str(file)!r} is not UTF-8 (byte {exc.start})",
                details={"file": str(file), "format": fmt},
            ) from None
        return cls.from_toml(text) if fmt == "toml" else cls.from_yaml(text)

    # -- identity --

    @property
    def document(self) -> dict[str, Any]:
        """The normalized document (a fresh copy), as stored in the journal."""
        result: dict[str, Any] = loads(self._canonical)
        return result

    @property
    def canonical_bytes(self) -> bytes:
        """RFC 8785 canonical JSON of :attr:`document`."""
        return self._canonical

    @property
    def hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :attr:`document`."""
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and other._canonical == self._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __repr__(self) -> str:
        return f"Policy(hash={self._hash[:16]}...)"

    # -- derived settings --

    def budget(self, name: str) -> int | None:
        """The limit of one budget (``None`` when unlimited), without copying the document."""
        if name not in BUDGETS:
            raise PolicyRequestError(f"unknown budget {name!r}; budgets are {', '.join(BUDGETS)}")
        limit: int | None = self._doc["budgets"][name]
        return limit

    def approval_ttl_ms(self, name: str) -> int | None:
        """How long (ms of the journaled clock) an approval of a step of tool ``name`` may
        take to arrive: the tool's ``approval_ttl_ms``, else ``approvals.ttl_ms``; None: no
        expiry."""
        tool = self._tools.get(name)
        if tool is not None and tool.get("approval_ttl_ms") is not None:
            ttl: int = tool["approval_ttl_ms"]
            return ttl
        approvals = self._doc.get("approvals")
        return approvals.get("ttl_ms") if isinstance(approvals, dict) else None

    def daily_budgets(self, scope: str) -> dict[str, int] | None:
        """The daily budgets set for ``scope`` (``agent`` or ``tenant``), only the limited
        ones; None when the scope sets none."""
        if scope not in DAILY_SCOPES:
            raise PolicyRequestError(f"unknown daily budget scope {scope!r}; scopes are {', '.join(DAILY_SCOPES)}")
        daily = self._doc.get("daily_budgets")
        if not isinstance(daily, dict):
            return None
        limits = {name: limit for name, limit in daily[scope].items() if limit is not None}
        return limits or None

    @property
    def has_daily_budgets(self) -> bool:
        """Whether any daily (cross-run) budget is set."""
        return any(self.daily_budgets(scope) is not None for scope in DAILY_SCOPES)

    def sandbox_limits(self) -> SandboxLimits:
        """The limits the filesystem toolset enforces itself (size, extensions)."""
        fs = self._doc["fs"]
        extensions = fs["extensions"]
        return SandboxLimits(
            max_file_bytes=fs["max_file_bytes"],
            extensions=frozenset(extensions) if extensions is not None else None,
        )

    # -- the decision --

    def authorize(self, request: AuthorizationRequest, usage: Usage) -> Decision:
        """Decide a request: permission, then arguments, then budgets, then approval.

        Pure: the result depends only on ``request``, ``usage`` and this policy.
        """
        if not isinstance(request, AuthorizationRequest):
            raise PolicyRequestError("authorize needs an AuthorizationRequest")
        if not isinstance(usage, Usage):
            raise PolicyRequestError("authorize needs a Usage")
        if request.kind == "tool":
            denial, approval, because = self._tool(request)
        elif request.kind == "llm":
            denial, approval, because = self._llm(request)
        elif request.kind == "http":
            denial, approval, because = self._http(request)
        else:
            denial, approval, because = self._fs(request)
        if denial is not None:
            return denial
        budget = self._budgets(request, usage)
        if budget is not None:
            return budget
        if (
            not approval
            and self._doc["approval_for_irreversible"]
            and request.side_effect == "irreversible"
        ):
            approval, because = True, "approval_for_irreversible = true"
        if approval:
            return Decision(
                True,
                True,
                None,
                f"{request.kind} {request.name!r} is allowed and requires human approval "
                f"({because})",
                {},
            )
        return Decision(True, False, None, f"{request.kind} {request.name!r} is allowed", {})

    def static_decision(
        self,
        kind: str,
        name: str,
        side_effect: str = "read_only",
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Decision | None:
        """The decision :meth:`authorize` makes for any request with these fields, when this
        policy decides it without reading the arguments or the usage; None when either
        could matter (then build the request and call :meth:`authorize`).

        The usage is never read when no budget is set; the arguments are read only for a
        listed, allowed tool with argument constraints or ``strict_args``. Such decisions
        are computed once by :meth:`authorize` itself and memoized, which spares the
        runtime a request (whose arguments would be canonicalized again) per step.
        """
        if not self._unbudgeted or kind not in _KINDS or kind == "http":
            return None
        # Exact types only: True == 1 as a dict key, but not as a request field.
        if type(name) is not str or type(side_effect) is not str:
            return None
        if (model is not None and type(model) is not str) or (
            max_tokens is not None and type(max_tokens) is not int
        ):
            return None
        key = (kind, name, side_effect, model, max_tokens)
        decision = self._static.get(key)
        if decision is not None:
            return decision
        if kind == "tool":
            tool = self._tools.get(name)
            if tool is not None and tool["allow"] and (tool["args"] or tool["strict_args"]):
                return None
        request = AuthorizationRequest(
            kind,  # type: ignore[arg-type]
            name,
            {},
            side_effect,  # type: ignore[arg-type]
            model,
            max_tokens,
        )
        decision = self.authorize(request, Usage())
        if len(self._static) >= _STATIC_DECISIONS:
            self._static.clear()  # the keys come from agent code: keep the memo bounded
        self._static[key] = decision
        return decision

    def _tool(self, request: AuthorizationRequest) -> tuple[Decision | None, bool, str]:
        tool = self._tools.get(request.name)
        if tool is None:
            return (
                _deny(
                    TOOL_NOT_ALLOWED,
                    f"tool {request.name!r} is not listed in the policy (deny by default)",
                    tool=request.name,
                ),
                False,
                "",
            )
        if not tool["allow"]:
            return (
                _deny(TOOL_DENIED, f"the policy denies tool {request.name!r}", tool=request.name),
                False,
                "",
            )
        args = request.args
        constraints: dict[str, dict[str, Any]] = tool["args"]
        for arg_name in sorted(constraints):
            constraint = constraints[arg_name]
            if arg_name not in args:
                if constraint["required"]:
                    return (
                        self._rejected(request.name, arg_name, "required", "is missing"),
                        False,
                        "",
                    )
                continue
            failed = _violation(constraint, args[arg_name], self._patterns)
            if failed is not None:
                return (
                    self._rejected(
                        request.name,
                        arg_name,
                        failed,
                        f"violates {failed} = {dumps(constraint[failed]).decode('utf-8')}",
                    ),
                    False,
                    "",
                )
        if tool["strict_args"]:
            for arg_name in sorted(args):
                if arg_name not in constraints:
                    return (
                        self._rejected(
                            request.name,
                            arg_name,
                            "strict_args",
                            "is not listed and the tool has strict_args = true",
                        ),
                        False,
                        "",
                    )
        return None, bool(tool["approval"]), f"tool {request.name!r} has approval = true"

    @staticmethod
    def _rejected(tool: str, argument: str, constraint: str, why: str) -> Decision:
        return _deny(
            ARGUMENT_REJECTED,
            f"tool {tool!r}: argument {argument!r} {why}",
            tool=tool,
            argument=argument,
            constraint=constraint,
        )

    def _llm(self, request: AuthorizationRequest) -> tuple[Decision | None, bool, str]:
        llm = self._doc["llm"]
        if not llm["allow"]:
            return _deny(LLM_NOT_ALLOWED, "the policy does not allow LLM calls"), False, ""
        if request.model not in llm["models"]:
            return (
                _deny(
                    MODEL_NOT_ALLOWED,
                    f"model {request.model!r} is not in llm.models",
                    model=request.model,
                ),
                False,
                "",
            )
        cap = llm["max_tokens"]
        assert request.max_tokens is not None
        if cap is not None and request.max_tokens > cap:
            return (
                _deny(
                    LLM_MAX_TOKENS,
                    f"the call requests {request.max_tokens} tokens; llm.max_tokens is {cap}",
                    requested=request.max_tokens,
                    limit=cap,
                ),
                False,
                "",
            )
        return None, False, ""

    def http_rule(self, method: str, host: str, path: str) -> dict[str, Any] | None:
        """The first ``http.allow`` rule (in the document's order) that allows ``method`` on
        ``host`` (``name`` or ``name:port``) and ``path``; None when none does."""
        name = host.lower()
        method = method.upper()
        key = (method, name, path)
        found = self._http_matches.get(key)
        if found is None:
            found = self._match_http(method, name, path)
            if len(self._http_matches) >= _STATIC_DECISIONS:
                self._http_matches.clear()
            self._http_matches[key] = found
        return dict(self._http_rules[found][0]) if found >= 0 else None

    def _match_http(self, method: str, name: str, path: str) -> int:
        """The index of the first rule allowing ``method`` on host ``name`` and ``path``, or -1."""
        bare = name.rsplit(":", 1)[0] if ":" in name and not name.endswith("]") else name
        for index, (rule, patterns) in enumerate(self._http_rules):
            if rule["host"] not in (name, bare) or method not in rule["methods"]:
                continue
            if any(pattern.fullmatch(path) for pattern in patterns):
                return index
        return -1

    def llm_max_tokens(self) -> int | None:
        """``llm.max_tokens``, the cap on one call's output tokens (None: no cap)."""
        cap: int | None = self._doc["llm"]["max_tokens"]
        return cap

    def static_http_decision(self, method: str, host: str, path: str, side_effect: str) -> Decision | None:
        """The decision on a captured HTTP request when no budget is set (then it depends
        on nothing else: memoized like :meth:`static_decision`); None when one is."""
        if not self._unbudgeted:
            return None
        key = ("http", f"{method} {host}{path}", side_effect, None, None)
        decision = self._static.get(key)
        if decision is None:
            request = AuthorizationRequest(
                "http",
                f"{method} {host}{path}",
                {"method": method, "host": host, "path": path},
                side_effect,  # type: ignore[arg-type]
            )
            decision = self.authorize(request, Usage())
            if len(self._static) >= _STATIC_DECISIONS:
                self._static.clear()
            self._static[key] = decision
        return decision

    def price(self, model: str) -> dict[str, int] | None:
        """``llm.prices[model]`` (micro-USD per million input and output tokens), or None."""
        prices: dict[str, dict[str, int]] | None = self._doc["llm"].get("prices")
        if prices is None or model not in prices:
            return None
        return dict(prices[model])

    def _http(self, request: AuthorizationRequest) -> tuple[Decision | None, bool, str]:
        args = request.args
        method, host, path = (str(args.get(key, "")) for key in ("method", "host", "path"))
        if self.http_rule(method, host, path) is None:
            return (
                _deny(
                    HTTP_NOT_ALLOWED,
                    f"no http.allow rule allows {method} {host}{path} (deny by default)",
                    method=method,
                    host=host,
                    path=path,
                ),
                False,
                "",
            )
        return None, False, ""

    def _fs(self, request: AuthorizationRequest) -> tuple[Decision | None, bool, str]:
        fs = self._doc["fs"]
        operation = request.name[3:] if request.name.startswith("fs.") else ""
        if operation not in FS_OPERATIONS or operation not in fs["operations"]:
            return (
                _deny(
                    FS_OPERATION_NOT_ALLOWED,
                    f"filesystem operation {request.name!r} is not in fs.operations",
                    operation=request.name,
                ),
                False,
                "",
            )
        return (
            None,
            operation in fs["approval"],
            f"fs.approval lists {operation!r}",
        )

    def _budgets(self, request: AuthorizationRequest, usage: Usage) -> Decision | None:
        budgets = self._doc["budgets"]
        for name in BUDGETS:
            limit = budgets[name]
            if limit is None:
                continue
            if name in ("llm_calls", "tokens") and request.kind != "llm":
                continue
            used = usage.used(name)
            requested = 1
            if name == "tokens":
                assert request.max_tokens is not None
                requested = request.max_tokens
            elif name in ("cost_micro_usd", "wall_time_ms"):
                requested = 0
            exceeded = used + requested > limit if requested else used >= limit
            if exceeded:
                return _deny(
                    BUDGET_EXCEEDED,
                    f"budget {name} is spent: used {used}"
                    + (f" + requested {requested}" if requested else "")
                    + f" against a limit of {limit}",
                    budget=name,
                    limit=limit,
                    used=used,
                    requested=requested,
                )
        return None
