"""Workflows: a declared DAG of steps, run in topological order with a deterministic tie-break.

A step is either a tool call (``tool`` + ``args``) or a Python function
``fn(ctx, inputs)`` where ``inputs`` maps each dependency's name to its output. String
arguments of the form ``${input}``, ``${input.key}``, ``${steps.NAME}`` or
``${steps.NAME.key}`` are replaced by those values. Among the steps whose dependencies are
done, the one with the smallest name runs first. Each step's input and output hashes are
recorded as a ``workflow.step`` entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tracelock.core.fingerprint import value_hash
from tracelock.errors import RuntimeFault
from tracelock.runtime.doors.context import RunContext
from tracelock.runtime.tools.toolkit import AgentSpec

__all__ = ["Workflow", "WorkflowStep", "WorkflowError", "WorkflowAgent"]

_REFERENCE = re.compile(r"\$\{(input|steps\.[A-Za-z0-9_.-]+?)(?:\.([A-Za-z0-9_-]+))?\}")
_STEP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class WorkflowError(RuntimeFault):
    """A workflow definition is invalid (unknown dependency, cycle, bad step)."""

    code = "WORKFLOW_INVALID"


@dataclass(frozen=True)
class WorkflowStep:
    name: str
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    fn: Callable[[RunContext, dict[str, Any]], Any] | None = None
    after: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _STEP_NAME.fullmatch(self.name):
            raise WorkflowError(f"step name {self.name!r} must be 1-64 of A-Z a-z 0-9 _ -")
        if (self.tool is None) == (self.fn is None):
            raise WorkflowError(f"step {self.name}: give exactly one of tool= or fn=")


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: tuple[WorkflowStep, ...]

    def __post_init__(self) -> None:
        names = [step.name for step in self.steps]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise WorkflowError(f"workflow {self.name}: duplicate step names {duplicates}")
        known = set(names)
        for step in self.steps:
            unknown = sorted(set(step.after) - known)
            if unknown:
                raise WorkflowError(f"step {step.name} depends on unknown steps {unknown}")
        self.order()

    def order(self) -> list[WorkflowStep]:
        """Kahn's algorithm; among ready steps the smallest name goes first."""
        by_name = {step.name: step for step in self.steps}
        remaining = {step.name: set(step.after) for step in self.steps}
        ordered: list[WorkflowStep] = []
        while remaining:
            ready = sorted(name for name, deps in remaining.items() if not deps)
            if not ready:
                raise WorkflowError(f"workflow {self.name} has a cycle among {sorted(remaining)}")
            chosen = ready[0]
            ordered.append(by_name[chosen])
            del remaining[chosen]
            for deps in remaining.values():
                deps.discard(chosen)
        return ordered

    @classmethod
    def from_mapping(cls, document: Mapping[str, Any]) -> Workflow:
        """From ``{"name": ..., "steps": [{"name", "tool", "args", "after"}, ...]}``."""
        if not isinstance(document, Mapping) or not isinstance(document.get("name"), str):
            raise WorkflowError("a workflow document needs a string 'name'")
        raw_steps = document.get("steps")
        if not isinstance(raw_steps, Sequence) or isinstance(raw_steps, str):
            raise WorkflowError("a workflow document needs a list 'steps'")
        steps = []
        for raw in raw_steps:
            if not isinstance(raw, Mapping) or set(raw) - {"name", "tool", "args", "after"}:
                raise WorkflowError(f"bad step {raw!r}: members are name, tool, args, after")
            steps.append(
                WorkflowStep(
                    name=str(raw.get("name")),
                    tool=raw.get("tool"),
                    args=dict(raw.get("args") or {}),
                    after=tuple(raw.get("after") or ()),
                )
            )
        return cls(document["name"], tuple(steps))

    @classmethod
    def load(cls, path: Path) -> Workflow:
        """From a JSON or YAML file."""
        text = path.read_text(encoding="utf-8")
        try:
            document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise WorkflowError(f"{path}: {exc}") from None
        return cls.from_mapping(document)


def _substitute(value: Any, input: Any, outputs: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        match = _REFERENCE.fullmatch(value)
        if match is None:
            return value
        source, key = match.group(1), match.group(2)
        if source == "input":
            base = input
        else:
            step = source.split(".", 1)[1]
            if step not in outputs:
                raise WorkflowError(f"{value}: step {step} has not run (add it to 'after')")
            base = outputs[step]
        if key is None:
            return base
        if not isinstance(base, Mapping) or key not in base:
            raise WorkflowError(f"{value}: no member {key!r}")
        return base[key]
    if isinstance(value, Mapping):
        return {k: _substitute(v, input, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, input, outputs) for v in value]
    return value


class WorkflowAgent:
    """The agent that runs a workflow."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.__tracelock_agent__ = AgentSpec(f"workflow:{workflow.name}", self)
        self.__module__ = __name__
        self.__qualname__ = f"WorkflowAgent[{workflow.name}]"

    def __call__(self, ctx: RunContext, input: Any) -> Any:
        outputs: dict[str, Any] = {}
        for index, step in enumerate(self.workflow.order()):
            inputs = {name: outputs[name] for name in step.after}
            if step.tool is not None:
                args = _substitute(dict(step.args), input, outputs)
                step_input: Any = args
                output = ctx.call(step.tool, **args)
            else:
                assert step.fn is not None
                step_input = inputs
                output = step.fn(ctx, inputs)
            outputs[step.name] = output
            ctx.mark(
                "workflow.step",
                {
                    "step": step.name,
                    "index": index,
                    "input_hash": value_hash(step_input),
                    "output_hash": value_hash(output),
                },
            )
        return outputs
