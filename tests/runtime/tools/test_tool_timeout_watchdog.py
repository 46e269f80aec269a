"""Sync tool timeouts without a thread hand-off: with the default settings a sync tool runs on
the caller's thread, and the process's one watchdog ends it when its deadline passes, with
the same outcome and code as the hand-off did (EXECUTION_ERROR [TOOL_TIMEOUT])."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.runtime_helpers import allow, effect_of, runtime_at
from tracelock.runtime.errors import StepError
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.tools import Tool, ToolDefinitionError
from tracelock.runtime.tools.watchdog import DEADLINE_SIGNAL, WATCHDOG

TOOLS = ("spins", "sleeps", "reads", "quick", "borderline", "masked", "worker_spins", "worker_sleeps", "blocks")


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def seen() -> dict[str, Any]:
    return {}


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    yield left, right
    left.close()
    right.close()


@pytest.fixture
def runtime(
    tmp_path: Path, seen: dict[str, Any], release: threading.Event, sockets: tuple[socket.socket, socket.socket]
) -> Iterator[Runtime]:
    with runtime_at(tmp_path, allow(*TOOLS)) as runtime:

        @runtime.tool(timeout=0.05)
        def spins() -> str:
            seen["spins_thread"] = threading.get_ident()
            while not release.is_set():  # pure Python: never returns by itself
                pass
            seen["spins_finished"] = True
            return "released"

        @runtime.tool(timeout=0.05)
        def sleeps() -> str:
            time.sleep(30)
            seen["sleeps_finished"] = True
            return "woke"

        @runtime.tool(timeout=0.05)
        def reads() -> str:
            sockets[0].settimeout(30)  # a guard for a broken build; nothing is ever sent
            data = sockets[0].recv(16)
            seen["reads_finished"] = True
            return data.decode()

        @runtime.tool()
        def quick(n: int) -> int:
            seen.setdefault("quick_threads", set()).add(threading.get_ident())
            return n + 1

        @runtime.tool(timeout=0.002)
        def borderline(n: int) -> int:
            # Python work of about the deadline: some calls return first, some are ended.
            total = 0
            for i in range(n):
                total += i * i
            return total

        @runtime.tool(timeout=0.02)
        def masked() -> str:
            # Holds the deadline's signal back until the watchdog has fired, then returns:
            # the signal is handled after the call ended, when the agent unblocks it.
            assert DEADLINE_SIGNAL is not None
            signal.pthread_sigmask(signal.SIG_BLOCK, {DEADLINE_SIGNAL})
            slot = WATCHDOG.slot(signalled=True)
            while not slot.fired and not release.is_set():
                time.sleep(0.005)
            return "returned"

        @runtime.tool(timeout=0.05, timeout_mode="inline")
        def worker_spins() -> str:
            seen["worker_spins_thread"] = threading.get_ident()
            while not release.is_set():
                pass
            return "released"

        @runtime.tool(timeout=0.05, timeout_mode="inline")
        def worker_sleeps() -> str:
            time.sleep(0.3)  # off the main thread a sleep ends first; the next bytecode raises
            seen["worker_sleeps_finished"] = True
            return "woke"

        @runtime.tool(timeout=0.05)
        def blocks() -> str:
            seen["blocks_thread"] = threading.get_ident()
            release.wait(5)
            return "late"

        yield runtime


def step_code(runtime: Runtime, name: str) -> Any:
    def agent(ctx: Any, _: Any) -> Any:
        try:
            return ctx.call(name)
        except StepError as failure:
            return [failure.step_code, threading.get_ident()]

    result = runtime.run(agent)
    assert result.ok, result.error
    return result


def test_runs_on_the_main_thread() -> None:
    # The signal path below needs the tests on the interpreter's main thread.
    assert threading.current_thread() is threading.main_thread()


def test_a_pure_python_loop_past_its_deadline_is_ended_on_the_callers_thread(
    runtime: Runtime, seen: dict[str, Any], release: threading.Event
) -> None:
    result = step_code(runtime, "spins")
    code, caller = result.output
    assert code == "TOOL_TIMEOUT"
    assert seen["spins_thread"] == caller  # no hand-off
    assert "spins_finished" not in seen and not release.is_set()  # ended, not finished
    effect = effect_of(runtime, result.run_id, 0)
    assert (effect["outcome"], effect["code"], effect["timeout_ms"]) == ("EXECUTION_ERROR", "TOOL_TIMEOUT", 50)


@pytest.mark.parametrize("name", ["sleeps", "reads"])
def test_a_tool_blocked_in_a_system_call_is_ended_at_its_deadline(
    runtime: Runtime, seen: dict[str, Any], name: str
) -> None:
    result = step_code(runtime, name)
    assert result.output[0] == "TOOL_TIMEOUT"
    assert f"{name}_finished" not in seen  # the 30 s sleep / the read never completed
    effect = effect_of(runtime, result.run_id, 0)
    assert (effect["outcome"], effect["code"]) == ("EXECUTION_ERROR", "TOOL_TIMEOUT")


def test_no_thread_is_started_per_call(runtime: Runtime, seen: dict[str, Any]) -> None:
    def agent(ctx: Any, _: Any) -> Any:
        return [ctx.call("quick", n=n) for n in range(50)]

    runtime.run(agent)  # the watchdog starts with the first deadline, if it did not already
    before = {thread.ident for thread in threading.enumerate()}
    for _ in range(5):
        result = runtime.run(agent)
        assert result.output == list(range(1, 51))
    after = threading.enumerate()
    assert {thread.ident for thread in after} == before
    assert not [thread.name for thread in after if thread.name.startswith("tracelock-tool")]
    assert [thread.name for thread in after].count("tracelock-watchdog") == 1
    assert seen["quick_threads"] == {threading.get_ident()}


def test_a_deadline_never_reaches_a_later_step(runtime: Runtime) -> None:
    def agent(ctx: Any, _: Any) -> Any:
        codes = []
        for n in range(200):
            try:
                ctx.call("borderline", n=1_000 * n)
                codes.append("SUCCESS")
            except StepError as failure:
                codes.append(failure.step_code)
            # Whatever happened to the call, the next step and the Python between run clean.
            assert ctx.call("quick", n=n) == n + 1
        return codes

    result = runtime.run(agent)
    assert result.ok, result.error
    assert set(result.output) <= {"SUCCESS", "TOOL_TIMEOUT"}
    assert "TOOL_TIMEOUT" in result.output  # the largest calls (200k loop turns) take far longer than 2 ms


def test_a_signal_handled_after_the_call_ended_raises_nothing(runtime: Runtime) -> None:
    assert DEADLINE_SIGNAL is not None

    def agent(ctx: Any, _: Any) -> Any:
        try:
            ctx.call("masked")
            first = "SUCCESS"
        except StepError as failure:
            first = failure.step_code
        # The deadline's signal is still pending: handled now, between steps.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {DEADLINE_SIGNAL})
        return [first, ctx.call("quick", n=1)]

    result = runtime.run(agent)
    assert result.ok, result.error
    # The deadline fired before the tool's result was taken: a timeout, as with the hand-off.
    assert result.output == ["TOOL_TIMEOUT", 2]


def run_on_worker(runtime: Runtime, name: str) -> list[Any]:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(step_code(runtime, name)))
    worker.start()
    worker.join(20)
    assert not worker.is_alive()
    return list(out[0].output)


def test_inline_mode_ends_python_code_on_another_thread(runtime: Runtime, seen: dict[str, Any]) -> None:
    code, caller = run_on_worker(runtime, "worker_spins")
    assert code == "TOOL_TIMEOUT"
    assert seen["worker_spins_thread"] == caller


def test_inline_mode_on_another_thread_ends_a_blocking_call_when_it_returns(
    runtime: Runtime, seen: dict[str, Any]
) -> None:
    code, _ = run_on_worker(runtime, "worker_sleeps")
    assert code == "TOOL_TIMEOUT"
    assert "worker_sleeps_finished" not in seen  # raised right after the sleep returned


def test_auto_mode_off_the_main_thread_hands_off_as_before(
    runtime: Runtime, seen: dict[str, Any], release: threading.Event
) -> None:
    code, caller = run_on_worker(runtime, "blocks")
    assert code == "TOOL_TIMEOUT"
    assert not release.is_set()  # the caller got its answer while the tool still waited
    assert seen["blocks_thread"] != caller


def test_an_unknown_timeout_mode_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        Tool(name="t", func=lambda: None, side_effect="read_only", schema={"type": "object"}, timeout_mode="fork")  # type: ignore[arg-type]
    assert raised.value.code == "TOOL_DEFINITION_INVALID"


def test_a_replaced_signal_handler_falls_back_to_an_asynchronous_exception(
    runtime: Runtime, seen: dict[str, Any], release: threading.Event
) -> None:
    assert DEADLINE_SIGNAL is not None
    assert runtime.run(lambda ctx, _: ctx.call("quick", n=1)).output == 2  # installs the handler
    ours = signal.getsignal(DEADLINE_SIGNAL)
    received: list[int] = []
    signal.signal(DEADLINE_SIGNAL, lambda signum, frame: received.append(signum))
    try:
        code, caller = step_code(runtime, "spins").output
    finally:
        signal.signal(DEADLINE_SIGNAL, ours)
    assert code == "TOOL_TIMEOUT"
    assert seen["spins_thread"] == caller and not release.is_set()
    assert received == []  # the watchdog saw the handler was not its own and sent no signal
