"""An agent that calls a model through the official OpenAI client, recorded and replayed by
tracelock. The one tracelock line is the client's ``http_client=``.

Run it as it is (``pip install 'tracelock[openai]'``; no API key, no network: it starts a
small OpenAI-compatible server on loopback)::

    python examples/openai_capture/agent.py

It records a run against the server, stops the server, then replays the run from the journal
with nothing listening: the same answers, the same fingerprint. To use the real API, set
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` and allow ``api.openai.com`` in ``policy.toml``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import openai

from tracelock import Runtime
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import capture

HERE = Path(__file__).parent


def make_agent(client: openai.OpenAI) -> Any:
    def agent(ctx: Any, ticket: dict[str, str]) -> dict[str, Any]:
        triage = client.chat.completions.create(
            model="gpt-test",
            max_tokens=64,
            messages=[
                {"role": "system", "content": "Classify the ticket in one word."},
                {"role": "user", "content": ticket["text"]},
            ],
        )
        words = []
        stream = client.chat.completions.create(
            model="gpt-test",
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Draft a reply to: " + ticket["text"]}],
        )
        for event in stream:
            if event.choices and event.choices[0].delta.content:
                words.append(event.choices[0].delta.content)
        return {"category": triage.choices[0].message.content, "reply": "".join(words).strip()}

    return agent


def main() -> int:
    store = Path(tempfile.mkdtemp(prefix="tracelock-openai-")) / "store"
    server = LLMServer().start()
    client = openai.OpenAI(
        base_url=server.url + "/v1",
        api_key="sk-example-not-a-real-key",
        http_client=capture(openai.DefaultHttpx2Client()),  # the one tracelock line
    )
    agent = make_agent(client)
    runtime = Runtime(store, HERE / "policy.toml")
    result = runtime.run(agent, {"text": "My keyboard arrived broken"})
    print("recorded:", result.run_id, result.status, result.output)
    print("fingerprint:", result.fingerprint)
    for effect in result.effects:
        usage = (effect["result"].get("llm") or {}).get("usage")
        print(f"  step {effect['step']}: {effect['kind']} {effect['name']}  usage={usage}")

    server.stop()  # from here on, nothing answers on that port
    report = runtime.replay(result.run_id, agent)
    print("replayed with the server stopped:", "match" if report.matched else "DIVERGED")
    print("replayed fingerprint:", report.replayed_fingerprint)
    runtime.close()
    print("store:", store)
    return 0 if report.matched else 1


if __name__ == "__main__":
    sys.exit(main())
