"""Provenance (issue 25, items 1 and 2): each run's start entry records the engine and
environment, the agent's code identity and the tools' definitions, outside the
fingerprint; replay and diff report what changed since the recording."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import Ids, allow, record_of, runtime_at
from tracelock.core.fingerprint import value_hash
from tracelock.runtime.provenance.code import code_identity
from tracelock.runtime.provenance.identity import (
    current_engine,
    distributions_digest,
    engine_identity,
)
from tracelock.runtime.provenance.record import (
    NO_PROVENANCE,
    Provenance,
    describe_differences,
    differences,
    unchanged,
)
from tracelock.runtime.records import load_run
from tracelock.runtime.replay.compare import run_difference
from tracelock.runtime.tools.toolkit import Toolkit

HELPER = '''
def key_for(text):
    return text.upper()
'''
HELPER_CHANGED = '''
def key_for(text):
    return text.upper() + "!"  # changed since the recording
'''
AGENT = '''
import json

import orjson

from {helper} import key_for
from tracelock.runtime.tools.toolkit import Toolkit

kit = Toolkit()


@kit.tool(timeout=None)
def lookup(key: str) -> str:
    return key.lower()


def agent(ctx, task):
    return ctx.call("lookup", key=key_for(task["key"]))
'''


def engine(version: str) -> dict[str, str]:
    return engine_identity(
        tracelock=version, python="3.11.9", implementation="cpython", platform="linux-x86_64",
        distributions=distributions_digest([("tracelock", version), ("orjson", "3.10.0")]),
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """An agent module and a helper module it imports, in a directory of their own."""
    suffix = request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    helper, agent = f"prov_helper_{suffix}", f"prov_agent_{suffix}"
    source = tmp_path / "src"
    source.mkdir()
    (source / f"{helper}.py").write_text(HELPER)
    (source / f"{agent}.py").write_text(AGENT.format(helper=helper))
    monkeypatch.syspath_prepend(str(source))
    module = importlib.import_module(agent)
    yield {"dir": source, "helper": helper, "agent": agent, "module": module}
    sys.modules.pop(agent, None)
    sys.modules.pop(helper, None)


def test_the_start_entry_records_engine_code_and_tools(tmp_path: Path, project: dict[str, Any]) -> None:
    module = project["module"]
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,)) as runtime:
        result = runtime.run(module.agent, {"key": "ab"})
        provenance = record_of(runtime, result.run_id).start["provenance"]
    assert provenance["engine"] == current_engine()
    assert set(provenance["engine"]) == {"tracelock", "python", "implementation", "platform", "distributions"}
    modules = provenance["code"]["modules"]
    # The agent's module and the project module it imports; never the standard library,
    # site-packages (orjson) or tracelock itself.
    assert set(modules) == {project["agent"], project["helper"]}
    assert all(len(digest) == 64 for digest in modules.values())
    assert provenance["tools"] == {"lookup": module.kit.tools["lookup"].definition_digest}


def test_provenance_stays_outside_the_fingerprint(tmp_path: Path, project: dict[str, Any]) -> None:
    module = project["module"]
    fingerprints = []
    for name, source in (("a", Provenance(engine("0.2.1"))), ("b", Provenance(engine("0.3.0"))), ("c", NO_PROVENANCE)):
        with runtime_at(tmp_path, allow("lookup"), store=name, toolkits=(module.kit,), provenance=source) as runtime:
            result = runtime.run(module.agent, {"key": "ab"}, run_id="same", seed="s")
            start = record_of(runtime, result.run_id).start
            assert ("provenance" in start) == (name != "c")
            fingerprints.append(result.fingerprint)
    assert len(set(fingerprints)) == 1


def test_replay_under_an_upgraded_engine_reports_it(tmp_path: Path, project: dict[str, Any]) -> None:
    module = project["module"]
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.2.1"))) as old:
        run = old.run(module.agent, {"key": "ab"}).run_id
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.3.0"))) as new:
        report = new.replay(run, module.agent)
    assert report.matched and report.environment_changed
    assert report.provenance is not None
    changed = {item["field"]: (item["recorded"], item["current"]) for item in report.provenance["engine"]}
    assert changed["tracelock"] == ("0.2.1", "0.3.0") and "distributions" in changed
    assert report.provenance["modules"] == [] and report.provenance["tools"] == []
    assert "replayed under tracelock 0.3.0, recorded under 0.2.1" in describe_differences(report.provenance)
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.2.1"))) as same:
        assert not same.replay(run, module.agent).environment_changed


def test_replay_names_the_module_that_changed_before_the_divergence(tmp_path: Path, project: dict[str, Any]) -> None:
    module = project["module"]
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,)) as runtime:
        run = runtime.run(module.agent, {"key": "ab"}).run_id
    (project["dir"] / f"{project['helper']}.py").write_text(HELPER_CHANGED)
    importlib.reload(sys.modules[project["helper"]])
    module = importlib.reload(module)
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,)) as runtime:
        report = runtime.replay(run, module.agent)
    assert not report.matched and report.divergence is not None and report.divergence["step"] == 0
    assert report.provenance is not None
    assert [(item["name"], item["change"]) for item in report.provenance["modules"]] == [(project["helper"], "changed")]
    assert report.provenance["engine"] == []


def test_a_changed_tool_definition_is_named(tmp_path: Path) -> None:
    first, second = Toolkit(), Toolkit()

    @first.tool(timeout=5)
    def lookup(key: str) -> str:
        return key

    @second.tool("lookup", timeout=5, schema={"type": "object", "properties": {"key": {"type": "string", "maxLength": 8}}})
    def lookup_again(key: str) -> str:
        return key

    def agent(ctx: Any, task: Any) -> Any:
        return ctx.call("lookup", key="k")

    assert first.tools["lookup"].definition_digest != second.tools["lookup"].definition_digest
    with runtime_at(tmp_path, allow("lookup"), toolkits=(first,)) as runtime:
        run = runtime.run(agent, {}).run_id
    with runtime_at(tmp_path, allow("lookup"), toolkits=(second,)) as runtime:
        report = runtime.replay(run, agent)
    assert report.matched  # the arguments still satisfy it: the path is the same
    assert report.provenance is not None
    assert [(item["name"], item["change"]) for item in report.provenance["tools"]] == [("lookup", "changed")]


def test_retry_policy_and_timeout_are_part_of_a_definition() -> None:
    from tracelock.runtime.tools.tools import RetryPolicy

    digests = set()
    for timeout, retry in ((5, None), (6, None), (5, RetryPolicy(max_attempts=2, delays_ms=(10,))), (5, RetryPolicy(retry_on=(TimeoutError,)))):
        kit = Toolkit()
        kit.tool("t", timeout=timeout, retry=retry)(lambda key: key)
        digests.add(kit.tools["t"].definition_digest)
    assert len(digests) == 4


def test_code_identity_is_computed_once_per_agent(tmp_path: Path, project: dict[str, Any]) -> None:
    module = project["module"]
    source = Provenance(engine("0.3.0"))
    first = source.document(module.agent, module.kit)
    assert source.document(module.agent, module.kit) is first  # cached: a lookup per run
    other = Toolkit()
    other.merge(module.kit)

    @other.tool(timeout=None)
    def extra(key: str) -> str:
        return key

    assert set(source.document(module.agent, other)["tools"]) == {"lookup", "extra"}  # type: ignore[index]
    assert code_identity(["json", "orjson", "tracelock.runtime.runtime"])["modules"] == {}


def test_differences_of_a_run_without_provenance() -> None:
    found = differences(None, {"engine": engine("0.3.0"), "code": {"modules": {}}, "tools": {}})
    assert found["recorded"] is False and found["engine"] == []
    assert "recorded no provenance" in describe_differences(found)[0]


def test_diff_of_runs_under_two_engines_reports_it(tmp_path: Path, project: dict[str, Any]) -> None:
    module = project["module"]
    records = []
    for version in ("0.2.1", "0.3.0"):
        with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine(version))) as runtime:
            result = runtime.run(module.agent, {"key": "ab"}, seed="s", run_id=f"run-{version}")
            records.append(record_of(runtime, result.run_id))
    assert run_difference(records[0], records[1]) is None  # the same path: provenance is not a difference
    found = differences(records[0].start["provenance"], records[1].start["provenance"])
    assert [item["field"] for item in found["engine"]] == ["tracelock", "distributions"]


def test_a_fork_child_records_the_provenance_of_the_code_it_runs(tmp_path: Path, project: dict[str, Any]) -> None:
    from tracelock.runtime.replay.fork import fork_run

    module = project["module"]
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.2.1"))) as old:
        parent = old.run(module.agent, {"key": "ab"}).run_id
    with runtime_at(
        tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.3.0")), ids=Ids("child")
    ) as new:
        child = fork_run(new, parent, 0, module.agent)
        start = record_of(new, child.run_id).start
    assert start["parent"] == {"run": parent, "step": 0}
    assert start["provenance"]["engine"]["tracelock"] == "0.3.0"


def test_a_fork_under_an_id_the_store_holds_is_refused(tmp_path: Path, project: dict[str, Any]) -> None:
    from tracelock.runtime.replay.fork import fork_run
    from tracelock.runtime.runs.engine import RunExistsError

    module = project["module"]
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,)) as runtime:
        parent = runtime.run(module.agent, {"key": "ab"}).run_id
        size = runtime.store.size()
        with pytest.raises(RunExistsError):
            fork_run(runtime, parent, 0, module.agent, new_run_id=parent)
        assert runtime.store.size() == size  # nothing was appended to the parent's chain


def test_a_replay_compares_provenance_by_hash_first(tmp_path: Path, project: dict[str, Any]) -> None:
    """``runtime.replay`` reads a run with its provenance named by hash: when it is the
    current one's, the report says nothing changed, exactly as comparing the two documents
    does; when it is not, the recorded document is read and compared."""
    module = project["module"]
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.3.0"))) as runtime:
        run = runtime.run(module.agent, {"key": "ab"}).run_id
        document = record_of(runtime, run).start["provenance"]
        assert unchanged() == differences(document, document)
        assert runtime.replay(run, module.agent).provenance == unchanged()
        assert load_run(runtime.store, run, provenance=False).start["provenance"] == value_hash(document)
    with runtime_at(tmp_path, allow("lookup"), toolkits=(module.kit,), provenance=Provenance(engine("0.3.1"))) as newer:
        report = newer.replay(run, module.agent)
    assert report.provenance is not None and report.provenance != unchanged()
    assert report.provenance == differences(document, newer.provenance.document(module.agent, newer.toolkit))
