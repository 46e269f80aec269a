"""The policy's ``[http]`` table: hosts, methods and path patterns, deny by default; and
``llm.prices``. Neither changes the hash of a policy that does not use it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelock.runtime.policy.policy import (
    AuthorizationRequest,
    Policy,
    PolicyMissingKeyError,
    PolicyUnknownKeyError,
    PolicyValueError,
    Usage,
)

RULES = {
    "allow": [
        {"host": "api.openai.com", "methods": ["post"], "paths": ["/v1/chat/completions", "/v1/responses"]},
        {"host": "127.0.0.1:8080", "methods": ["GET"], "paths": ["/files/*", "/tree/**"], "class": "read_only"},
        {"host": "hooks.example.com", "methods": ["POST"], "class": "irreversible"},
    ]
}


def http(method: str, host: str, path: str) -> AuthorizationRequest:
    return AuthorizationRequest("http", f"{method} {host}{path}", {"method": method, "host": host, "path": path})


def decide(policy: Policy, method: str, host: str, path: str) -> Any:
    return policy.authorize(http(method, host, path), Usage())


def test_requests_are_allowed_only_by_a_matching_rule() -> None:
    policy = Policy({"version": 1, "http": RULES})
    assert decide(policy, "POST", "api.openai.com", "/v1/chat/completions").allowed
    assert decide(policy, "POST", "api.openai.com:443", "/v1/responses").allowed  # the bare host matches
    assert decide(policy, "GET", "127.0.0.1:8080", "/files/a.txt").allowed
    assert decide(policy, "GET", "127.0.0.1:8080", "/tree/a/b/c").allowed
    assert decide(policy, "POST", "hooks.example.com", "/anything/at/all").allowed  # paths default to /**
    denied = [
        ("GET", "api.openai.com", "/v1/chat/completions"),  # method
        ("POST", "api.openai.com", "/v1/embeddings"),  # path
        ("GET", "127.0.0.1:8080", "/files/a/b"),  # * stays within a segment
        ("GET", "127.0.0.1:9090", "/files/a"),  # a rule with a port allows only that port
        ("POST", "evil.example.com", "/v1/chat/completions"),  # host
    ]
    for method, host, path in denied:
        decision = decide(policy, method, host, path)
        assert not decision.allowed and decision.code == "POLICY_HTTP_NOT_ALLOWED", (method, host, path)
        assert decision.details == {"method": method, "host": host, "path": path}
    assert not decide(Policy({"version": 1}), "GET", "example.com", "/").allowed  # deny by default


def test_the_rule_names_the_side_effect_class() -> None:
    policy = Policy({"version": 1, "http": RULES})
    assert policy.http_rule("POST", "hooks.example.com", "/x") == {
        "host": "hooks.example.com", "methods": ["POST"], "paths": ["/**"], "class": "irreversible"
    }
    assert policy.http_rule("GET", "example.com", "/") is None


def test_budgets_apply_to_http_requests() -> None:
    policy = Policy({"version": 1, "http": RULES, "budgets": {"effects": 2}})
    request = http("POST", "api.openai.com", "/v1/responses")
    assert policy.authorize(request, Usage(effects=1)).allowed
    spent = policy.authorize(request, Usage(effects=2))
    assert spent.code == "POLICY_BUDGET_EXCEEDED" and spent.details["budget"] == "effects"


def test_a_policy_without_the_new_tables_keeps_its_hash() -> None:
    plain = {"version": 1, "llm": {"allow": True, "models": ["m"]}}
    before = Policy(plain)
    assert "http" not in before.document and "prices" not in before.document["llm"]
    with_tables = Policy({**plain, "http": RULES, "llm": {**plain["llm"], "prices": {"m": {"input": 1, "output": 2}}}})
    assert with_tables.hash != before.hash
    assert with_tables.price("m") == {"input": 1, "output": 2} and before.price("m") is None
    # TOML says the same thing as the mapping.
    toml = Policy.from_toml(
        'version = 1\n[llm]\nallow = true\nmodels = ["m"]\n[llm.prices.m]\ninput = 1\noutput = 2\n'
        '[[http.allow]]\nhost = "api.openai.com"\nmethods = ["POST"]\npaths = ["/v1/chat/completions", "/v1/responses"]\n'
        '[[http.allow]]\nhost = "127.0.0.1:8080"\nmethods = ["GET"]\npaths = ["/tree/**", "/files/*"]\nclass = "read_only"\n'
        '[[http.allow]]\nhost = "hooks.example.com"\nmethods = ["POST"]\nclass = "irreversible"\n'
    )
    assert toml.hash == with_tables.hash


@pytest.mark.parametrize(
    ("table", "error", "where"),
    [
        ({"allow": [{"methods": ["GET"]}]}, PolicyMissingKeyError, "http.allow[0].host"),
        ({"allow": [{"host": "a", "methods": ["FETCH"]}]}, PolicyValueError, "http.allow[0].methods[0]"),
        ({"allow": [{"host": "a", "paths": ["v1/*"]}]}, PolicyValueError, "http.allow[0].paths[0]"),
        ({"allow": [{"host": "a", "class": "sometimes"}]}, PolicyValueError, "http.allow[0].class"),
        ({"allow": [{"host": "a", "port": 1}]}, PolicyUnknownKeyError, "http.allow[0].port"),
        ({"deny": []}, PolicyUnknownKeyError, "http.deny"),
    ],
)
def test_a_malformed_http_table_is_refused_naming_the_key(table: Any, error: type[Exception], where: str) -> None:
    with pytest.raises(error) as caught:
        Policy({"version": 1, "http": table})
    assert where in str(caught.value)


def test_a_price_needs_both_figures() -> None:
    with pytest.raises(PolicyMissingKeyError, match=r"llm\.prices\.m"):
        Policy({"version": 1, "llm": {"prices": {"m": {"input": 1}}}})


segment = st.text(alphabet="abc.-_", min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(st.lists(segment, min_size=1, max_size=4))
def test_a_star_matches_one_segment_and_a_double_star_any_path(parts: list[str]) -> None:
    policy = Policy({"version": 1, "http": {"allow": [
        {"host": "one", "paths": ["/x/*"]}, {"host": "any", "paths": ["/x/**"]}
    ]}})
    path = "/x/" + "/".join(parts)
    assert (policy.http_rule("GET", "one", path) is not None) == (len(parts) == 1)
    assert policy.http_rule("GET", "any", path) is not None
