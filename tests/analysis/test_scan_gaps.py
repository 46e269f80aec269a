"""Gaps of the scan closed by issue 17: indirect calls, file reads, dynamic imports, decorator
wrappers, import-time values, registration without decorators, and one finding per call."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scan_helpers import assert_marked, marks, rules_at, scan_tree

from tracelock.analysis import ScanConfig
from tracelock.analysis.config import ScanConfigError, load_config, parse_config

REGISTRY = """
class Runtime:
    def agent(self, fn):
        return fn

    def tool(self, name):
        def register(fn):
            return fn

        return register


rt = Runtime()
"""


def test_module_level_lambda_and_partial_called_by_an_agent(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/registry.py": REGISTRY,
        "app/clocks.py": """
            import functools
            import random
            import time

            now = lambda: time.time()  # !TL-CLOCK-001
            never_called = lambda: time.time()
            tick = functools.partial(time.monotonic)  # !TL-CLOCK-001
            seeded = functools.partial(random.Random, 7)
            unseeded = functools.partial(random.Random)  # !TL-RAND-002


            def _fmt(pattern):
                return time.strftime(pattern)  # !TL-CLOCK-001


            year = functools.partial(_fmt, "%Y")
            pure = functools.partial(len)
        """,
        "app/agents.py": """
            from app import clocks
            from app.clocks import now, tick
            from app.registry import rt


            @rt.agent
            def agent(ctx):
                return [now(), tick(), clocks.seeded(), clocks.unseeded(), clocks.year(),
                        clocks.pure("x")]
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    (lam,) = [f for f in report.findings if f.function == "app.clocks:<lambda>"]
    assert [frame.function for frame in lam.call_path] == ["app.agents:agent", "app.clocks:<lambda>"]
    (fmt,) = [f for f in report.findings if f.function == "app.clocks:_fmt"]
    assert [frame.function for frame in fmt.call_path] == ["app.agents:agent", "app.clocks:_fmt"]


FILES_APP = {
    "app/__init__.py": "",
    "app/registry.py": REGISTRY,
    "app/agents.py": """
        import io
        from pathlib import Path

        from app.registry import rt


        def load_prompt(name: str) -> str:
            with open(name) as handle:  # !TL-FS-001
                return handle.read()


        @rt.agent
        def agent(ctx, name: str, base: Path):
            text = open(name).read()  # !TL-FS-001
            raw = Path(name).read_bytes()  # !TL-FS-001
            nested = (base / "conf" / name).read_text()  # !TL-FS-001
            binary = open(name, "rb").read()  # !TL-FS-001
            both = io.open(name, mode="r+")  # !TL-FS-001
            with base.open() as handle:  # !TL-FS-001
                first = handle.readline()
            with open(name, "w") as out:
                out.write(text)
            with open(name, mode="ab") as log:
                log.write(raw)
            Path(name).write_text(text)
            exists = Path(name).exists()
            via_sandbox = ctx.call("fs.read", path=name)
            return [text, raw, nested, binary, both, first, exists, via_sandbox,
                    load_prompt(name)]


        @rt.tool("fetch")
        def fetch(path: str) -> str:
            return Path(path).read_text() + load_prompt(path)
    """,
}


def test_file_reads_in_agent_code_not_in_tools(tmp_path: Path) -> None:
    report = scan_tree(tmp_path, FILES_APP)
    assert_marked(report, FILES_APP)
    assert {f.rule_id for f in report.findings} == {"TL-FS-001"}
    # A helper both reach: reported once, with the path from the agent, not the tool.
    (helper,) = [f for f in report.findings if f.function == "app.agents:load_prompt"]
    assert [frame.function for frame in helper.call_path] == [
        "app.agents:agent", "app.agents:load_prompt"
    ]
    assert 'ctx.call("fs.read"' in helper.message


def test_tool_code_is_told_by_configuration(tmp_path: Path) -> None:
    files = {
        "svc/__init__.py": "",
        "svc/io.py": """
            import time
            from pathlib import Path


            def read_config(path):
                return Path(path).read_text()  # !TL-FS-001


            def load_state(path):
                return Path(path).read_text(), time.time()  # !TL-CLOCK-001


            def helper(path):
                return Path(path).read_text()  # !TL-FS-001
        """,
        "svc/handlers.py": """
            from svc.io import helper


            @kit.step
            def step(ctx, path):
                return helper(path)


            @kit.activity
            def activity(path):
                return helper(path)
        """,
    }
    config = ScanConfig(
        entry_points=("svc.io:read_config",),
        tool_entry_points=("svc.io:load_state", "svc.io:read_config"),
        decorators=("step", "activity"),
        tool_decorators=("activity",),
    )
    report = scan_tree(tmp_path, files, config)
    assert_marked(report, files)
    assert report.stats.entry_points == 4
    (helper,) = [f for f in report.findings if f.function == "svc.io:helper"]
    assert helper.entry_point == "svc.handlers:step"


def test_tool_settings_in_the_configuration_file() -> None:
    config = parse_config({"scan": {
        "entry_points": ["a:b"], "tool_entry_points": ["app.tools.*:*"],
        "tool_decorators": ["tool", "activity"],
    }})  # fmt: skip
    assert config.tool_entry_points == ("app.tools.*:*",)
    assert config.tool_decorators == ("tool", "activity")
    assert parse_config({"scan": {}}).tool_decorators == ("tool",)
    for bad in ({"tool_entry_points": ["no-colon"]}, {"tool_decorators": ["not ok"]},
                {"tool_entry_points": "a:b"}):
        with pytest.raises(ScanConfigError):
            parse_config({"scan": bad})


def test_unmatched_tool_pattern_is_reported(tmp_path: Path) -> None:
    (tmp_path / "scan.toml").write_text(
        '[scan]\ntool_entry_points = ["app.nothing:*"]\n', encoding="utf-8"
    )
    files = {"app/__init__.py": "", "app/x.py": "def f():\n    return 1\n"}
    report = scan_tree(tmp_path, files, load_config(tmp_path / "scan.toml"))
    assert report.unmatched_entry_points == ("app.nothing:*",)
    assert [f.rule_id for f in report.findings] == ["TL-CONF-001"]


def test_dynamic_imports_with_a_literal_name(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/registry.py": REGISTRY,
        "app/agents.py": """
            import importlib

            from app.registry import rt


            @rt.agent
            def agent(ctx, name):
                draw = __import__("random").random()  # !TL-RAND-001
                clock = importlib.import_module("time")
                stamp = clock.time()  # !TL-CLOCK-001
                pid = __import__("os.path").getpid()  # !TL-ENV-002
                joined = __import__("os.path", None, None, ["join"]).join("a", "b")
                plugin = importlib.import_module(name).random()
                local = importlib.import_module(".random", "app").random()
                data = __import__("json").dumps({})
                return [draw, stamp, pid, joined, plugin, local, data]
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)


def test_decorator_wrapper_around_an_agent(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/registry.py": REGISTRY,
        "app/decorators.py": """
            import functools
            import time

            CALLS = []


            def timed(fn):
                CALLS.append(time.time())

                @functools.wraps(fn)
                def wrapper(*args, **kwargs):
                    started = time.perf_counter()  # !TL-CLOCK-001
                    return fn(*args, **kwargs), started

                return wrapper


            def retry(times):
                CALLS.append(time.time())

                def decorate(fn):
                    CALLS.append(time.monotonic())

                    def again(*args):
                        time.sleep(1)  # !TL-CLOCK-002
                        return fn(*args)

                    return again

                return decorate


            def marker(fn):
                CALLS.append(time.time())
                return fn
        """,
        "app/agents.py": """
            from app.decorators import marker, retry, timed
            from app.registry import rt


            @rt.agent
            @timed
            @retry(3)
            @marker
            def agent(ctx):
                return ctx.now()
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    (clock,) = [f for f in report.findings if f.rule_id == "TL-CLOCK-001"]
    assert [frame.function for frame in clock.call_path] == [
        "app.agents:agent", "app.decorators:timed.<locals>.wrapper"
    ]
    assert clock.call_path[0].line == 6


def test_default_argument_evaluated_at_import(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/registry.py": REGISTRY,
        "app/agents.py": """
            import time
            import uuid

            from app.registry import rt


            def helper(stamp=uuid.uuid4()):  # !TL-UUID-001
                return stamp


            def unreached(started=time.time()):
                return started


            class Planner:
                def plan(self, at=time.monotonic(), clock=time.time, limit=len("abc")):  # !TL-CLOCK-001
                    return at, clock, limit


            @rt.agent
            def agent(ctx, started=time.time(), *, late=time.time_ns()):  # !TL-CLOCK-001, TL-CLOCK-001
                def inner(when=time.perf_counter()):  # !TL-CLOCK-001
                    return when

                return [started, late, helper(), Planner().plan(), inner()]
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    helper = next(f for f in report.findings if f.function == "app.agents:helper")
    assert "in a default argument" in helper.message


def test_module_level_values_computed_from_entropy(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/registry.py": REGISTRY,
        "app/state.py": """
            import os
            import random
            import time
            import uuid

            import requests

            SESSION = str(uuid.uuid4())  # !TL-UUID-001
            BOOT = time.time()  # !TL-CLOCK-001
            LATER = BOOT + 1
            UNUSED = time.time()
            NAMES = list({"a", "b"})  # !TL-ORDER-001
            FIXED = "v1"
            RNG = random.Random()
            CLIENT = requests.Session()
            HOST = os.environ.get("HOST")  # !TL-ENV-001
        """,
        "app/agents.py": """
            from app import state
            from app.registry import rt
            from app.state import SESSION


            @rt.agent
            def agent(ctx):
                draw = state.RNG.random()  # !TL-RAND-002
                page = state.CLIENT.get("u")  # !TL-NET-001
                return [SESSION, state.LATER, state.NAMES, state.FIXED, state.HOST, draw, page]
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    boot = next(f for f in report.findings if f.path == "app/state.py" and f.line == 9)
    assert [frame.function for frame in boot.call_path] == [
        "app.agents:agent", "app.state:<module>.LATER", "app.state:<module>.BOOT"
    ]
    assert report.stats.reachable_functions == 1


def test_registration_without_decorator_syntax(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/kit.py": """
            class Toolkit:
                def agent(self, name):
                    def register(fn):
                        return fn

                    return register

                def tool(self, name):
                    def register(fn):
                        return fn

                    return register


            kit = Toolkit()
        """,
        "app/handlers.py": """
            import time
            from pathlib import Path

            from app.kit import kit


            def handle(ctx):
                return time.time()  # !TL-CLOCK-001


            def lookup(path):
                return Path(path).read_text(), time.time()  # !TL-CLOCK-001


            def helper_only():
                return time.time()


            def direct(ctx):
                return time.monotonic()  # !TL-CLOCK-001


            kit.agent("handle")(handle)
            registered = kit.tool("lookup")(lookup)
            kit.agent(direct)
            kit.agent("nothing")
            TABLE = {"helper": helper_only}
            print(helper_only)
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    assert report.entry_points == (
        "app.handlers:handle", "app.handlers:lookup", "app.handlers:direct"
    )


def test_one_call_one_finding(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/registry.py": REGISTRY,
        "app/agents.py": """
            import socket
            import subprocess
            import urllib.request

            import requests

            from app.registry import rt


            class Client:
                def __init__(self):
                    self.session = requests.Session()  # !TL-NET-001

                def get(self, url):
                    return self.session.get(url).json()  # !TL-NET-001


            def parse(resp: requests.Response):
                return resp.status_code


            @rt.agent
            def agent(ctx, url):
                out = subprocess.run(["ls"], capture_output=True)  # !TL-PROC-001
                listing = out.stdout.decode().splitlines()
                resp = requests.get(url)  # !TL-NET-001
                data = resp.json()
                text = resp.text.strip()
                body = requests.get(url).json()  # !TL-NET-001
                page = urllib.request.urlopen(url).read()  # !TL-NET-001
                conn = socket.create_connection(("h", 1))  # !TL-NET-001
                conn.sendall(b"x")
                proc = subprocess.Popen(["ls"])  # !TL-PROC-001
                proc.wait()
                return [listing, data, text, body, page, Client().get(url), parse(resp)]
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)


_METHODS = ("decode", "strip", "splitlines", "json", "read", "lower", "encode")
_ATTRS = ("stdout", "stderr", "text", "content", "returncode", "headers")


@settings(max_examples=25, deadline=None)
@given(
    call=st.sampled_from([
        "subprocess.run(['ls'], capture_output=True)", "subprocess.check_output(['ls'])",
        "requests.get(url)", "requests.post(url, json={})", "httpx.get(url)",
        "urllib.request.urlopen(url)",
    ]),
    chain=st.lists(
        st.one_of(st.sampled_from(_METHODS).map(lambda m: f".{m}()"),
                  st.sampled_from(_ATTRS).map(lambda a: f".{a}")),
        min_size=1, max_size=4,
    ),
    bind=st.booleans(),
)
def test_methods_on_a_result_are_never_a_second_finding(
    call: str, chain: list[str], bind: bool
) -> None:
    uses = "".join(chain)
    body = (f"    out = {call}  # !X\n    return out{uses}\n" if bind
            else f"    return {call}{uses}  # !X\n")
    rule = "TL-PROC-001" if call.startswith("subprocess") else "TL-NET-001"
    text = (
        "import subprocess\nimport urllib.request\n\nimport httpx\nimport requests\n\n\n"
        "@agent\ndef run(ctx, url):\n" + body.replace("!X", f"!{rule}")
    )
    with tempfile.TemporaryDirectory() as tmp:
        report = scan_tree(Path(tmp), {"mod.py": text})
    assert rules_at(report, "mod.py") == marks(text)
