"""Workflow files on the command line: ``tracelock run --workflow FILE`` and
``tracelock replay RUN --workflow FILE``.

A workflow file is what :meth:`Workflow.load` reads (``name`` and ``steps``), plus an
optional ``tools`` member: the module or list of modules whose toolkits provide the tools
the steps call (imported with the working directory on ``sys.path``, as agents are).
See docs/workflows.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tracelock.cli.loading import import_agent, toolkits_of
from tracelock.errors import UsageError
from tracelock.runtime.doors.workflow import Workflow, WorkflowAgent, WorkflowError
from tracelock.runtime.records import load_run
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.backend import Store

__all__ = ["agent_for_run", "load_workflow_file", "require_workflow_file"]


def _document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read workflow {path}: {exc.strerror}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise WorkflowError(f"{path}: {exc}") from None


def load_workflow_file(path: Path) -> tuple[WorkflowAgent, list[Toolkit]]:
    """The agent that runs the workflow in ``path``, and the toolkits of its ``tools``."""
    document = _document(path)
    modules = document.get("tools", []) if isinstance(document, dict) else []
    if isinstance(modules, str):
        modules = [modules]
    if not isinstance(modules, list) or not all(isinstance(name, str) for name in modules):
        raise WorkflowError(f"{path}: 'tools' is a module name or a list of module names")
    workflow = Workflow.from_mapping(document)
    toolkits: list[Toolkit] = []
    for name in modules:
        toolkits.extend(kit for kit in toolkits_of(name) if all(kit is not known for known in toolkits))
    return WorkflowAgent(workflow), toolkits


def agent_for_run(agent: str | None, workflow: Path | None) -> tuple[Callable[..., Any], list[Toolkit]]:
    """What ``tracelock run`` runs: AGENT (module:function) or the workflow file, not both."""
    if (agent is None) == (workflow is None):
        raise UsageError("give AGENT (module:function) or --workflow FILE")
    if workflow is not None:
        return load_workflow_file(workflow)
    assert agent is not None
    return import_agent(agent)


def require_workflow_file(store: Store, run_id: str) -> None:
    """A workflow's definition is not in its run: replaying one needs the file again."""
    agent = load_run(store, run_id).agent
    if agent.startswith("workflow:"):
        raise UsageError(f"run {run_id} ran {agent}: replay it with --workflow FILE (the workflow's file)")
