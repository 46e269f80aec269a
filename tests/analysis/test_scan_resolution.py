"""Name resolution, call-graph edges and individual checks, on small trees written per test.

Snippets mark each expected finding with ``# !TL-XXX-000`` on its line; every file must report
exactly its marks (``assert_marked``).
"""

from __future__ import annotations

from pathlib import Path

from scan_helpers import assert_marked, marks, rules_at, scan_tree

from tracelock.analysis import ScanConfig

AGENT = "app/agent.py"


def check(tmp_path: Path, files: dict[str, str], config: ScanConfig | None = None) -> None:
    files = {"app/__init__.py": "", **files}
    assert_marked(scan_tree(tmp_path, files, config), files)


def test_import_forms_and_aliases(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import os.path
        import time as t
        import datetime as dt
        from datetime import datetime as DT
        from random import choice as pick
        from os import environ as env
        import urllib.request as ureq

        @tool
        def work(ctx):
            a = t.monotonic_ns()  # !TL-CLOCK-001
            b = dt.datetime.utcnow()  # !TL-CLOCK-001
            c = DT.today()  # !TL-CLOCK-001
            d = pick([1, 2])  # !TL-RAND-001
            e = env["HOME"]  # !TL-ENV-001
            f = ureq.urlopen("x")  # !TL-NET-001
            g = os.path.join("a", "b")
            h = ureq.pathname2url("/x")
            return a, b, c, d, e, f, g, h
    """})


def test_relative_star_and_reexported_imports(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "from .util.clock import stamp as stamp\n",
        "app/util/__init__.py": "from .ids import *\n",
        "app/util/clock.py": """
            import time

            def stamp():
                return time.time()  # !TL-CLOCK-001
        """,
        "app/util/ids.py": """
            import uuid

            def new_id():
                return uuid.uuid4()  # !TL-UUID-001
        """,
        AGENT: """
            from app import stamp
            from .util import new_id
            from . import util

            @agent
            def run(ctx):
                return stamp(), new_id(), util.new_id()
        """,
    }
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    (finding,) = [f for f in report.findings if f.rule_id == "TL-UUID-001"]
    assert [f.function for f in finding.call_path] == ["app.agent:run", "app.util.ids:new_id"]
    assert [f.line for f in finding.call_path] == [7, 4]


def test_methods_self_attributes_properties_super_and_annotations(tmp_path: Path) -> None:
    check(tmp_path, {
        "app/clients.py": """
            import os
            import random
            import time

            class Base:
                def env(self):
                    return os.getenv("X")  # !TL-ENV-001

            class Client(Base):
                def __init__(self):
                    self.rng = random.Random()  # constructor not reached from the agent
                    self.helper = Helper()

                @property
                def now(self):
                    return time.time()  # !TL-CLOCK-001

                def env(self):
                    return super().env()

                def roll(self):
                    return self.rng.random()  # !TL-RAND-002 (made outside this function)

            class Helper:
                def pid(self):
                    return os.getpid()  # !TL-ENV-002

            def make() -> "Client":
                return Client.__new__(Client)
        """,
        AGENT: """
            from app.clients import Client, make

            @agent
            def run(ctx, client: Client | None):
                made = make()
                return client.now, made.env(), made.roll(), made.helper.pid()
        """,
    })


def test_constructor_edges_and_module_level_instances(tmp_path: Path) -> None:
    check(tmp_path, {
        "app/svc.py": """
            import socket
            import threading

            class Service:
                def __init__(self):
                    self.host = socket.gethostname()  # !TL-ENV-002

                def __call__(self):
                    return threading.Timer(1, print)  # !TL-CONC-001

            service = Service
            instance = Service()
        """,
        AGENT: """
            from app import svc

            @tool
            def run(ctx):
                svc.service()
                return svc.instance()
        """,
    })


def test_locals_and_parameters_shadow_modules(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import random
        import time

        @agent
        def run(ctx, time):
            random = ctx.rng()
            a = time.time()
            b = random.random()
            c = [time.time() for time in ctx.clocks]
            d = sorted(ctx.items, key=lambda random: random.random())
            return a, b, c, d

        @agent
        def other(ctx):
            import time as clock
            return clock.time()  # !TL-CLOCK-001
    """})


def test_nested_functions_lambdas_and_callable_references(tmp_path: Path) -> None:
    files = {AGENT: """
        import os
        import threading
        import time

        def worker():
            return os.getpid()  # !TL-ENV-002

        @agent
        def run(ctx):
            def inner():
                return time.perf_counter()  # !TL-CLOCK-001
            t = threading.Thread(target=worker)  # !TL-CONC-001
            cb = lambda: time.monotonic()  # !TL-CLOCK-001
            ctx.gather(worker, inner)
            return t, cb, time.time

        def stamp_factory():
            return ctx_default(time.time)
    """}
    report = scan_tree(tmp_path, {"app/__init__.py": "", **files})
    assert_marked(report, files)
    (pid,) = [f for f in report.findings if f.rule_id == "TL-ENV-002"]
    assert [(f.function, f.line) for f in pid.call_path] == [
        ("app.agent:run", 12), ("app.agent:worker", 6)
    ]
    (inner,) = [f for f in report.findings if f.line == 11]
    assert inner.function == "app.agent:run.<locals>.inner"


def test_callable_passed_as_argument_is_reported(tmp_path: Path) -> None:
    files = {AGENT: """
        import collections
        import random
        import socket

        @agent
        def run(ctx):
            d = collections.defaultdict(random.random)  # !TL-RAND-001
            return d, socket.socket(socket.AF_INET)  # !TL-NET-001 (the constant is no call)
    """}
    report = scan_tree(tmp_path, files)
    assert_marked(report, files)
    (rand,) = [f for f in report.findings if f.rule_id == "TL-RAND-001"]
    assert "passed as a callable" in rand.message


def test_seeded_generators_are_not_reported(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import random
        import numpy
        from random import Random

        GLOBAL = Random(7)

        @agent
        def run(ctx, seed):
            a = random.Random(seed)
            b = Random(x=ctx.random())
            c = numpy.random.default_rng(seed).random()
            d = numpy.random.RandomState(3).rand()
            e = random.Random(None)  # !TL-RAND-002 (None is no seed)
            return a.random(), b.choice([1]), c, d, GLOBAL.random(), e.random()
    """})


def test_clock_functions_with_arguments(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import asyncio
        import time

        @agent
        async def run(ctx, ts):
            a = time.localtime(ts)
            b = time.strftime("%Y", a)
            c = time.strftime("%Y")  # !TL-CLOCK-001
            d = time.gmtime()  # !TL-CLOCK-001
            await asyncio.sleep(0)
            time.sleep(0.0)
            await asyncio.sleep(0.5)  # !TL-CLOCK-002
            return a, b, c, d
    """})


def test_logging_exemption(tmp_path: Path) -> None:
    check(tmp_path, {
        "app/timing.py": """
            import os
            import time

            def elapsed(start):
                return time.perf_counter() - start  # log-only function: not reported

            def shared():
                return time.monotonic()  # !TL-CLOCK-001 (also used as a value)

            def noisy():
                return os.system("true")  # !TL-PROC-001 (effects are never exempt)
        """,
        AGENT: """
            import logging
            import time

            from app.timing import elapsed, noisy, shared

            logger = logging.getLogger(__name__)
            log = logging.getLogger("x")

            class Worker:
                def __init__(self):
                    self.audit_logger = logging.getLogger("audit")

                def go(self):
                    self.audit_logger.info("at %s", time.time())

            @agent
            def run(ctx):
                start = ctx.now()
                logger.debug("took %s", elapsed(start))
                log.info("at %s %s", time.time(), shared())
                logging.warning("pid-ish %s", noisy())
                Worker().go()
                print("at", time.time())  # !TL-CLOCK-001 (print is output, not logging)
                return shared()
        """,
    })


def test_set_iteration_heuristics(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        from typing import AbstractSet

        NAMES = {"a", "b"}

        def names() -> set[str]:
            return set(NAMES)

        @agent
        def run(ctx, given: AbstractSet[str], items: list[str]):
            for n in names():  # !TL-ORDER-001
                ctx.call(n)
            out = [*given]  # !TL-ORDER-001
            seen = set()
            found = False
            total = 0
            for n in NAMES:
                seen.add(n)
                total += 1
                if n == "a":
                    found = True
                else:
                    continue
            both = NAMES.union(given)
            ordered = sorted(both)
            pairs = dict.fromkeys(both)  # !TL-ORDER-001
            uniq = {n.lower() for n in both}
            in_order = sorted(x for x in both)
            biggest = max(len(x) for x in both)
            d = {k: 1 for k in both}  # !TL-ORDER-001
            for item in items:
                ctx.call(item)
            last = None
            for n in both - {"a"}:  # !TL-ORDER-001 (the last one seen wins)
                last = n
            return out, found, total, ordered, pairs, uniq, in_order, biggest, d, last
    """})


def test_hash_and_id(tmp_path: Path) -> None:
    files = {AGENT: """
        class Key:
            def __init__(self, parts):
                self.parts = parts

            def __hash__(self):
                return hash(self.parts)

        @agent
        def run(ctx, a, b):
            shard = hash(a) % 8  # !TL-HASH-001
            same = hash(a) == hash(b) and id(a) != id(b)
            memo = {id(a): a}
            seen = {id(b)}
            label = f"obj-{id(a)}"  # !TL-ID-001
            return shard, same, memo, seen, label, memo.get(id(b)), Key((1,))
    """}
    report = scan_tree(tmp_path, {"app/__init__.py": "", **files})
    assert_marked(report, files)
    severities = {f.rule_id: f.severity.value for f in report.findings}
    assert severities == {"TL-HASH-001": "error", "TL-ID-001": "warning"}


def test_concurrency_rules(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        POOL = ThreadPoolExecutor()

        @agent
        async def run(ctx, coros):
            with ThreadPoolExecutor(4) as pool:  # !TL-CONC-001
                pool.submit(print)
            POOL.submit(print)  # !TL-CONC-001 (pool made outside the run)
            task = asyncio.create_task(coros[0])  # !TL-CONC-002
            done, _ = await asyncio.wait(coros)  # !TL-CONC-002
            for fut in asyncio.as_completed(coros):  # !TL-CONC-002
                await fut
            return task, done, await ctx.gather(*coros)
    """})


def test_environ_writes_are_not_reads(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import os

        @tool
        def run(ctx):
            os.environ["A"] = "1"
            del os.environ["A"]
            return "B" in os.environ  # !TL-ENV-001
    """})


def test_entry_points_from_config_and_decorated_classes(tmp_path: Path) -> None:
    text = """
        import time

        def nightly():
            return time.time()  # !TL-CLOCK-001 (configured entry)

        def other():
            return time.time()  # !TL-CLOCK-001 (only with *:*)

        @tool
        class Toolbox:
            def first(self):
                return time.time()  # !TL-CLOCK-001

        @register.agent(name="x")
        def decorated():
            return time.time()  # !TL-CLOCK-001
    """
    files = {"app/__init__.py": "", "app/jobs.py": text}
    lines = [line for _, line in marks(text)]
    plain = scan_tree(tmp_path, files)
    assert [f.line for f in plain.findings] == lines[2:]
    configured = scan_tree(tmp_path, files, ScanConfig(entry_points=("app.job?:night*",)))
    assert [f.line for f in configured.findings] == [lines[0], *lines[2:]]
    assert "app.jobs:nightly" in configured.entry_points
    everything = scan_tree(tmp_path, files, ScanConfig(extra_entry_points=("*:*",)))
    assert [f.line for f in everything.findings] == lines
    custom = scan_tree(tmp_path, files, ScanConfig(decorators=("agent",)))
    assert [f.line for f in custom.findings] == lines[3:]
    missing = scan_tree(tmp_path, files, ScanConfig(extra_entry_points=("nope:*",)))
    assert missing.unmatched_entry_points == ("nope:*",)


def test_syntax_errors_are_findings_and_other_files_still_scanned(tmp_path: Path) -> None:
    report = scan_tree(tmp_path, {
        "app/__init__.py": "",
        "app/broken.py": "def f(:\n    pass\n",
        AGENT: """
            import time

            @agent
            def run(ctx):
                return time.time()
        """,
    })  # fmt: skip
    assert [(f.rule_id, f.path, f.line) for f in report.findings] == [
        ("TL-CLOCK-001", AGENT, 5), ("TL-SCAN-001", "app/broken.py", 1),
    ]  # fmt: skip
    assert report.findings[1].severity.value == "error"
    assert "syntax error" in report.findings[1].message


def test_undecodable_file_is_a_finding(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_bytes(b"x = '\xff\xfe'\n")
    report = scan_tree(tmp_path, {})
    assert [(f.rule_id, f.path) for f in report.findings] == [("TL-SCAN-001", "bad.py")]


def test_columns_are_one_based_characters(tmp_path: Path) -> None:
    report = scan_tree(tmp_path, {"agent.py": """
        import time

        @agent
        def run(ctx):
            label = "é—ü"; t = time.time()
            return label, t
    """})
    (finding,) = report.findings
    line = (tmp_path / "agent.py").read_text(encoding="utf-8").split("\n")[4]
    assert finding.column == line.index("time.time()") + 1
    assert finding.end_column == finding.column + len("time.time()")


def test_unreachable_code_and_ctx_doors_are_not_reported(tmp_path: Path) -> None:
    report = scan_tree(tmp_path, {"app/__init__.py": "", AGENT: """
        import random
        import time
        import uuid

        def helper_nobody_calls():
            return time.time(), random.random(), uuid.uuid4()

        @agent
        def run(ctx):
            return ctx.now(), ctx.random(), ctx.uuid(), ctx.sleep(1), ctx.call("t", x=1)
    """})
    assert report.findings == ()
    assert report.stats.entry_points == 1
    assert report.stats.reachable_functions == 1


def test_excluded_and_skipped_directories(tmp_path: Path) -> None:
    body = """
        import time

        @agent
        def run(ctx):
            return time.time()
    """
    report = scan_tree(tmp_path, {
        "src/agent.py": body,
        "src/generated/agent.py": body,
        ".hidden/agent.py": body,
        "venv/pyvenv.cfg": "home = /usr\n",
        "venv/lib/agent.py": body,
    }, ScanConfig(exclude=("src/generated/*",)))  # fmt: skip
    assert [f.path for f in report.findings] == ["src/agent.py"]
    assert report.stats.files == 1


def test_rules_at_helper_sees_only_one_file(tmp_path: Path) -> None:
    report = scan_tree(tmp_path, {"a.py": "import time\n@agent\ndef f(ctx):\n    time.time()\n"})
    assert rules_at(report, "a.py") == [("TL-CLOCK-001", 4)]
    assert rules_at(report, "b.py") == []


def test_pathologically_nested_code_is_reported_not_crashed(tmp_path: Path) -> None:
    def agent_with(terms: int) -> str:
        return (
            "import time\n@agent\ndef run(ctx, x):\n"
            f"    y = {' + '.join(['x'] * terms)}\n    return time.time()\n"
        )

    (tmp_path / "parse.py").write_text(agent_with(5000), encoding="utf-8")
    (tmp_path / "visit.py").write_text(agent_with(900), encoding="utf-8")
    report = scan_tree(tmp_path, {})
    assert [(f.rule_id, f.path, f.line) for f in report.findings] == [
        ("TL-SCAN-001", "parse.py", 1), ("TL-SCAN-001", "visit.py", 3),
    ]  # fmt: skip
    assert "nested too deeply" in report.findings[0].message
    assert "visit:run is nested too deeply" in report.findings[1].message


def test_overloads_property_setters_and_aliases_of_outside_instances(tmp_path: Path) -> None:
    check(tmp_path, {AGENT: """
        import os
        import random
        import time
        from typing import overload

        SHARED = random.Random()

        @overload
        def read(key: int) -> str: ...
        @overload
        def read(key: str) -> str: ...
        def read(key):
            return os.getenv(str(key))  # !TL-ENV-001

        class Box:
            @property
            def now(self):
                return time.time()  # !TL-CLOCK-001

            @now.setter
            def now(self, value):
                self._now = value

        @agent
        def run(ctx):
            rng = SHARED
            local = random.Random()  # !TL-RAND-002
            return read(1), Box().now, rng.random(), local.random()  # !TL-RAND-002
    """})
