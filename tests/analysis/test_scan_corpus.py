"""The scan over the agent corpus reports exactly the planted findings, with their call paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from scan_helpers import CORPUS, expected, found

from tracelock.analysis import Finding, ScanConfig, ScanReport, scan_paths, to_json


@pytest.fixture(scope="module")
def report() -> ScanReport:
    return scan_paths([CORPUS], base=CORPUS)


def line_of(path: str, text: str) -> int:
    """The line of ``path`` (in the corpus) holding ``text``, which must be unique."""
    lines = (CORPUS / path).read_text(encoding="utf-8").split("\n")
    hits = [n for n, line in enumerate(lines, start=1) if text in line]
    assert len(hits) == 1, (path, text, hits)
    return hits[0]


def at(report: ScanReport, path: str, text: str, rule: str | None = None) -> Finding:
    line = line_of(path, text)
    hits = [f for f in report.findings if f.path == path and f.line == line
            and (rule is None or f.rule_id == rule)]  # fmt: skip
    assert len(hits) == 1, hits
    return hits[0]


def path_of(finding: Finding) -> list[tuple[str, str, int]]:
    return [(f.function, f.path, f.line) for f in finding.call_path]


def test_exactly_the_planted_findings(report: ScanReport) -> None:
    planted = expected()
    assert len(planted) >= 35
    assert found(report) == planted


def test_every_rule_of_the_issue_is_planted() -> None:
    rules = {rule for rule, _, _ in expected()}
    assert rules >= {
        "TL-RAND-001", "TL-RAND-002", "TL-RAND-003", "TL-RAND-004", "TL-UUID-001",
        "TL-CLOCK-001", "TL-CLOCK-002", "TL-ENV-001", "TL-ENV-002", "TL-NET-001",
        "TL-PROC-001", "TL-ORDER-001", "TL-HASH-001", "TL-ID-001", "TL-CONC-001",
        "TL-CONC-002",
    }  # fmt: skip


def test_direct_finding_in_an_agent(report: ScanReport) -> None:
    finding = at(report, "agentpkg/agents.py", "started = time.time()")
    assert finding.rule_id == "TL-CLOCK-001"
    assert finding.function == "agentpkg.agents:planner"
    assert path_of(finding) == [("agentpkg.agents:planner", "agentpkg/agents.py", finding.line)]
    assert "ctx.now()" in finding.message
    assert finding.column == 15


def test_helper_in_another_module_through_aliases(report: ScanReport) -> None:
    call = line_of("agentpkg/agents.py", "helpers.describe(topic)")
    env = at(report, "agentpkg/helpers.py", 'environ.get("LANG"', "TL-ENV-001")
    assert path_of(env) == [
        ("agentpkg.agents:planner", "agentpkg/agents.py", call),
        ("agentpkg.helpers:describe", "agentpkg/helpers.py", env.line),
    ]
    rnd = at(report, "agentpkg/helpers.py", "weight = rnd()")
    assert rnd.rule_id == "TL-RAND-001"
    assert rnd.message.startswith("random.random()")
    pc = at(report, "agentpkg/helpers.py", "tick = pc()")
    assert pc.rule_id == "TL-CLOCK-001"
    assert pc.message.startswith("time.perf_counter()")


def test_method_on_a_module_level_object(report: ScanReport) -> None:
    finding = at(report, "agentpkg/clients.py", "return t.monotonic()")
    assert path_of(finding) == [
        ("agentpkg.agents:planner", "agentpkg/agents.py",
         line_of("agentpkg/agents.py", "reading = clock.read()")),
        ("agentpkg.clients:Clock.read", "agentpkg/clients.py", finding.line),
    ]  # fmt: skip
    session = at(report, "agentpkg/clients.py", "self.session.get(url)")
    assert session.rule_id == "TL-NET-001"
    assert [f.function for f in session.call_path] == [
        "agentpkg.agents:fetch", "agentpkg.clients:Http.get"
    ]


def test_package_reexport_and_relative_import(report: ScanReport) -> None:
    iso = at(report, "agentpkg/timeutil.py", "datetime.now().isoformat()")
    assert iso.message.startswith("datetime.datetime.now()")
    assert [f.function for f in iso.call_path] == [
        "agentpkg.agents:planner", "agentpkg.timeutil:iso_now"
    ]
    roll = at(report, "agentpkg/clients.py", "return _rng.random()")
    assert roll.rule_id == "TL-RAND-002"
    assert [f.function for f in roll.call_path] == [
        "agentpkg.agents:gatherer", "agentpkg.sub.deep:nap", "agentpkg.clients:roll"
    ]


def test_decoys_are_not_reported(report: ScanReport) -> None:
    functions = {f.function for f in report.findings}
    for decoy in (
        "agentpkg.clients:stable_roll",
        "agentpkg.timeutil:elapsed_since",
        "agentpkg.timeutil:never_called",
        "agentpkg.agents:not_an_agent",
        "agentpkg.helpers:unreachable_helper",
        "agentpkg.helpers:Token.__hash__",
        "agentpkg.jobs:nightly_report",
        "agentpkg.jobs:helper_not_entry",
    ):
        assert decoy not in functions
    quiet_lines = {
        ("agentpkg/agents.py", "rng = random.Random(42)"),
        ("agentpkg/agents.py", "pick = rng.choice"),
        ("agentpkg/agents.py", "now = ctx.now()"),
        ("agentpkg/agents.py", 'logger.info("planner at %s", time.time())'),
        ("agentpkg/agents.py", "elapsed_since(started)"),
        ("agentpkg/helpers.py", "seeded = random.Random(42)"),
        ("agentpkg/helpers.py", "modern = np.random.default_rng(7)"),
        ("agentpkg/helpers.py", 'os.environ["SEEN"] = "1"'),
        ("agentpkg/helpers.py", "same = id(a) == id(b)"),
        ("agentpkg/ordering.py", "for name in sorted(pending)"),
        ("agentpkg/ordering.py", "sorted(set(names))"),
        ("agentpkg/ordering.py", "for _ in pending"),
        ("agentpkg/ordering.py", "total = len(pending)"),
        ("agentpkg/gaps.py", "unused_now = lambda"),
        ("agentpkg/gaps.py", "seeded = functools.partial(random.Random, 7)"),
        ("agentpkg/gaps.py", "_seen.append(time.time())"),
        ("agentpkg/gaps.py", 'with open(name, "w") as out'),
        ("agentpkg/gaps.py", "plugin = importlib.import_module(name)"),
        ("agentpkg/gaps.py", 'return Path(path).read_text(encoding="utf-8")'),
        ("agentpkg/gaps.py", "def unused(started: float = time.time())"),
        ("agentpkg/gaps.py", "listing = out.stdout.decode()"),
        ("agentpkg/gaps.py", "data = resp.json()"),
        ("agentpkg/gaps.py", "return requests.get(url, timeout=5)"),
        ("agentpkg/settings.py", "UNUSED_STAMP = time.time()"),
        ("agentpkg/settings.py", "_gen = random.Random()"),
    }
    reported = {(f.path, f.line) for f in report.findings}
    for path, text in quiet_lines:
        assert (path, line_of(path, text)) not in reported, text


def test_closed_gaps_carry_their_call_paths(report: ScanReport) -> None:
    reader = line_of("agentpkg/gaps.py", "def reader(")
    wrapper = at(report, "agentpkg/gaps.py", "began = time.perf_counter()")
    assert path_of(wrapper) == [
        ("agentpkg.gaps:reader", "agentpkg/gaps.py", line_of("agentpkg/gaps.py", "@timed")),
        ("agentpkg.gaps:timed.<locals>.wrapper", "agentpkg/gaps.py", wrapper.line),
    ]
    default = at(report, "agentpkg/gaps.py", "def reader(")
    assert default.function == "agentpkg.gaps:reader" and default.line == reader
    tag = at(report, "agentpkg/settings.py", "RUN_TAG = ")
    assert [f.function for f in tag.call_path] == [
        "agentpkg.gaps:reader", "agentpkg.settings:<module>.RUN_TAG"
    ]
    lam = at(report, "agentpkg/gaps.py", "E731  # expect: TL-CLOCK-001")
    assert [f.function for f in lam.call_path] == ["agentpkg.gaps:reader", "agentpkg.gaps:<lambda>"]
    proc = at(report, "agentpkg/gaps.py", "out = subprocess.run(")
    assert proc.entry_point == "agentpkg.gaps:handle"  # registered with kit.agent("handle")
    read = at(report, "agentpkg/gaps.py", "raw = Path(name).read_bytes()")
    assert read.rule_id == "TL-FS-001"


def test_configured_entry_points(tmp_path: Path) -> None:
    config = tmp_path / "scan.toml"
    config.write_text('[scan]\nentry_points = ["agentpkg.jobs:nightly*"]\n', encoding="utf-8")
    report = scan_paths([CORPUS], str(config), base=CORPUS)
    assert found(report) == sorted(expected() + expected("expect-entry"))
    (job,) = [f for f in report.findings if f.path == "agentpkg/jobs.py"]
    assert [f.function for f in job.call_path] == ["agentpkg.jobs:nightly_report"]


def test_scan_is_deterministic(report: ScanReport) -> None:
    files = sorted(CORPUS.rglob("*.py"), reverse=True)
    again = scan_paths(files, ScanConfig(), base=CORPUS)
    assert to_json(again)["findings"] == to_json(report)["findings"]
    assert report.stats.files == len(files)
    assert report.stats.entry_points == 7
    assert report.entry_points == (
        "agentpkg.agents:planner", "agentpkg.agents:fetch", "agentpkg.agents:auditor",
        "agentpkg.agents:gatherer", "agentpkg.gaps:reader", "agentpkg.gaps:load",
        "agentpkg.gaps:handle",
    )  # fmt: skip


def test_single_path_argument_and_default_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    report = scan_paths("agentpkg")
    assert found(report) == expected()
