"""The policy at the door: deny by default, budgets, models, human approval (wait, approve or
reject, resume), and the policy hash every run records."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import (
    Ids,
    allow,
    assert_store_ok,
    effect_of,
    record_of,
    runtime_at,
)
from tracelock.errors import StoreError
from tracelock.runtime.errors import RunStateError, StepError
from tracelock.runtime.policy.policy import Policy
from tracelock.runtime.policy.sandbox import FS_OPERATIONS
from tracelock.runtime.runtime import Runtime


def echo_provider(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": str(request.get("prompt")), "usage": {"input_tokens": 1, "output_tokens": 1}}


def attempt(ctx: Any, request: Any) -> Any:
    """Run one request; return its outcome and code instead of raising."""
    try:
        request(ctx)
    except StepError as failure:
        return [failure.outcome.value, failure.step_code]
    return ["SUCCESS", None]


@pytest.mark.parametrize("policy", [None, {"version": 1}])
def test_without_a_policy_every_tool_llm_and_fs_call_is_denied(tmp_path: Path, policy: Any) -> None:
    calls = Counter[str]()

    def provider(request: dict[str, Any]) -> dict[str, Any]:
        calls["llm"] += 1
        return {"content": "never"}

    with runtime_at(tmp_path, policy, llm=provider, sandbox=tmp_path / "sb") as runtime:

        @runtime.tool()
        def lookup(key: str) -> str:
            calls["lookup"] += 1
            return key

        @runtime.tool(side_effect="irreversible")
        def send(to: str) -> None:
            calls["send"] += 1

        def agent(ctx: Any, _: Any) -> Any:
            return [
                attempt(ctx, lambda c: c.call("lookup", key="k")),
                attempt(ctx, lambda c: c.call("send", to="x")),
                attempt(ctx, lambda c: c.llm(model="any", prompt="hi")),
                attempt(ctx, lambda c: c.call("fs.write", path="a.txt", content="x")),
                attempt(ctx, lambda c: c.call("fs.read", path="a.txt")),
            ]

        result = runtime.run(agent)
        assert result.output == [
            ["DENIED", "POLICY_TOOL_NOT_ALLOWED"],
            ["DENIED", "POLICY_TOOL_NOT_ALLOWED"],
            ["DENIED", "POLICY_LLM_NOT_ALLOWED"],
            ["DENIED", "POLICY_FS_OPERATION_NOT_ALLOWED"],
            ["DENIED", "POLICY_FS_OPERATION_NOT_ALLOWED"],
        ]
        assert calls == Counter()
        assert list((tmp_path / "sb").iterdir()) == []
        assert all(effect["phase"] == "AUTHORIZE" for effect in result.effects)
        assert record_of(runtime, result.run_id).start["policy"] == Policy.from_mapping({"version": 1}).hash


def test_the_llm_call_budget_is_enforced(tmp_path: Path) -> None:
    policy = allow(llm={"allow": True, "models": ["m"]}, budgets={"llm_calls": 2})
    calls: list[str] = []

    def provider(request: dict[str, Any]) -> dict[str, Any]:
        calls.append(request["prompt"])
        return echo_provider(request)

    with runtime_at(tmp_path, policy, llm=provider) as runtime:
        result = runtime.run(lambda ctx, _: [attempt(ctx, lambda c, p=p: c.llm(model="m", prompt=p)) for p in "abc"])
        assert result.output == [["SUCCESS", None], ["SUCCESS", None], ["DENIED", "POLICY_BUDGET_EXCEEDED"]]
        assert calls == ["a", "b"]
        details = effect_of(runtime, result.run_id, 2)["error"]["details"]
        assert (details["budget"], details["limit"], details["used"]) == ("llm_calls", 2, 2)


def test_the_effects_budget_is_enforced(tmp_path: Path) -> None:
    calls: list[int] = []
    with runtime_at(tmp_path, allow("work", budgets={"effects": 2})) as runtime:

        @runtime.tool()
        def work(n: int) -> int:
            calls.append(n)
            return n

        def agent(ctx: Any, _: Any) -> Any:
            ctx.random()  # not an effect on the world: not counted
            return [attempt(ctx, lambda c, n=n: c.call("work", n=n)) for n in range(3)]

        result = runtime.run(agent)
        assert result.output == [["SUCCESS", None], ["SUCCESS", None], ["DENIED", "POLICY_BUDGET_EXCEEDED"]]
        assert calls == [0, 1]
        assert effect_of(runtime, result.run_id, 3)["error"]["details"]["budget"] == "effects"


@pytest.mark.parametrize(
    ("llm", "model", "max_tokens", "code"),
    [
        ({"allow": True, "models": ["small"]}, "large", 10, "POLICY_MODEL_NOT_ALLOWED"),
        ({"allow": True, "models": ["small"], "max_tokens": 100}, "small", 101, "POLICY_LLM_MAX_TOKENS"),
        ({"allow": False}, "small", 10, "POLICY_LLM_NOT_ALLOWED"),
    ],
)
def test_llm_calls_outside_the_policy_are_denied(
    tmp_path: Path, llm: dict[str, Any], model: str, max_tokens: int, code: str
) -> None:
    calls: list[Any] = []
    with runtime_at(tmp_path, allow(llm=llm), llm=lambda r: calls.append(r) or {"content": ""}) as runtime:
        result = runtime.run(lambda ctx, _: ctx.llm(model=model, prompt="p", max_tokens=max_tokens))
        assert (result.outcome, result.code) == ("DENIED", code)
        assert effect_of(runtime, result.run_id, 0)["phase"] == "AUTHORIZE"
        assert calls == []


# -- human approval --------------------------------------------------------------------------

APPROVAL_POLICY = allow("lookup", {"name": "wire", "approval": True}, "note")


def approval_runtime(
    tmp_path: Path, calls: Counter[str], policy: Any = APPROVAL_POLICY, ids: str = "run"
) -> Runtime:
    runtime = runtime_at(tmp_path, policy, ids=Ids(ids))

    @runtime.tool()
    def lookup(account: str) -> str:
        calls["lookup"] += 1
        return account.upper()

    @runtime.tool(side_effect="irreversible")
    def wire(to: str, cents: int) -> dict[str, Any]:
        calls["wire"] += 1
        return {"to": to, "cents": cents}

    @runtime.tool()
    def note(text: str) -> str:
        calls["note"] += 1
        return text

    @runtime.agent("payer")
    def payer(ctx: Any, order: dict[str, Any]) -> Any:
        account = ctx.call("lookup", account=order["to"])  # step 0
        sent = ctx.call("wire", to=account, cents=order["cents"])  # step 1: needs a human
        return {"sent": sent, "note": ctx.call("note", text="done")}  # step 2

    return runtime


ORDER = {"to": "acme", "cents": 1200}


def test_an_approval_step_waits_then_runs_exactly_once_after_approval(tmp_path: Path) -> None:
    calls = Counter[str]()
    with approval_runtime(tmp_path, calls) as runtime:
        waiting = runtime.run("payer", ORDER)
        assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 1)
        assert (waiting.outcome, waiting.code, waiting.fingerprint) == (None, None, None)
        assert "approval" in str(waiting.error)
        record = record_of(runtime, waiting.run_id)
        assert (record.status, record.waiting_step) == ("awaiting_approval", 1)
        assert record.end is None
        assert calls == Counter(lookup=1)
        retrieved = runtime.retrieve(waiting.run_id)
        assert (retrieved.status, retrieved.waiting_step) == ("awaiting_approval", 1)

        runtime.approve(waiting.run_id, 1, by="alice", reason="known supplier")
        approval = record_of(runtime, waiting.run_id).approvals[1]
        assert approval == {"step": 1, "decision": "approved", "by": "alice", "reason": "known supplier"}
        assert calls == Counter(lookup=1)  # approving runs nothing

        done = runtime.resume(waiting.run_id)
        assert (done.run_id, done.status, done.outcome) == (waiting.run_id, "completed", "SUCCESS")
        assert done.output == {"sent": {"to": "ACME", "cents": 1200}, "note": "done"}
        assert calls == Counter(lookup=1, wire=1, note=1)  # step 0 was answered from the journal
        wire = effect_of(runtime, done.run_id, 1)
        assert wire["approval"] == {"by": "alice", "decision": "approved"}
        assert wire["outcome"] == "SUCCESS"
        record = record_of(runtime, done.run_id)
        assert [state["status"] for state in record.states] == ["awaiting_approval", "running"]
        assert record.status == "completed"

        again = runtime.resume(waiting.run_id)  # a finished run is only answered for
        assert (again.output, again.fingerprint) == (done.output, done.fingerprint)
        assert calls == Counter(lookup=1, wire=1, note=1)
        assert runtime.replay(done.run_id).matched
        assert calls == Counter(lookup=1, wire=1, note=1)
        assert_store_ok(runtime.store)


def test_a_rejected_step_ends_denied_and_never_runs(tmp_path: Path) -> None:
    calls = Counter[str]()
    with approval_runtime(tmp_path, calls) as runtime:
        waiting = runtime.run("payer", ORDER)
        runtime.reject(waiting.run_id, 1, by="bob", reason="unknown supplier")
        done = runtime.resume(waiting.run_id)
        assert (done.status, done.outcome, done.code) == ("failed", "DENIED", "APPROVAL_REJECTED")
        assert "bob" in str(done.error)
        wire = effect_of(runtime, done.run_id, 1)
        assert (wire["phase"], wire["attempts"]) == ("AUTHORIZE", 0)
        assert wire["approval"] == {"by": "bob", "decision": "rejected"}
        assert calls == Counter(lookup=1)
        assert_store_ok(runtime.store)


def test_a_rejection_can_be_handled_by_the_agent(tmp_path: Path) -> None:
    calls = Counter[str]()
    with runtime_at(tmp_path, APPROVAL_POLICY) as runtime:

        @runtime.tool(side_effect="irreversible")
        def wire(to: str, cents: int) -> None:
            calls["wire"] += 1

        def agent(ctx: Any, _: Any) -> Any:
            return attempt(ctx, lambda c: c.call("wire", to="x", cents=1))

        waiting = runtime.run(agent)
        runtime.reject(waiting.run_id, 0, by="carol")
        done = runtime.resume(waiting.run_id, agent)
        assert (done.outcome, done.output) == ("SUCCESS", ["DENIED", "APPROVAL_REJECTED"])
        assert calls == Counter()


def test_decisions_only_apply_to_the_step_a_run_waits_on(tmp_path: Path) -> None:
    calls = Counter[str]()
    with approval_runtime(tmp_path, calls) as runtime:
        waiting = runtime.run("payer", ORDER)
        with pytest.raises(RunStateError):
            runtime.approve(waiting.run_id, 0, by="alice")  # not the step it waits on
        with pytest.raises(RunStateError):
            runtime.approve(waiting.run_id, 1, by="")  # nobody
        runtime.approve(waiting.run_id, 1, by="alice")
        with pytest.raises(RunStateError, match="already approved"):
            runtime.reject(waiting.run_id, 1, by="mallory")  # a decision is final
        with pytest.raises(RunStateError):
            runtime.approve(waiting.run_id, 1, by="alice")
        assert list(record_of(runtime, waiting.run_id).approvals) == [1]
        done = runtime.resume(waiting.run_id)
        assert done.ok
        with pytest.raises(RunStateError):
            runtime.approve(done.run_id, 1, by="alice")  # the run no longer waits
        plain = runtime.run(lambda ctx, _: ctx.call("lookup", account="a"))
        with pytest.raises(RunStateError):
            runtime.reject(plain.run_id, 0, by="alice")
        with pytest.raises(StoreError):
            runtime.approve("no-such-run", 0, by="alice")
        assert_store_ok(runtime.store)


def test_approval_for_irreversible_applies_to_every_irreversible_tool(tmp_path: Path) -> None:
    calls = Counter[str]()
    policy = allow("lookup", "wire", "note", approval_for_irreversible=True)
    with approval_runtime(tmp_path, calls, policy) as runtime:
        waiting = runtime.run("payer", ORDER)
        assert (waiting.status, waiting.waiting_step) == ("awaiting_approval", 1)
        runtime.approve(waiting.run_id, 1, by="alice")
        assert runtime.resume(waiting.run_id).ok
        assert calls["wire"] == 1


def test_an_fs_operation_can_require_approval(tmp_path: Path) -> None:
    policy = allow(fs={"operations": ["write", "read"], "approval": ["write"]})
    with runtime_at(tmp_path, policy, sandbox=tmp_path / "sb") as runtime:

        def agent(ctx: Any, _: Any) -> Any:
            ctx.call("fs.write", path="a.txt", content="hi")
            return ctx.call("fs.read", path="a.txt")["content"]

        waiting = runtime.run(agent)
        assert waiting.status == "awaiting_approval"
        assert not (tmp_path / "sb" / "a.txt").exists()
        runtime.approve(waiting.run_id, 0, by="alice")
        assert runtime.resume(waiting.run_id, agent).output == "hi"


def test_a_resumed_run_keeps_the_policy_it_was_recorded_under(tmp_path: Path) -> None:
    calls = Counter[str]()
    runtime = approval_runtime(tmp_path, calls)
    with runtime:
        waiting = runtime.run("payer", ORDER)
        runtime.approve(waiting.run_id, 1, by="alice")
        recorded_policy = runtime.policy.hash
    # The store is reopened by a runtime whose own policy denies everything.
    stricter = approval_runtime(tmp_path, calls, policy=None, ids="later")
    with stricter:
        assert stricter.policy.hash != recorded_policy
        done = stricter.resume(waiting.run_id)
        assert done.ok, done.error
        assert calls == Counter(lookup=1, wire=1, note=1)
        assert record_of(stricter, done.run_id).start["policy"] == recorded_policy
        # new runs are judged by the new policy
        fresh = stricter.run("payer", ORDER)
        assert (fresh.outcome, fresh.code) == ("DENIED", "POLICY_TOOL_NOT_ALLOWED")


def test_budgets_count_a_failed_execution_the_same_live_and_on_resume(tmp_path: Path) -> None:
    """A step that ran and failed used the budget in the live run; a resumed run must count
    it again when it answers it from the journal."""
    outcomes = {}
    for name, approval in (("straight", False), ("paused", True)):
        policy = allow("flaky", "ok", {"name": "gate", "approval": approval}, budgets={"effects": 3})
        with runtime_at(tmp_path, policy, store=name) as runtime:

            @runtime.tool()
            def flaky() -> None:
                raise ConnectionError("down")

            @runtime.tool()
            def ok() -> str:
                return "ok"

            @runtime.tool(side_effect="irreversible")
            def gate() -> str:
                return "opened"

            def agent(ctx: Any, _: Any) -> Any:
                return [
                    attempt(ctx, lambda c: c.call("flaky")),  # runs and fails: 1 effect
                    attempt(ctx, lambda c: c.call("ok")),  # 2
                    attempt(ctx, lambda c: c.call("gate")),  # 3 (may wait for a human)
                    attempt(ctx, lambda c: c.call("ok")),  # over budget
                ]

            result = runtime.run(agent)
            if approval:
                assert result.status == "awaiting_approval"
                runtime.approve(result.run_id, 2, by="alice")
                result = runtime.resume(result.run_id, agent)
            outcomes[name] = result.output
    assert outcomes["straight"] == outcomes["paused"] == [
        ["EXECUTION_ERROR", "TOOL_RAISED"],
        ["SUCCESS", None],
        ["SUCCESS", None],
        ["DENIED", "POLICY_BUDGET_EXCEEDED"],
    ]


def test_every_run_records_its_policy_hash(tmp_path: Path) -> None:
    toml = tmp_path / "policy.toml"
    toml.write_text('version = 1\n[[tools]]\nname = "lookup"\n')
    policies = [
        (None, Policy.from_mapping({"version": 1})),
        (allow("lookup"), Policy.from_mapping(allow("lookup"))),
        (Policy.from_mapping(allow("lookup", "other")), Policy.from_mapping(allow("lookup", "other"))),
        (toml, Policy.load(toml)),
    ]
    assert Policy.load(toml).hash == Policy.from_mapping(allow("lookup")).hash
    for index, (given, expected) in enumerate(policies):
        with runtime_at(tmp_path, given, store=f"store-{index}") as runtime:
            assert runtime.policy.hash == expected.hash
            ran = runtime.run(lambda ctx, _: 1)
            failed = runtime.run(lambda ctx, _: ctx.call("missing"))
            for run_id in (ran.run_id, failed.run_id):
                assert record_of(runtime, run_id).start["policy"] == expected.hash
            # the policy document itself is kept in the store, under its hash
            assert runtime.store.get_payload(expected.hash) == expected.document
    assert len({policy.hash for _, policy in policies}) == 3


def test_fs_operations_the_policy_lists_are_allowed(tmp_path: Path) -> None:
    policy = allow(fs={"operations": list(FS_OPERATIONS), "extensions": [".md"]})
    with runtime_at(tmp_path, policy, sandbox=tmp_path / "sb") as runtime:

        def agent(ctx: Any, _: Any) -> Any:
            ctx.call("fs.write", path="a.md", content="x")
            return [
                attempt(ctx, lambda c: c.call("fs.write", path="a.txt", content="x")),
                ctx.call("fs.list")["entries"],
            ]

        result = runtime.run(agent)
        assert result.output == [
            ["DENIED", "SANDBOX_EXTENSION_NOT_ALLOWED"],
            [{"name": "a.md", "type": "file", "size": 1}],
        ]
