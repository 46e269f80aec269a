"""A store for the UI tests, recorded by real agents through the real runtime and CLI:

* ``support``: the support example (an LLM plans; look-ups, a refund DENIED by the policy,
  an idempotent sandbox write with its idempotency key);
* ``xss``: an LLM whose answer (and an input) carry HTML and a ``<script>`` tag;
* ``quote_a`` / ``quote_b``: the same agent on the same input, where the tool's answer
  changed in between (a diff whose first divergence is the result of step 1; drift);
* ``fork``: ``quote_b`` forked at step 1 (parent and forks);
* ``stream``: the official ``openai`` SDK, captured at its HTTP transport, streaming an
  answer from the loopback LLM server (the chunks are recorded);
* ``redacted``: a run whose step 0 result and whole step 1 were redacted afterwards
  (``tracelock redact``);
* ``wait_approve`` / ``wait_reject``: an irreversible tool needing approval, waiting;
* a signed checkpoint over all of it, and the key pair that signed it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
from click.testing import CliRunner

from tracelock.cli.main import cli
from tracelock.examples import support
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import capture
from tracelock.runtime.replay.fork import fork_run
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit

SCRIPT_ANSWER = "<script>alert('answer')</script><b>bold?</b> & done"
SCRIPT_INPUT = {"ask": "<img src=x onerror=alert(1)>", "n": 1}

PRICES = {"kb": 100, "mouse": 40}

pricing = Toolkit()


@pricing.tool(side_effect="read_only")
def quote(item: str) -> dict[str, Any]:
    return {"item": item, "price": PRICES[item]}


@pricing.tool(side_effect="read_only")
def stock(item: str) -> dict[str, Any]:
    return {"item": item, "units": 3}


def quoting(ctx: Any, order: dict[str, Any]) -> dict[str, Any]:
    units = ctx.call("stock", item=order["item"])
    price = ctx.call("quote", item=order["item"])
    return {"total": price["price"] * order["qty"], "units": units["units"]}


def _chatty_llm(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": SCRIPT_ANSWER, "usage": {"input_tokens": 3, "output_tokens": 7}}


chat = Toolkit(llm=_chatty_llm)


def chatty(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
    answer = ctx.llm(model="stand-in", messages=[{"role": "user", "content": task["ask"]}], max_tokens=32)
    return {"answer": answer["content"]}


shipping = Toolkit()


@shipping.tool(side_effect="irreversible")
def ship(box: str) -> str:
    return "shipped " + box


def shipper(ctx: Any, order: dict[str, Any]) -> Any:
    return ctx.call("ship", box=order["box"])


STREAM_POLICY = {
    "version": 1,
    "llm": {"allow": True, "models": ["gpt-test"]},
    "http": {"allow": [{"host": "127.0.0.1", "methods": ["POST"], "paths": ["/v1/**"]}]},
}
QUOTE_POLICY = {"version": 1, "tools": [{"name": "stock"}, {"name": "quote"}]}
CHAT_POLICY = {"version": 1, "llm": {"allow": True, "models": ["stand-in"]}}
SHIP_POLICY = {"version": 1, "tools": [{"name": "ship", "approval": True}]}


def _cli_json(*args: Any) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args] + ["--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def build_world(root: Path) -> dict[str, Any]:
    """Record every run into ``root / "store"``; return the ids and key files."""
    store = root / "store"
    ids: dict[str, Any] = {"store": store}
    runtime = Runtime(store, support.POLICY_FILE, toolkits=(support.support,), sandbox=root / "sandbox")
    ticket = {"id": "T-7", "text": "My keyboard from order A-1001 arrived broken."}
    ids["support"] = runtime.run(support.agent, ticket, run_id="run-support").run_id
    for name, policy, kit in (("chat", CHAT_POLICY, chat), ("quote", QUOTE_POLICY, pricing), ("ship", SHIP_POLICY, shipping)):
        ids[f"runtime_{name}"] = Runtime(runtime.store, policy, toolkits=(kit,))
    ids["xss"] = ids["runtime_chat"].run(chatty, SCRIPT_INPUT, run_id="run-xss").run_id
    PRICES["kb"] = 100
    ids["quote_a"] = ids["runtime_quote"].run(quoting, {"item": "kb", "qty": 2}, run_id="run-quote-a").run_id
    PRICES["kb"] = 125
    ids["quote_b"] = ids["runtime_quote"].run(quoting, {"item": "kb", "qty": 2}, run_id="run-quote-b").run_id
    ids["quote_c"] = ids["runtime_quote"].run(quoting, {"item": "kb", "qty": 2}, run_id="run-quote-c").run_id
    ids["fork"] = fork_run(ids["runtime_quote"], ids["quote_b"], 1, quoting, new_run_id="run-fork").run_id
    # Its own item: payloads are stored once per content, and a redaction removes the content.
    ids["redacted"] = ids["runtime_quote"].run(quoting, {"item": "mouse", "qty": 5}, run_id="run-redacted").run_id
    with LLMServer() as server:
        client = openai.OpenAI(
            base_url=server.url + "/v1", api_key="sk-test-ui", http_client=capture(openai.DefaultHttpx2Client())
        )

        def streaming(ctx: Any, question: str) -> str:
            stream = client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": question}], stream=True
            )
            return "".join(event.choices[0].delta.content or "" for event in stream if event.choices)

        streamer = Runtime(runtime.store, STREAM_POLICY)
        ids["stream"] = streamer.run(streaming, "tell me three words", run_id="run-stream").run_id
        streamer.close()
    for name in ("wait_approve", "wait_reject"):
        result = ids["runtime_ship"].run(shipper, {"box": f"box-{name}"}, run_id=f"run-{name.replace('_', '-')}")
        assert result.status == "awaiting_approval", result
        ids[name] = result.run_id
    for name in ("chat", "quote", "ship"):
        ids.pop(f"runtime_{name}").close()
    runtime.close()
    runtime.store.close()
    _cli_json("redact", ids["redacted"], "0", "--field", "result", "--by", "dpo", "--reason", "customer data", "--store", store)
    _cli_json("redact", ids["redacted"], "1", "--by", "dpo", "--reason", "customer data", "--store", store)
    keys = _cli_json("keys", "generate", "--out", root / "keys", "--name", "example.com/agents")
    _cli_json("checkpoint", "--key", keys["files"]["private_key"], "--store", store)
    ids["pub"] = Path(keys["files"]["public_key"])
    ids["vkey"] = Path(keys["files"]["verifier_key"])
    return ids
