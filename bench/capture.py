"""Overhead of the HTTP capture on one official-SDK call, side by side in one run.

Against the loopback LLM server (``tracelock.examples.llm_server``), the same
``openai.OpenAI().chat.completions.create`` call is timed three ways, in interleaved rounds:

- ``plain``: the SDK on its own client (no tracelock), outside any run;
- ``captured``: the SDK on ``capture(DefaultHttpx2Client())``, inside a recorded run (every
  call is a journaled ``llm`` step);
- ``replay``: the captured run replayed from the journal (no network).

Targets (issue 19): capture adds under 10% to the SDK's own cost per call, and a replayed
call is faster than the live SDK call. Each figure is the median over the rounds of the
per-call time of a round's calls (timed around the calls, inside the agent for the captured
and replayed ones: a run's own start and end are not counted).

Run with ``python -m bench.capture [--quick] [--json]``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

from bench.cli import bench_main
from tracelock.examples.llm_server import LLMServer
from tracelock.integrations.http import capture
from tracelock.runtime.runtime import Runtime

POLICY = {
    "version": 1,
    "llm": {"allow": True, "models": ["gpt-bench"]},
    "http": {"allow": [{"host": "127.0.0.1", "methods": ["POST"], "paths": ["/v1/chat/completions"]}]},
}
MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Summarise the ticket: the keyboard from order A-1001 arrived broken."},
]


def _call(client: openai.OpenAI) -> Any:
    return client.chat.completions.create(model="gpt-bench", max_tokens=64, messages=MESSAGES)


def run(quick: bool) -> dict[str, Any]:
    calls, rounds = (40, 3) if quick else (200, 5)
    plain_times: list[float] = []
    captured_times: list[float] = []
    replay_times: list[float] = []
    with LLMServer() as server, tempfile.TemporaryDirectory() as tmp:
        base = server.url + "/v1"
        plain = openai.OpenAI(base_url=base, api_key="sk-bench", max_retries=0)
        captured = openai.OpenAI(
            base_url=base, api_key="sk-bench", max_retries=0, http_client=capture(openai.DefaultHttpx2Client())
        )
        runtime = Runtime(Path(tmp) / "store", POLICY)

        spent: list[float] = []

        def agent(ctx: Any, input: Any) -> int:
            # The calls alone: the run's own start and end are not the capture's cost.
            start = time.perf_counter()
            for _ in range(calls):
                _call(captured)
            spent.append(time.perf_counter() - start)
            return calls

        _call(plain)  # warm the connections and the SDK's lazy imports
        runtime.run(agent, None)
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                _call(plain)
            plain_times.append((time.perf_counter() - start) / calls)
            result = runtime.run(agent, None)
            captured_times.append(spent[-1] / calls)
            report = runtime.replay(result.run_id, agent)
            replay_times.append(spent[-1] / calls)
            assert report.matched, report.divergence
        runtime.close()
    plain_us = statistics.median(plain_times) * 1e6
    captured_us = statistics.median(captured_times) * 1e6
    replay_us = statistics.median(replay_times) * 1e6
    overhead = (captured_us - plain_us) / plain_us
    figures = {
        "mode": "quick" if quick else "full",
        "calls_per_round": calls,
        "rounds": rounds,
        "plain_us_per_call": round(plain_us, 1),
        "captured_us_per_call": round(captured_us, 1),
        "replay_us_per_call": round(replay_us, 1),
        "capture_overhead_us": round(captured_us - plain_us, 1),
        "capture_overhead_pct": round(overhead * 100, 1),
        "replay_speedup": round(plain_us / replay_us, 2),
        "meets_overhead_target": overhead < 0.10,
        "replay_faster_than_live": replay_us < plain_us,
    }
    print(f"openai chat.completions.create against the loopback server ({figures['mode']}: "
          f"{rounds} rounds of {calls} calls, median per call)")
    print(f"  plain SDK:         {plain_us:8.1f} us")
    print(f"  captured (record): {captured_us:8.1f} us  (+{figures['capture_overhead_us']} us, "
          f"{figures['capture_overhead_pct']}%; target < 10%: "
          f"{'met' if figures['meets_overhead_target'] else 'MISSED'})")
    print(f"  replay:            {replay_us:8.1f} us  ({figures['replay_speedup']}x the live call; "
          f"{'faster' if figures['replay_faster_than_live'] else 'NOT faster'})")
    return figures


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
