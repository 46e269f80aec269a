"""Strict mode's scope: what it lets through (logging, imports, the catalogue's pure helpers),
that every guarded target still raises, and that the error names what the agent wrote."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import gc
import importlib
import inspect
import io
import logging
import os
import random
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tracelock import Runtime
from tracelock.analysis.rules import RULES, Rule, Target, TargetKind, match
from tracelock.runtime.strict import guard as strict

# Bound to the unguarded function, as ``from uuid import uuid4`` at import time does.
uuid4 = inspect.unwrap(uuid.uuid4)

POLICY = {"version": 1}


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    handle = Runtime(tmp_path / "store", POLICY, strict=True)
    yield handle
    handle.close()


def refusal(runtime: Runtime, call: Callable[[], Any]) -> strict.NondeterminismError:
    """Run ``call`` as an agent and return the strict-mode error it raised."""
    seen: list[strict.NondeterminismError] = []

    def agent(ctx: Any, _: Any) -> None:
        try:
            call()
        except strict.NondeterminismError as exc:
            seen.append(exc)
            raise

    result = runtime.run(agent, None)
    assert result.code == "NONDETERMINISM_DETECTED", result.error
    assert len(seen) == 1
    assert result.error == seen[0].message
    return seen[0]


def _resolve(name: str) -> Any:
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part)
        return value
    pytest.fail(f"{name}: its module is not installed (it is a dev dependency in pyproject.toml)")


# ---------------------------------------------------------------- logging (issue 17, item 7)


def test_logging_works_inside_a_strict_agent(runtime: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    # asctime and process make the record read the clock, format local time and the pid.
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(threadName)s %(message)s"))
    log = logging.getLogger("tests.strict.agent")
    log.addHandler(handler)
    caplog.set_level(logging.INFO, logger="tests.strict.agent")

    def agent(ctx: Any, order: str) -> str:
        log.info("looking up %s", order)
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("handled")
        return order

    try:
        result = runtime.run(agent, "A-1")
    finally:
        log.removeHandler(handler)
    assert result.ok, result.error
    assert [r.getMessage() for r in caplog.records] == ["looking up A-1", "handled"]
    assert "looking up A-1" in stream.getvalue() and str(os.getpid()) in stream.getvalue()


class Service:
    def __init__(self) -> None:
        self.log = logging.getLogger("tests.strict.service")

    def handle(self) -> str:
        self.log.info("handled at %s by %s", time.time(), os.getpid())
        return "done"


def stamp() -> str:
    return datetime.date.today().isoformat()


def test_a_log_line_s_arguments_may_use_the_log_exempt_rules(runtime: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("tests.strict.agent")
    caplog.set_level(logging.INFO)

    def agent(ctx: Any, _: Any) -> str:
        log.info("at %s, id %s, home %s", time.time(), uuid.uuid4(), os.environ.get("HOME"))
        logging.info("started %s", str(stamp()))
        log.log(logging.INFO, f"pid {os.getpid()}")
        return Service().handle()

    result = runtime.run(agent, None)
    assert result.ok, result.error
    assert len(caplog.records) == 4


@pytest.mark.parametrize(
    ("rule", "call"),
    [
        # Not log-exempt: a random draw spent on a log line still moves the global generator.
        ("TL-RAND-001", lambda: logging.getLogger("tests.strict.agent").info("%s", random.random())),
        # The value reaches the run, not only the log line.
        ("TL-CLOCK-001", lambda: [time.time(), logging.getLogger("tests.strict.agent").info("x")]),
        # A receiver that is not a logger.
        ("TL-CLOCK-001", lambda: io.StringIO().write(f"{time.time()}")),
    ],
    ids=["not-exempt-rule", "value-outside-the-log-call", "not-a-logger"],
)
def test_values_that_do_not_only_reach_a_log_line_are_judged(runtime: Runtime, rule: str, call: Callable[[], Any]) -> None:
    assert refusal(runtime, call).rule_id == rule


# ---------------------------------------------------------------- imports (issue 17, item 9)

PROBE = '''
import os, random, time, uuid

HOME = os.environ.get("HOME")
PID = os.getpid()
STARTED = time.time()
TOKEN = uuid.uuid4().hex
SHUFFLED = random.sample(range(10), 10)


def later():
    return time.time()
'''


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module that reads the environment, the clock and entropy at import, never imported yet."""
    name = f"tl_strict_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / f"{name}.py").write_text(PROBE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    assert name not in sys.modules
    yield name
    sys.modules.pop(name, None)


def test_a_first_import_inside_a_strict_agent_runs_as_usual(runtime: Runtime, probe: str) -> None:
    def agent(ctx: Any, _: Any) -> dict[str, Any]:
        module = importlib.import_module(probe)
        return {"home": module.HOME, "pid": module.PID, "token": len(module.TOKEN)}

    result = runtime.run(agent, None)
    assert result.ok, result.error
    assert result.output == {"home": os.environ.get("HOME"), "pid": os.getpid(), "token": 32}


def test_an_import_statement_inside_a_strict_agent_runs_as_usual(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "tl_strict_probe.py").write_text(PROBE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    monkeypatch.delitem(sys.modules, "tl_strict_probe", raising=False)

    def agent(ctx: Any, _: Any) -> int:
        import tl_strict_probe

        return len(tl_strict_probe.SHUFFLED)

    try:
        result = runtime.run(agent, None)
    finally:
        sys.modules.pop("tl_strict_probe", None)
    assert result.ok, result.error
    assert result.output == 10


def test_the_imported_module_s_functions_are_judged_when_the_agent_calls_them(runtime: Runtime, probe: str) -> None:
    error = refusal(runtime, lambda: importlib.import_module(probe).later())
    assert error.rule_id == "TL-CLOCK-001" and "time.time()" in error.message


# ------------------------------------------------------ catalogue exclusions (issue 17, item 8)

EXCLUDED = sorted(name for rule in RULES for name in rule.excludes)
SAMPLE_ARGS: dict[str, tuple[Any, ...]] = {
    "urllib.request.pathname2url": ("/tmp/a b",),
    "urllib.request.url2pathname": ("/tmp/a%20b",),
    "urllib.request.Request": ("http://example.com/",),
    "requests.Request": ("GET", "http://example.com/"),
    "httpx.URL": ("http://example.com/",),
    "httpx.Timeout": (5.0,),
    "httpx.Request": ("GET", "http://example.com/"),
    "socket.inet_aton": ("127.0.0.1",),
    "socket.inet_ntoa": (b"\x7f\x00\x00\x01",),
    "socket.htons": (1,),
    "socket.ntohs": (1,),
    "socket.htonl": (1,),
    "socket.ntohl": (1,),
    "subprocess.list2cmdline": (["a", "b c"],),
}


@pytest.mark.parametrize("name", EXCLUDED)
def test_every_catalogue_exclusion_is_callable_inside_a_strict_agent(runtime: Runtime, name: str) -> None:
    helper = _resolve(name)

    def agent(ctx: Any, _: Any) -> str:
        try:
            helper(*SAMPLE_ARGS.get(name, ()))
        except strict.NondeterminismError:
            raise
        except Exception as exc:  # the helper's own complaint about arguments: not strict mode's
            return type(exc).__name__
        return "called"

    result = runtime.run(agent, None)
    assert result.ok, result.error
    if name in SAMPLE_ARGS:
        assert result.output == "called"


# ------------------------------------------------------------ every guarded target still raises

# Enough arguments that a target reached without its guard fails on them instead of acting.
BAD_ARGS = tuple(object() for _ in range(5))


def _import_targets(rule: Rule) -> None:
    """Import the modules ``rule`` names (the third-party ones are dev dependencies), so that
    the next strict run guards them."""
    for target in rule.targets:
        parts = target.name.split(".")
        for cut in range(len(parts), 0, -1):
            with contextlib.suppress(ImportError):
                importlib.import_module(".".join(parts[:cut]))
                break


def _guarded(rule: Rule) -> list[tuple[str, Target]]:
    """The catalogue targets of ``rule`` that strict mode guards in this process."""
    unguarded = strict.unguarded_targets()
    found: list[tuple[str, Target]] = []
    for target in rule.targets:
        if target.name in unguarded:
            continue
        if target.kind is not TargetKind.MODULE:
            parts = target.name.split(".")
            if any(".".join(parts[:cut]) in sys.modules for cut in range(1, len(parts))):
                found.append((target.name, target))
            continue
        module = sys.modules.get(target.name)
        if module is None:
            continue
        for attribute in getattr(module, "__all__", ()):
            name = f"{target.name}.{attribute}"
            if name in unguarded:
                continue
            value = getattr(module, attribute, None)
            hit = match(name)
            if hit is None or hit[0] is not rule or not callable(value):
                continue
            if inspect.isclass(value) and issubclass(value, (BaseException, enum.Enum)):
                continue  # errors and enumerations of constants are not effects
            found.append((name, target))
    return found


def _defined_name(value: Any) -> str:
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"


# multiprocessing.Pool's __del__ complains about the instance whose __init__ was refused.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("rule", [r for r in RULES if r.patchable and r.targets], ids=lambda r: r.id)
def test_every_guarded_target_still_raises(runtime: Runtime, rule: Rule) -> None:
    _import_targets(rule)
    runtime.run(lambda ctx, _: None, None)  # installs the guards of what was just imported
    targets = _guarded(rule)
    if not targets:
        pytest.fail(f"none of {rule.id}'s modules is installed (they are dev dependencies in pyproject.toml)")
    missed: list[str] = []

    def agent(ctx: Any, _: Any) -> None:
        for name, target in targets:
            value = _resolve(name)
            # One object may be listed under two names (secrets.SystemRandom is
            # random.SystemRandom); its guard reports the name it is defined under. A subclass
            # of a module target's class may report its guarded base.
            accepted = {name, _defined_name(value)}
            try:
                if target.kind is TargetKind.READ:
                    iter(value)
                elif target.safe_with_args:
                    value()
                else:
                    value(*BAD_ARGS)
            except strict.NondeterminismError as exc:
                reported = exc.details["target"]
                hit = match(reported)
                fits = reported in accepted or (target.kind is TargetKind.MODULE and hit is not None and hit[0] is rule)
                if not fits or hit is None or exc.rule_id != hit[0].id:
                    missed.append(f"{name}: {exc.message} (target {reported})")
            except Exception as exc:
                missed.append(f"{name}: {type(exc).__name__} (not guarded)")
            else:
                missed.append(f"{name}: no error")

    assert runtime.run(agent, None).ok
    assert missed == []


# -------------------------------------------------------- what the agent wrote (issue 17, item 10)


def test_date_today_is_reported_as_what_the_agent_wrote(runtime: Runtime) -> None:
    from datetime import date

    error = refusal(runtime, lambda: date.today())
    assert error.rule_id == "TL-CLOCK-001" and error.door == "ctx.now()"
    assert "date.today() reads the real clock" in error.message
    assert "time.time" not in error.message


def test_a_qualified_date_today_keeps_its_qualification(runtime: Runtime) -> None:
    error = refusal(runtime, lambda: datetime.date.today())
    assert "[TL-CLOCK-001] datetime.date.today() reads the real clock" in error.message


def test_a_from_imported_uuid4_is_reported_as_uuid4(runtime: Runtime) -> None:
    error = refusal(runtime, lambda: uuid4())
    assert error.rule_id == "TL-UUID-001" and error.door == "ctx.uuid()"
    assert "[TL-UUID-001] uuid4() makes a fresh id on every run" in error.message
    assert "urandom" not in error.message
    assert error.details["call"] == "uuid.uuid4"


def test_a_helper_outside_the_catalogue_is_named_with_what_it_reached(runtime: Runtime) -> None:
    error = refusal(runtime, lambda: os.get_exec_path())
    assert error.rule_id == "TL-ENV-001"
    assert "os.get_exec_path() (via os.environ) reads the process environment" in error.message


def test_the_agent_s_own_helper_is_where_the_call_is_named(runtime: Runtime) -> None:
    def stamp() -> float:
        clock = time.monotonic
        return clock()

    error = refusal(runtime, stamp)
    assert "[TL-CLOCK-001] clock() reads the real clock" in error.message
    assert error.details["target"] == "time.monotonic"


def test_a_refused_construction_is_freed_at_once(runtime: Runtime) -> None:
    """The refusal leaves no reference cycle behind: the half-made instance goes now, not at
    some later garbage collection (where its __del__ would run in unrelated code)."""
    freed: list[str] = []

    class Worker(threading.Thread):
        def __del__(self) -> None:
            freed.append("worker")

    def agent(ctx: Any, _: Any) -> int:
        with contextlib.suppress(strict.NondeterminismError):
            Worker(*BAD_ARGS)
        return len(freed)

    gc.disable()
    try:
        result = runtime.run(agent, None)
    finally:
        gc.enable()
    assert result.ok and result.output == 1


@pytest.mark.parametrize(
    ("body", "named", "rule"),
    [
        ("uuid4()", "uuid.uuid4()", "TL-UUID-001"),
        ("time.time()", "time.time()", "TL-CLOCK-001"),
        ("os.get_exec_path()", "os.environ", "TL-ENV-001"),
    ],
)
def test_without_source_the_qualified_name_is_reported(runtime: Runtime, body: str, named: str, rule: str) -> None:
    namespace: dict[str, Any] = {"uuid4": uuid4, "time": time, "os": os}
    exec(compile(f"def call():\n    return {body}\n", "<agent>", "exec"), namespace)
    error = refusal(runtime, namespace["call"])
    assert error.rule_id == rule
    assert f"[{rule}] {named} " in error.message


def test_agent_code_called_back_from_an_allowed_guarded_call_is_judged(runtime: Runtime) -> None:
    class Seed(str):
        def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
            return str(time.time()).encode()

    # random.Random(seed) is allowed; it encodes a str seed, which runs the agent's encode.
    error = refusal(runtime, lambda: random.Random(Seed("s")))
    assert error.rule_id == "TL-CLOCK-001" and "time.time()" in error.message



def test_a_callback_of_the_agent_is_judged_even_in_a_run_started_by_an_import(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A callback the agent schedules runs on the event loop, off the agent's own stack; the
    walk from it stops at the runtime, never reaching the import that started the run."""

    async def agent(ctx: Any, _: Any) -> float:
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        def later() -> None:
            try:
                done.set_result(time.time())
            except strict.NondeterminismError as exc:
                done.set_exception(exc)

        asyncio.get_running_loop().call_soon(later)
        return await done

    monkeypatch.setitem(sys.modules, "tl_strict_hook", types.SimpleNamespace(start=lambda: runtime.run(agent, None)))
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "tl_strict_starts_a_run.py").write_text(
        "import tl_strict_hook\n\nRESULT = tl_strict_hook.start()\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    monkeypatch.delitem(sys.modules, "tl_strict_starts_a_run", raising=False)
    try:
        result = importlib.import_module("tl_strict_starts_a_run").RESULT
    finally:
        sys.modules.pop("tl_strict_starts_a_run", None)
    assert result.code == "NONDETERMINISM_DETECTED" and "TL-CLOCK-001" in (result.error or "")


# ------------------------------------------------- a guarded method keeps its kind (classmethod)


def test_a_guarded_classmethod_still_works_on_an_instance_outside_agent_code(runtime: Runtime) -> None:
    runtime.run(lambda ctx, _: None, None)  # strict mode's guards are installed now
    assert getattr(Path.cwd, "__tracelock_guard__", None) is not None
    # Called on an instance, a classmethod wrapped as a plain function got the instance as an
    # argument (TypeError) in every later caller of the process, tracelock's own CLI included.
    assert Path("somewhere").cwd() == Path.cwd() == Path(os.getcwd())
    error = refusal(runtime, lambda: Path("somewhere").cwd())
    assert error.rule_id == "TL-ENV-002"


# ------------------------------------------------- a library allowed to read the environment

LIBRARY = '''
import os


def has_home():
    return "HOME" in os.environ
'''


def test_an_allowed_library_may_test_membership_in_the_environment(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``key in os.environ`` inside a library allowed TL-ENV- reads ``self[key]`` within the
    guarded membership test: that inner read is part of the allowed call, not a new one by
    the agent (LangChain does this on every graph invocation). The agent's own test is still
    refused."""
    name = f"tl_env_library_{tmp_path.name.replace('-', '_')}"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / f"{name}.py").write_text(LIBRARY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    library = importlib.import_module(name)
    strict.allow_library(name, ("TL-ENV-",))

    def agent(ctx: Any, _: Any) -> bool:
        return bool(library.has_home())

    result = runtime.run(agent, None)
    assert result.ok, result.error
    assert result.output == ("HOME" in os.environ)
    assert refusal(runtime, lambda: "HOME" in os.environ).rule_id == "TL-ENV-001"
