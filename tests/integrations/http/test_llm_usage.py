"""The LLM provider contract (issue 21, item 10): both usage shapes feed the token budget,
the policy's price table feeds the cost budget, and an unknown shape is an error when a
budget needs it, never a silent zero. Through ``ctx.llm`` and through a captured SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integrations.capture_helpers import API_KEY, Ids, Ticks, policy, record_of, runtime_at
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import capture
from tracelock.runtime.errors import StepError
from tracelock.runtime.pipeline.usage import cost_of, tokens_of
from tracelock.runtime.runtime import Runtime


def llm_runtime(tmp_path: Path, usage: dict[str, Any], **budgets: int) -> Runtime:
    def provider(request: dict[str, Any]) -> dict[str, Any]:
        return {"content": "ok", "usage": usage}

    document = {"version": 1, "llm": {"allow": True, "models": ["m"]}, "budgets": budgets}
    return Runtime(tmp_path / "store", document, llm=provider, clock=Ticks(), ids=Ids())


def twice(ctx: Any, input: Any) -> Any:
    outcomes = []
    for _ in range(2):
        try:
            ctx.llm(model="m", prompt="p", max_tokens=200)
            outcomes.append("ok")
        except StepError as exc:
            outcomes.append(exc.step_code)
    return outcomes


@pytest.mark.parametrize(
    "usage",
    [{"prompt_tokens": 600, "completion_tokens": 100}, {"input_tokens": 600, "output_tokens": 100}],
    ids=["openai", "anthropic"],
)
def test_either_usage_shape_feeds_the_token_budget(tmp_path: Path, usage: dict[str, Any]) -> None:
    # 700 used + 200 requested > 800: the second call is denied, whichever shape was used.
    result = llm_runtime(tmp_path, usage, tokens=800).run(twice, None)
    assert result.output == ["ok", "POLICY_BUDGET_EXCEEDED"]


def test_an_unknown_usage_shape_fails_the_step_when_a_token_budget_needs_it(tmp_path: Path) -> None:
    runtime = llm_runtime(tmp_path, {"tokens_in": 600}, tokens=800)
    result = runtime.run(twice, None)
    assert result.output == ["LLM_USAGE_UNKNOWN", "LLM_USAGE_UNKNOWN"]
    step = record_of(runtime, result.run_id).effects[0]
    assert step["error"]["details"]["usage_keys"] == ["tokens_in"]


def test_an_unknown_usage_shape_is_fine_without_a_budget(tmp_path: Path) -> None:
    assert llm_runtime(tmp_path, {"tokens_in": 600}).run(twice, None).output == ["ok", "ok"]


def test_a_cost_budget_needs_a_price_or_a_reported_cost(tmp_path: Path) -> None:
    result = llm_runtime(tmp_path, {"input_tokens": 10, "output_tokens": 10}, cost_micro_usd=100).run(twice, None)
    assert result.output == ["LLM_COST_UNKNOWN", "LLM_COST_UNKNOWN"]


def test_the_price_table_feeds_the_cost_budget_of_captured_calls(tmp_path: Path, server: LLMServer) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, http_client=capture(openai.DefaultHttpx2Client()))
    # 1 micro-USD per input token, 2 per output token: "a b c" costs 6 in + 2*5 out = 16.
    document = policy(llm={"prices": {"gpt-test": {"input": 1_000_000, "output": 2_000_000}}}, budgets={"cost_micro_usd": 20})

    def agent(ctx: Any, input: Any) -> Any:
        outcomes = []
        for _ in range(2):
            try:
                client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "a b c"}])
                outcomes.append("ok")
            except StepError as exc:
                outcomes.append(exc.step_code)
        return outcomes

    runtime = runtime_at(tmp_path, document)
    result = runtime.run(agent, None)
    # The first call costs 16; the second is allowed (16 < 20) and spends the budget.
    assert result.output == ["ok", "ok"]
    third = runtime.run(lambda ctx, i: agent(ctx, i) + agent(ctx, i), None)
    assert third.output == ["ok", "ok", "POLICY_BUDGET_EXCEEDED", "POLICY_BUDGET_EXCEEDED"]
    assert len(server.requests) == 4


def test_a_stream_without_usage_fails_when_a_token_budget_needs_it(tmp_path: Path, server: LLMServer) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, http_client=capture(openai.DefaultHttpx2Client()))

    def agent(ctx: Any, input: Any) -> Any:
        try:
            list(client.chat.completions.create(
                model="gpt-test", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=True
            ))
        except StepError as exc:
            return exc.step_code
        return "ok"

    assert runtime_at(tmp_path, policy(budgets={"tokens": 1000})).run(agent, None).output == "LLM_USAGE_UNKNOWN"


def test_a_captured_call_without_max_tokens_is_denied_when_the_policy_caps_calls(tmp_path: Path, server: LLMServer) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, http_client=capture(openai.DefaultHttpx2Client()))

    def agent(ctx: Any, input: Any) -> Any:
        try:
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        except StepError as exc:
            return exc.step_code
        return "ok"

    assert runtime_at(tmp_path, policy(llm={"max_tokens": 100})).run(agent, None).output == "POLICY_LLM_MAX_TOKENS"
    assert server.requests == []


counts = st.integers(min_value=0, max_value=2**40)


@settings(max_examples=200, deadline=None)
@given(counts, counts, counts, counts)
def test_the_two_shapes_count_the_same(tokens_in: int, tokens_out: int, cache_a: int, cache_b: int) -> None:
    openai_shape = {"usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": 1}}
    anthropic_shape = {"usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}
    cached = {"usage": {"input_tokens": tokens_in, "output_tokens": tokens_out,
                        "cache_creation_input_tokens": cache_a, "cache_read_input_tokens": cache_b}}
    assert tokens_of(openai_shape) == tokens_of(anthropic_shape) == (tokens_in, tokens_out)
    assert tokens_of(cached) == (tokens_in + cache_a + cache_b, tokens_out)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8).filter(lambda key: "tokens" not in key), st.integers()))
def test_any_other_shape_is_unknown(usage: dict[str, int]) -> None:
    assert tokens_of({"usage": usage}) is None
    assert cost_of({"usage": usage}, {"input": 1, "output": 1}) is None


@settings(max_examples=200, deadline=None)
@given(counts, counts, st.integers(0, 10**8), st.integers(0, 10**8))
def test_the_cost_is_the_price_rounded_up(tokens_in: int, tokens_out: int, price_in: int, price_out: int) -> None:
    cost = cost_of({"usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}, {"input": price_in, "output": price_out})
    exact = tokens_in * price_in + tokens_out * price_out
    assert cost is not None and cost * 1_000_000 >= exact > (cost - 1) * 1_000_000
