"""The workload on IntentusNet: an agent on an ``IntentusRuntime`` (which records each
execution), with every step bracketed by IntentusNet's write-ahead log (``WALWriter``: entries
hash-chained and fsynced, ``step_started`` before the effect, ``step_completed`` after), the
WAL its recovery manager reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from intentusnet import IntentusRuntime
from intentusnet.core.agent import BaseAgent
from intentusnet.protocol import AgentDefinition, AgentResponse, Capability, IntentRef
from intentusnet.recording.models import stable_hash
from intentusnet.wal import WALReader, WALWriter

from bench.peers.apps import effects

INTENT = "RunWorkload"


def _step(wal: WALWriter, step_id: str, func: Callable[..., Any], **args: Any) -> Any:
    wal.step_started(step_id, "workload-agent", "read_only", {}, stable_hash(args))
    result = func(**args)
    wal.step_completed(step_id, stable_hash(result), True)
    return result


class WorkloadAgent(BaseAgent):
    def __init__(self, router: Any, wal_dir: Path) -> None:
        definition = AgentDefinition(name="workload-agent", capabilities=[Capability(intent=IntentRef(INTENT, "1.0"))])
        super().__init__(definition, router)
        self.wal_dir = wal_dir

    def handle_intent(self, env: Any) -> AgentResponse:
        task = env.payload
        with WALWriter(str(self.wal_dir), task["run_id"]) as wal:
            entries = WALReader(str(self.wal_dir), task["run_id"]).read_all(verify_integrity=False)
            if entries:  # a recovered execution: continue its chain, as IntentusNet's tools do
                wal._seq, wal._last_hash = entries[-1].seq, entries[-1].entry_hash
            else:
                wal.execution_started(stable_hash(task), INTENT)
            ask = task["ask"]
            plan = _step(wal, "llm", effects.plan, prompt=ask)
            orders = _step(wal, "search_orders", effects.search_orders, query=ask)
            update = _step(wal, "send_update", effects.send_update, customer_id=task["customer"], text=plan["content"])
            output = {"plan": plan["content"], "orders": orders, "update": update}
            wal.execution_completed(stable_hash(output))
        return AgentResponse.success(output, agent=self.definition.name, trace_id=env.metadata.traceId)


def build(root: Path) -> IntentusRuntime:
    runtime = IntentusRuntime(enable_recording=True, record_dir=str(root / "records"))
    runtime.register_agent(lambda router: WorkloadAgent(router, root / "wal"))
    return runtime


def run(runtime: IntentusRuntime, run_id: str, task: dict[str, Any]) -> dict[str, Any]:
    response = runtime.client().send_intent(INTENT, {"run_id": run_id, **task})
    if response.error is not None:
        raise RuntimeError(f"IntentusNet run {run_id} failed: {response.error.message}")
    payload: dict[str, Any] = response.payload
    return payload
