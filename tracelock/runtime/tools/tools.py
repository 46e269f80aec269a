"""Tools: plain functions registered with an argument schema, a side-effect class, a timeout
and a retry policy.

The schema is JSON Schema (draft-07 subset, validated with ``fastjsonschema``); when not
given it is derived from the function's type hints. Validation is a pure function of the
arguments, so a bad argument always yields the same VALIDATION_ERROR.

A tool may also declare a schema for its result (its *output contract*, derived from the
return annotation when there is one that says something): a result that does not satisfy
it ends the step ``EXECUTION_ERROR [RESULT_CONTRACT_VIOLATION]`` and never reaches the agent.

A tool's *definition* (name, side-effect class, schemas, timeout, retry policy) is hashed
into ``definition_digest``; every run records the digests of the tools it could call, so a
changed schema or retry policy shows when a run is replayed.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import fastjsonschema

from tracelock.core.fingerprint import value_hash
from tracelock.errors import CanonicalError, RuntimeFault

__all__ = [
    "SideEffect",
    "SIDE_EFFECTS",
    "TimeoutMode",
    "RetryPolicy",
    "Tool",
    "ToolDefinitionError",
    "schema_from_signature",
    "result_schema_from_signature",
]

SideEffect = Literal["read_only", "idempotent", "irreversible"]
SIDE_EFFECTS: tuple[str, ...] = ("read_only", "idempotent", "irreversible")
#: Where a sync tool under a timeout runs (see ``tracelock.runtime.tools.invoke``).
TimeoutMode = Literal["auto", "inline", "thread"]
TIMEOUT_MODES: tuple[str, ...] = ("auto", "inline", "thread")


class ToolDefinitionError(RuntimeFault):
    """A tool was registered wrongly (bad name, side-effect class, schema or retry policy)."""

    code = "TOOL_DEFINITION_INVALID"


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a failing tool is tried, and the fixed delays between attempts.

    Delays are fixed (no jitter) so that a retried run is reproducible; they are slept
    through the runtime's injected sleeper. ``retry_on`` names the exception classes that
    are retried; anything else fails at once.
    """

    max_attempts: int = 1
    delays_ms: tuple[int, ...] = ()
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ToolDefinitionError("max_attempts must be at least 1")
        if any(delay < 0 for delay in self.delays_ms):
            raise ToolDefinitionError("retry delays must not be negative")

    def delay_before(self, attempt: int) -> int:
        """Milliseconds to wait before ``attempt`` (2, 3, ...); the last delay repeats."""
        if not self.delays_ms:
            return 0
        return self.delays_ms[min(attempt - 2, len(self.delays_ms) - 1)]


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass
class Tool:
    """A registered tool."""

    name: str
    func: Callable[..., Any]
    side_effect: SideEffect
    schema: dict[str, Any]
    timeout_s: float | None = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    description: str = ""
    wants_idempotency_key: bool = False
    is_async: bool = False
    #: JSON Schema the result must satisfy (the output contract), or None for none.
    result_schema: dict[str, Any] | None = None
    #: Where a sync tool under a timeout runs: see ``tracelock.runtime.tools.invoke``.
    timeout_mode: TimeoutMode = "auto"

    def __post_init__(self) -> None:
        if not self.name or not set(self.name) <= _NAME_CHARS:
            raise ToolDefinitionError(
                f"tool name {self.name!r} must be letters, digits, '_', '.', '-'"
            )
        if self.side_effect not in SIDE_EFFECTS:
            raise ToolDefinitionError(
                f"tool {self.name}: side_effect must be one of {', '.join(SIDE_EFFECTS)}"
            )
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ToolDefinitionError(f"tool {self.name}: timeout must be positive")
        if self.timeout_mode not in TIMEOUT_MODES:
            raise ToolDefinitionError(f"tool {self.name}: timeout_mode must be one of {', '.join(TIMEOUT_MODES)}")
        try:
            self._validate = fastjsonschema.compile(self.schema)
        except fastjsonschema.JsonSchemaDefinitionException as exc:
            raise ToolDefinitionError(f"tool {self.name}: invalid JSON Schema: {exc}") from None
        self._validate_result: Callable[[Any], Any] | None = None
        if self.result_schema is not None:
            try:
                self._validate_result = fastjsonschema.compile(self.result_schema)
            except fastjsonschema.JsonSchemaDefinitionException as exc:
                raise ToolDefinitionError(f"tool {self.name}: invalid result JSON Schema: {exc}") from None
        self.is_async = inspect.iscoroutinefunction(self.func)
        self._definition_digest: str | None = None

    @property
    def timeout_ms(self) -> int | None:
        return None if self.timeout_s is None else round(self.timeout_s * 1000)

    def validate(self, args: Mapping[str, Any]) -> str | None:
        """None when ``args`` satisfy the schema, else the first violation as text."""
        try:
            self._validate(args)
        except fastjsonschema.JsonSchemaValueException as exc:
            return str(exc.message)
        return None

    def validate_result(self, result: Any) -> str | None:
        """None when ``result`` satisfies the output contract (or there is none), else the
        first violation as text."""
        check = self._validate_result
        if check is None:
            return None
        try:
            check(result)
        except fastjsonschema.JsonSchemaValueException as exc:
            return str(exc.message)
        return None

    def definition(self) -> dict[str, Any]:
        """What the tool is, as far as a run can tell: name, side-effect class, argument and
        result schemas, timeout and retry policy (the retried exception classes by
        qualified name). The function's code is identified with its module
        (:mod:`tracelock.runtime.provenance.code`)."""
        retry = self.retry
        return {
            "name": self.name,
            "class": self.side_effect,
            "schema": self.schema,
            "result_schema": self.result_schema,
            "timeout_ms": self.timeout_ms,
            "retry": {
                "max_attempts": retry.max_attempts,
                "delays_ms": list(retry.delays_ms),
                "retry_on": [f"{kind.__module__}.{kind.__qualname__}" for kind in retry.retry_on],
            },
            "idempotency_key": self.wants_idempotency_key,
        }

    @property
    def definition_digest(self) -> str:
        """``H(definition())``, computed once."""
        digest = self._definition_digest
        if digest is None:
            try:
                digest = value_hash(self.definition())
            except CanonicalError:
                # A schema given as a Python value JSON cannot hold: identify it by its text.
                digest = value_hash({"name": self.name, "definition": repr(self.definition())})
            self._definition_digest = digest
        return digest


_JSON_TYPES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    dict: {"type": "object"},
    list: {"type": "array"},
    Any: {},
}


def _schema_for(annotation: Any, where: str) -> dict[str, Any]:
    if annotation in _JSON_TYPES:
        return dict(_JSON_TYPES[annotation])
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if origin is Literal:
        return {"enum": list(arguments)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema_for(argument, where) for argument in arguments]}
    if origin in (list, tuple, abc.Sequence):
        schema: dict[str, Any] = {"type": "array"}
        if arguments and origin is not tuple:
            schema["items"] = _schema_for(arguments[0], where)
        return schema
    if origin in (dict, abc.Mapping):
        schema = {"type": "object"}
        if len(arguments) == 2:
            schema["additionalProperties"] = _schema_for(arguments[1], where)
        return schema
    raise ToolDefinitionError(
        f"{where}: cannot derive a JSON Schema from the annotation {annotation!r}; "
        "pass schema= explicitly"
    )


def result_schema_from_signature(func: Callable[..., Any]) -> dict[str, Any] | None:
    """The output contract a return annotation states, or None when there is none to
    derive: no annotation, ``Any``, or a type that has no JSON Schema (a class of the
    application's: declare ``result_schema=`` to check such a result)."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:
        return None
    if "return" not in hints:
        return None
    annotation = hints["return"]
    try:
        schema = _schema_for(annotation, f"{getattr(func, '__qualname__', func)}(return)")
    except ToolDefinitionError:
        return None
    return schema or None


def schema_from_signature(func: Callable[..., Any], *, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """An object schema for ``func``'s keyword arguments, from its type hints.

    Parameters without a default are required; unknown arguments are rejected.
    """
    try:
        hints = typing.get_type_hints(func)
    except Exception as exc:
        raise ToolDefinitionError(f"{func.__qualname__}: cannot read type hints: {exc}") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in inspect.signature(func).parameters.items():
        if name in skip:
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{func.__qualname__}: *args/**kwargs cannot be described; pass schema="
            )
        annotation = hints.get(name, Any)
        properties[name] = _schema_for(annotation, f"{func.__qualname__}({name})")
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema
