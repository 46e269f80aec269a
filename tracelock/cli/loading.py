"""Loading what the CLI is pointed at: agent modules, input files, runtimes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracelock.core.canonical import CanonicalError, loads
from tracelock.errors import UsageError
from tracelock.runtime.errors import AgentDefinitionError
from tracelock.runtime.runtime import Runtime, resolve_agent_path
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.open import open_store


def _working_directory_importable() -> None:
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def add_import_paths(paths: Sequence[Path]) -> None:
    """Put these directories first on ``sys.path``, in the order given, so that the agents'
    modules are imported from there before the working directory."""
    _working_directory_importable()
    for path in reversed(paths):
        resolved = str(path.resolve())
        if resolved in sys.path:
            sys.path.remove(resolved)
        sys.path.insert(0, resolved)


def import_agent(spec: str) -> tuple[Callable[..., Any], list[Toolkit]]:
    """Import ``module:function`` (the working directory is importable, as with
    ``python -m``) and collect the module's toolkits."""
    _working_directory_importable()
    agent = resolve_agent_path(spec)
    module = importlib.import_module(spec.partition(":")[0])
    toolkits = [value for value in vars(module).values() if isinstance(value, Toolkit)]
    return agent, toolkits


def toolkits_of(module_name: str) -> list[Toolkit]:
    """Import a module (the working directory is importable) and return its toolkits."""
    _working_directory_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import module {module_name!r}: {exc}") from None
    return [value for value in vars(module).values() if isinstance(value, Toolkit)]


def read_json_file(path: Path, what: str) -> Any:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        return loads(data)
    except CanonicalError as exc:
        raise UsageError(f"{what} {path} is not valid JSON: {exc.message}") from None


def build_runtime(
    store_path: Path,
    *,
    policy: Path | None,
    toolkits: list[Toolkit],
    sandbox: Path | None = None,
    create: bool = True,
    timeline: bool = False,
) -> Runtime:
    """``timeline``: describe each entry of a run on stderr as it is journaled."""
    store = open_store(store_path, create=create)
    try:
        if timeline:
            from tracelock.cli.timeline import TimelineStore

            return Runtime(TimelineStore(store), policy, toolkits=tuple(toolkits), sandbox=sandbox)
        return Runtime(store, policy, toolkits=tuple(toolkits), sandbox=sandbox)
    except BaseException:
        store.close()
        raise


def toolkits_for_runs(store_path: Path, run_ids: list[str] | None) -> list[Toolkit]:
    """Import the modules of the agents that recorded these runs (all runs when None), to
    find their toolkits: resuming needs their tools, replaying a routed run their agents."""
    from tracelock.runtime.records import load_run

    with open_store(store_path, create=False, read_only=True) as store:
        ids = run_ids if run_ids is not None else [info.run for info in store.runs()]
        entries = {load_run(store, run_id).entry for run_id in ids}
    toolkits: list[Toolkit] = []
    seen: set[str] = set()
    for entry in sorted(entries):
        module = entry.partition(":")[0]
        if module in seen or ":" not in entry:
            continue
        seen.add(module)
        try:
            _, found = import_agent(entry)
        except AgentDefinitionError:
            continue  # reported per run by whoever needs the agent
        toolkits.extend(kit for kit in found if all(kit is not known for known in toolkits))
    return toolkits
