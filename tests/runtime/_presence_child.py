"""Child process of ``test_presence.py``: a service that runs one agent whose read-only tool
waits (for at most a minute) until it is killed. It writes ``in-tool`` beside the store when
the tool has started."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tracelock import Runtime, Toolkit

POLICY = {"version": 1, "tools": [{"name": "slow_lookup"}]}


def build(flag: Path | None) -> Toolkit:
    kit = Toolkit()

    @kit.tool(side_effect="read_only", timeout=None)
    def slow_lookup(key: str) -> str:
        if flag is not None:
            flag.write_text("in tool")
            time.sleep(60)
        return key.upper()

    @kit.agent("service-agent")
    def agent(ctx: Any, task: dict[str, Any]) -> str:
        return str(ctx.call("slow_lookup", key=task["key"]))

    return kit


def main() -> None:
    store = Path(sys.argv[1])
    kit = build(store.parent / "in-tool")
    with Runtime(str(store), POLICY, toolkits=(kit,), ids=lambda: "run-live") as runtime:
        runtime.run(kit.agents["service-agent"].func, {"key": "k"})


if __name__ == "__main__":
    main()
