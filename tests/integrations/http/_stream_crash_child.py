"""Child process of the mid-stream crash test: records a run whose agent reads the first
event of a captured stream and then the process dies (``os._exit``), before the stream's
step has a result. The parent resumes the run with the same agent (without the crash)."""

from __future__ import annotations

import os
import sys
from typing import Any

import openai

from tests.integrations.capture_helpers import API_KEY, policy
from tracelock.integrations.http import capture
from tracelock.runtime.runtime import Runtime

# Read at import (agent code may not read the environment in strict mode).
CRASH = os.environ.get("TL_TEST_CRASH") == "1"
client = openai.OpenAI(base_url=os.environ["TL_TEST_SERVER"] + "/v1", api_key=API_KEY, max_retries=0,
                       http_client=capture(openai.DefaultHttpx2Client()))


def agent(ctx: Any, input: Any) -> Any:
    first = ctx.call("note", text="before")
    pieces = []
    for event in client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": input}],
                                                stream=True):
        if event.choices:
            pieces.append(event.choices[0].delta.content or "")
        if CRASH:
            os._exit(9)
    return {"first": first, "text": "".join(pieces)}


def make_runtime(store: str) -> Any:
    from tracelock.runtime.tools.toolkit import Toolkit

    kit = Toolkit()

    @kit.tool(side_effect="read_only", timeout=None)
    def note(text: str) -> str:
        return text

    return Runtime(store, policy(tools=[{"name": "note"}]), toolkits=(kit,))


if __name__ == "__main__":
    import _stream_crash_child as recorded  # the agent by its importable name, not __main__'s

    recorded.make_runtime(sys.argv[1]).run(recorded.agent, "crash here please", run_id="crashed")
