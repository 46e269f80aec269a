"""The step request: what a door hands the pipeline, canonicalized once.

A request carries its arguments' canonical bytes (RFC 8785) and their SHA-256 from the
moment it is made; every later phase (the idempotency key, replay matching, the
fingerprint's ``H(args)``) uses them instead of serializing the arguments again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tracelock.core.canonical import CanonicalError, dumps
from tracelock.runtime.tools.tools import Tool

__all__ = ["StepRequest", "Task", "tool_request", "tool_kind", "idempotency_key"]

_sha256 = hashlib.sha256
_EMPTY_CANONICAL = b"{}"
_EMPTY_HASH = _sha256(_EMPTY_CANONICAL).hexdigest()


class StepRequest:
    """One step's request: ``kind`` (``tool``, ``fs``, ``llm``, ``proposal``, ``clock.now``,
    ``random``, ``uuid``, ``sleep``), ``name``, ``args`` and, for tools, the registered
    :class:`Tool` and its side-effect class.

    ``perform`` is set by a door that captures an exchange it does not run itself (an HTTP
    request, kind ``http``, or an LLM call made over HTTP, kind ``llm``): EXECUTE calls it,
    after the policy allowed the step and its intent is durable, and it returns the result
    document (or raises a ``StepFailure``). Replay never calls it.

    ``canonical`` and ``args_hash`` are the arguments' canonical bytes and their hash, or
    None when the arguments are not canonical JSON (``problem`` then says why; PARSE turns
    it into ``ARGS_NOT_JSON``). A proposal is not canonicalized: PARSE reads it and makes
    the tool request it proposes, which is.
    """

    __slots__ = ("args", "args_hash", "canonical", "kind", "name", "perform", "problem", "side_effect", "tool")

    def __init__(
        self,
        kind: str,
        name: str,
        args: Any,
        side_effect: str = "read_only",
        tool: Tool | None = None,
        perform: Callable[[], Any] | None = None,
    ) -> None:
        self.kind = kind
        self.perform = perform
        self.name = name
        self.args = args
        self.side_effect = side_effect
        self.tool = tool
        self.problem: str | None = None
        if kind == "proposal":
            self.canonical: bytes | None = None
            self.args_hash: str | None = None
        elif type(args) is dict and not args:
            self.canonical = _EMPTY_CANONICAL
            self.args_hash = _EMPTY_HASH
        else:
            try:
                canonical = dumps(args)
            except CanonicalError as exc:
                self.canonical = None
                self.args_hash = None
                self.problem = exc.message
            else:
                # A copy of its own size: the serializer's output sits in a block of at least
                # 4 KB, which a step waiting on the world (an awaited run) would hold meanwhile.
                self.canonical = bytes(memoryview(canonical)) if len(canonical) < 2048 else canonical
                self.args_hash = _sha256(canonical).hexdigest()


@dataclass(frozen=True)
class Task:
    """A deferred effect for :meth:`RunContext.gather`."""

    kind: str
    name: str
    args: Mapping[str, Any]


def tool_request(tools: Mapping[str, Tool], tool: str | Callable[..., Any], args: Any) -> StepRequest:
    """The request for a tool named ``tool`` (or the decorated function itself): kind ``fs``
    for the sandbox's ``fs.*`` operations, ``tool`` otherwise. An unknown name still makes a
    request; VALIDATE rejects it."""
    kind, name = tool_kind(tool)
    registered = tools.get(name)
    side_effect = registered.side_effect if registered is not None else "read_only"
    return StepRequest(kind, name, args, side_effect, registered)


def tool_kind(tool: str | Callable[..., Any]) -> tuple[str, str]:
    """The step kind and tool name of ``tool`` (a name, or the decorated function itself)."""
    name = tool if isinstance(tool, str) else getattr(tool, "__tracelock_tool__", None)
    if not isinstance(name, str):
        name = getattr(tool, "__name__", repr(tool))
    return ("fs" if name.startswith("fs.") else "tool"), name


def idempotency_key(run_id: str, step: int, canonical_args: bytes) -> str:
    """Stable across re-executions of the same step: ``"tlk-"`` and the first 40 hex digits
    of ``H({"args": args, "run": run_id, "step": step})``, whose canonical bytes are put
    together here from the request's (members in RFC 8785 order)."""
    material = b'{"args":' + canonical_args + b',"run":' + dumps(run_id) + b',"step":' + str(step).encode() + b"}"
    return "tlk-" + _sha256(material).hexdigest()[:40]
