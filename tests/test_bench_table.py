"""The speed-and-scaling table (``bench/table.py``): its rows say *missed* when any pass
misses, never *met* for a figure it could not measure; it counts every journal file of a
store; and its conversation agent really sends the whole history with each request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import table, table_measures, workload
from bench.stats import group_rounds
from tracelock import Runtime
from tracelock.runtime.tools.toolkit import Toolkit


def _verdicts(figures: dict[str, Any]) -> dict[str, str]:
    return {row["measure"]: row["verdict"] for row in table.rows(figures)}


def test_rows_of_sections_that_failed_or_did_not_run_are_not_measured() -> None:
    rows = table.rows({"bound": {"error": "RuntimeError: no disk"}, "postgres": {"error": "initdb not found"}})
    assert {row["verdict"] for row in rows} == {"n/a"}
    assert all(row["figure"].startswith("not measured") for row in rows)
    assert next(row for row in rows if row["measure"].startswith("PostgreSQL commits"))["figure"] == "not measured: initdb not found"


def test_a_range_that_crosses_its_target_in_one_pass_is_missed() -> None:
    def bound(runtime: list[float]) -> dict[str, Any]:
        form = {"p50_vs_two_floors_by_pass": runtime, "p50_us_by_pass": [300.0] * len(runtime)}
        return {"runtime": form, "bound": form, "bound_batched": form, "sync_floor_p50_us_by_pass": [100.0]}

    measure = "3-effect run (default settings) p50 ÷ its two syncs"
    assert _verdicts({"bound": bound([1.3, 1.4, 1.5])})[measure] == "met"
    assert _verdicts({"bound": bound([1.3, 1.51, 1.4])})[measure] == "missed"
    peers = {
        "unavailable": {},
        "failed": {},
        "tracelock": {"p50_us_by_pass": [100.0, 100.0]},
        "dbos": {"p50_us_by_pass": [3000.0, 2400.0]},
    }
    verdicts = _verdicts({"peers": peers})
    assert verdicts["vs DBOS on SQLite, p50"] == "missed"  # 24x in the second pass
    assert verdicts["vs LangGraph + SqliteSaver (sync), p50"] == "n/a"  # not measured: never met


def test_growth_exponent_tells_linear_from_quadratic() -> None:
    assert round(table.growth_exponent(1_000, 10_000, 10), 2) == 1.0
    assert round(table.growth_exponent(1_000, 100_000, 10), 2) == 2.0
    chat = {str(turns): {"total_apparent": 100 * turns**2, "total_allocated": 100 * turns} for turns in table.TURNS}
    assert _verdicts({"conversation": chat})["conversation of 10, 50, 100 turns (whole history per request)"] == "missed"


def test_passes_pool_consecutive_rounds() -> None:
    rounds = [[float(number)] for number in range(7)]
    assert group_rounds(rounds, 3) == [[0.0, 1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert group_rounds(rounds[:2], 5) == [[0.0], [1.0]]


def test_strace_summary_is_read_by_call(tmp_path: Path) -> None:
    summary = tmp_path / "strace.txt"
    summary.write_text(
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 61.02    0.003000          15       200           fdatasync\n"
        " 20.00    0.001000           1       600        12 pread64\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    0.004000           5       800        12 total\n"
    )
    assert table_measures._strace_counts(summary) == {"fdatasync": 200, "pread64": 600}


def test_every_journal_file_of_a_store_is_counted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Runtime(store, workload.POLICY, toolkits=(workload.kit,)) as runtime:
        for number in range(5):
            assert runtime.run(workload.agent, workload.task(number)).ok
    before = table_measures.store_sizes(store)
    assert before["journal_apparent"] > 0 and before["index_apparent"] > 0
    (store / "journal-0002.log").write_bytes(b"x" * 5000)  # a second live journal file
    after = table_measures.store_sizes(store)
    assert after["journal_apparent"] - before["journal_apparent"] == 5000
    assert after["live_apparent"] - before["live_apparent"] == 5000
    assert after["index_apparent"] == before["index_apparent"]
    assert after["total_apparent"] - before["total_apparent"] == 5000


def test_the_conversation_sends_the_whole_history_each_turn(tmp_path: Path) -> None:
    with Runtime(tmp_path / "store", workload.POLICY, toolkits=(Toolkit(llm=table_measures.conversation_model),)) as runtime:
        result = runtime.run(table_measures.conversation_agent, {"topic": "t", "turns": 3})
        assert result.ok, result.error
        store: Any = runtime.store
        documents = [store.get_payload(entry.payload) for entry in store.entries(result.run_id) if entry.kind == "effect"]
    requests = [document["args"]["messages"] for document in documents if document.get("kind") == "llm"]
    assert [len(messages) for messages in requests] == [1, 3, 5]
    assert requests[2][:3] == requests[1]
    answers = [message["content"] for message in requests[2] if message["role"] == "assistant"]
    assert len(set(answers)) == 2
