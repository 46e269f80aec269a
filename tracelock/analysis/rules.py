"""The catalogue of nondeterminism rules, shared by the static scan and the runtime strict mode.

This module is plain data: it imports nothing from the scanner (no ``ast``), so a runtime
guard can import it cheaply and raise with the same rule ids, messages and suggested doors
the scan reports.

Each :class:`Rule` has a stable ``id`` (``TL-<AREA>-<NNN>``), a :class:`Severity`, the ctx
door to use instead (``door``), and the :class:`Target` qualified names it covers. A target
is either

- a **call** of a fully qualified callable (``time.time``, ``datetime.datetime.now``);
  ``safe_with_args`` > 0 means the call is deterministic when given at least that many
  non-``None`` arguments (``random.Random(42)`` is seeded, ``time.localtime(ts)`` converts a
  given timestamp);
- a **read** of a qualified name (``os.environ``): any load of the value counts;
- a **module**: a call of anything inside the module (``subprocess.run``, ``requests.get``),
  except exception classes and the pure helpers a rule ``excludes``.

Ids never change meaning once published; rules may gain targets.

Lookup::

    >>> from tracelock.analysis.rules import match, get_rule
    >>> rule, target = match("time.perf_counter")
    >>> rule.id, rule.door
    ('TL-CLOCK-001', 'ctx.now()')
    >>> get_rule("TL-RAND-001").message("random.random()")
    'random.random() draws from the process-global random generator; use ctx.random() instead'
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "Severity",
    "TargetKind",
    "Target",
    "Rule",
    "RULES",
    "RULES_BY_ID",
    "META_RULE_IDS",
    "get_rule",
    "match",
    "patchable_targets",
    "targets_by_name",
]


class Severity(enum.StrEnum):
    """How serious a finding is. Ordered: ``note < warning < error``."""

    NOTE = "note"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _RANK[self.value]

    def at_least(self, other: Severity) -> bool:
        """True when this severity is ``other`` or more serious."""
        return self.rank >= other.rank


_RANK = {"note": 0, "warning": 1, "error": 2}


class TargetKind(enum.StrEnum):
    CALL = "call"
    READ = "read"
    MODULE = "module"


@dataclass(frozen=True)
class Target:
    """One qualified name a rule covers."""

    name: str
    kind: TargetKind = TargetKind.CALL
    safe_with_args: int = 0

    def is_safe_call(self, given_args: int) -> bool:
        """Whether a call giving ``given_args`` non-``None`` arguments is deterministic."""
        return self.safe_with_args > 0 and given_args >= self.safe_with_args


@dataclass(frozen=True)
class Rule:
    """One rule of the catalogue."""

    id: str
    name: str
    category: str
    severity: Severity
    summary: str
    template: str
    door: str
    targets: tuple[Target, ...] = ()
    log_exempt: bool = False
    """Findings inside arguments of a logging call (or in code only reached from such
    arguments) are not reported: the value only reaches a log line, never the run."""
    patchable: bool = True
    """Whether a runtime guard can meaningfully intercept the targets (``False`` for rules
    that are structural, like set iteration order, or meta rules of the scan itself)."""
    meta: bool = False
    """A rule about the scan itself (parse errors, allowlist hygiene); never allowlisted."""
    excludes: tuple[str, ...] = ()
    """Names under a module target that are pure (``urllib.request.pathname2url``)."""

    def message(self, subject: str) -> str:
        """The finding message for ``subject`` (what the code does, e.g. ``time.time()``)."""
        return self.template.format(subject=subject, door=self.door)

    def names(self) -> tuple[str, ...]:
        """The qualified names of every target."""
        return tuple(t.name for t in self.targets)


def _calls(*names: str, safe_with_args: int = 0) -> tuple[Target, ...]:
    return tuple(Target(n, TargetKind.CALL, safe_with_args) for n in names)


def _modules(*names: str) -> tuple[Target, ...]:
    return tuple(Target(n, TargetKind.MODULE) for n in names)


_RANDOM_FUNCS = (
    "random", "uniform", "triangular", "randint", "randrange", "choice", "choices", "shuffle",
    "sample", "randbytes", "getrandbits", "gauss", "normalvariate", "lognormvariate",
    "expovariate", "vonmisesvariate", "gammavariate", "betavariate", "paretovariate",
    "weibullvariate", "binomialvariate", "seed", "getstate", "setstate",
)

_NUMPY_GLOBAL_FUNCS = (
    "rand", "randn", "randint", "random", "random_sample", "random_integers", "ranf", "sample",
    "choice", "bytes", "shuffle", "permutation", "seed", "get_state", "set_state", "normal",
    "uniform", "binomial", "poisson", "exponential", "beta", "gamma", "standard_normal",
    "standard_exponential", "standard_gamma", "lognormal", "laplace", "logistic", "geometric",
    "multinomial", "multivariate_normal", "dirichlet", "triangular", "weibull", "zipf",
)

_CLOCK_FUNCS = (
    "time.time", "time.time_ns", "time.monotonic", "time.monotonic_ns", "time.perf_counter",
    "time.perf_counter_ns", "time.process_time", "time.process_time_ns", "time.thread_time",
    "time.thread_time_ns", "time.clock_gettime", "time.clock_gettime_ns",
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today",
)

_OS_EXEC = tuple(
    f"os.{n}"
    for n in (
        "system", "popen", "fork", "forkpty", "execl", "execle", "execlp", "execlpe", "execv",
        "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
        "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "startfile",
    )
)

RULES: tuple[Rule, ...] = (
    Rule(
        id="TL-RAND-001",
        name="global-random",
        category="randomness",
        severity=Severity.ERROR,
        summary="Module-level random.* functions use the process-global, unseeded generator.",
        template="{subject} draws from the process-global random generator; use {door} instead",
        door="ctx.random()",
        targets=_calls(*(f"random.{n}" for n in _RANDOM_FUNCS)),
    ),
    Rule(
        id="TL-RAND-002",
        name="unseeded-random-instance",
        category="randomness",
        severity=Severity.ERROR,
        summary="random.Random() without a seed, or random.SystemRandom, draws OS entropy.",
        template="{subject} is not seeded; use {door}, or random.Random(seed) with a seed "
        "drawn from ctx.random()",
        door="ctx.random()",
        targets=(
            Target("random.Random", TargetKind.CALL, safe_with_args=1),
            Target("random.SystemRandom", TargetKind.CALL),
        ),
    ),
    Rule(
        id="TL-RAND-003",
        name="numpy-global-random",
        category="randomness",
        severity=Severity.ERROR,
        summary="numpy.random legacy global functions, or an unseeded numpy generator.",
        template="{subject} uses numpy's global or unseeded generator; use {door}, or "
        "numpy.random.default_rng(seed) with a seed drawn from ctx.random()",
        door="ctx.random()",
        targets=_calls(*(f"numpy.random.{n}" for n in _NUMPY_GLOBAL_FUNCS))
        + _calls("numpy.random.default_rng", "numpy.random.RandomState", safe_with_args=1),
    ),
    Rule(
        id="TL-RAND-004",
        name="os-entropy",
        category="randomness",
        severity=Severity.ERROR,
        summary="secrets.* and os.urandom read operating-system entropy.",
        template="{subject} reads operating-system entropy; use {door} (or ctx.uuid() for ids)",
        door="ctx.random()",
        targets=_calls(
            "os.urandom", "os.getrandom", "secrets.token_bytes", "secrets.token_hex",
            "secrets.token_urlsafe", "secrets.choice", "secrets.randbelow", "secrets.randbits",
            "secrets.SystemRandom",
        ),
    ),
    Rule(
        id="TL-UUID-001",
        name="random-uuid",
        category="ids",
        severity=Severity.ERROR,
        summary="uuid.uuid1 and uuid.uuid4 produce a new value on every run.",
        template="{subject} makes a fresh id on every run; use {door} instead",
        door="ctx.uuid()",
        targets=_calls("uuid.uuid1", "uuid.uuid4"),
        log_exempt=True,
    ),
    Rule(
        id="TL-CLOCK-001",
        name="clock-read",
        category="clock",
        severity=Severity.ERROR,
        summary="Reads of the wall or monotonic clock (time.*, datetime.now/utcnow/today).",
        template="{subject} reads the real clock; use {door} instead",
        door="ctx.now()",
        targets=_calls(*_CLOCK_FUNCS)
        + _calls("time.localtime", "time.gmtime", "time.ctime", "time.asctime", safe_with_args=1)
        + _calls("time.strftime", safe_with_args=2),
        log_exempt=True,
    ),
    Rule(
        id="TL-CLOCK-002",
        name="real-sleep",
        category="clock",
        severity=Severity.WARNING,
        summary="time.sleep and asyncio.sleep wait in real time, outside the journal.",
        template="{subject} waits in real time; use {door} instead",
        door="ctx.sleep()",
        targets=_calls("time.sleep", "asyncio.sleep"),
    ),
    Rule(
        id="TL-ENV-001",
        name="environment-read",
        category="environment",
        severity=Severity.ERROR,
        summary="Reads of the process environment (os.environ, os.getenv).",
        template="{subject} reads the process environment; pass the value in as an argument "
        "or read it through a tool with {door}",
        door="ctx.call()",
        targets=(
            Target("os.environ", TargetKind.READ),
            Target("os.environb", TargetKind.READ),
            Target("os.getenv"),
            Target("os.getenvb"),
        ),
        log_exempt=True,
    ),
    Rule(
        id="TL-ENV-002",
        name="process-state",
        category="environment",
        severity=Severity.ERROR,
        summary="Reads of process or host identity (pid, hostname, user, working directory).",
        template="{subject} reads process or host state that differs between runs; "
        "read it through a tool with {door}",
        door="ctx.call()",
        targets=_calls(
            "os.getpid", "os.getppid", "os.getuid", "os.geteuid", "os.getlogin", "os.uname",
            "os.getcwd", "socket.gethostname", "socket.getfqdn", "platform.node",
            "getpass.getuser", "uuid.getnode", "pathlib.Path.cwd", "pathlib.Path.home",
        ),
        log_exempt=True,
    ),
    Rule(
        id="TL-NET-001",
        name="network",
        category="effects",
        severity=Severity.ERROR,
        summary="Network access outside the context's doors (requests, httpx, urllib, socket).",
        template="{subject} reaches the network outside the journal; make it a tool and "
        "call it with {door} (or ctx.llm() for model calls)",
        door="ctx.call()",
        targets=_modules(
            "requests", "httpx", "urllib.request", "urllib3", "http.client", "aiohttp", "socket"
        ),
        excludes=(
            "urllib.request.pathname2url", "urllib.request.url2pathname",
            "urllib.request.Request", "requests.Request", "requests.PreparedRequest",
            "httpx.URL", "httpx.Timeout", "httpx.Headers", "httpx.Limits", "httpx.Request",
            "socket.inet_aton", "socket.inet_ntoa", "socket.htons", "socket.ntohs",
            "socket.htonl", "socket.ntohl",
        ),
    ),
    Rule(
        id="TL-PROC-001",
        name="subprocess",
        category="effects",
        severity=Severity.ERROR,
        summary="Subprocesses and os.system/exec/spawn outside the context's doors.",
        template="{subject} starts a process outside the journal; make it a tool and call "
        "it with {door}",
        door="ctx.call()",
        excludes=("subprocess.list2cmdline",),
        targets=_modules("subprocess")
        + _calls(
            *_OS_EXEC, "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
            "pty.spawn",
        ),
    ),
    Rule(
        id="TL-ORDER-001",
        name="set-iteration-order",
        category="ordering",
        severity=Severity.ERROR,
        summary="Iterating a set or frozenset where the order can reach an effect or output.",
        template="{subject} depends on the iteration order of a set or frozenset, which "
        "changes between processes; wrap the set in {door}",
        door="sorted(...)",
        log_exempt=True,
        patchable=False,
    ),
    Rule(
        id="TL-HASH-001",
        name="builtin-hash",
        category="ordering",
        severity=Severity.ERROR,
        summary="Built-in hash() of a value: str and bytes hashes are salted per process.",
        template="{subject} is salted per process for str and bytes; use {door} for a "
        "stable digest",
        door="hashlib.sha256 (tracelock.core.hashing)",
        targets=_calls("builtins.hash"),
        log_exempt=True,
        patchable=False,
    ),
    Rule(
        id="TL-ID-001",
        name="object-id",
        category="ordering",
        severity=Severity.WARNING,
        summary="id() used as a value: memory addresses differ between runs.",
        template="{subject} is a memory address that differs between runs; use a stable key "
        "or {door}",
        door="ctx.uuid()",
        targets=_calls("builtins.id"),
        log_exempt=True,
        patchable=False,
    ),
    Rule(
        id="TL-CONC-001",
        name="threads",
        category="concurrency",
        severity=Severity.ERROR,
        summary="Threads, processes and executors interleave in an order the journal cannot "
        "replay.",
        template="{subject} runs work concurrently in an unrecorded order; use {door} instead",
        door="ctx.gather()",
        targets=_calls(
            "threading.Thread", "threading.Timer", "_thread.start_new_thread",
            "concurrent.futures.ThreadPoolExecutor", "concurrent.futures.ProcessPoolExecutor",
            "multiprocessing.Process", "multiprocessing.Pool", "multiprocessing.pool.Pool",
            "multiprocessing.pool.ThreadPool",
        ),
    ),
    Rule(
        id="TL-CONC-002",
        name="ungathered-async",
        category="concurrency",
        severity=Severity.ERROR,
        summary="asyncio task fan-out (gather, as_completed, wait, create_task) bypasses "
        "ctx.gather.",
        template="{subject} completes tasks in an unrecorded order; use {door} instead",
        door="ctx.gather()",
        targets=_calls(
            "asyncio.gather", "asyncio.as_completed", "asyncio.wait", "asyncio.create_task",
            "asyncio.ensure_future", "asyncio.TaskGroup", "asyncio.to_thread",
            "asyncio.run_coroutine_threadsafe",
        ),
    ),
    Rule(
        id="TL-FS-001",
        name="file-read",
        category="filesystem",
        severity=Severity.ERROR,
        summary="File reads in agent code (open() for reading, Path.read_text/read_bytes): "
        "the filesystem is an input the journal does not record.",
        template="{subject} reads the filesystem, an input the journal does not record; read "
        "it through the sandbox with {door} (or pass the content in as an argument)",
        door='ctx.call("fs.read", path=...)',
        targets=_calls(
            "builtins.open", "io.open",
            *(f"pathlib.{cls}.{method}" for cls in ("Path", "PosixPath", "WindowsPath")
              for method in ("read_text", "read_bytes", "open")),
        ),
        patchable=False,
    ),
    Rule(
        id="TL-SCAN-001",
        name="unparsable-source",
        category="scan",
        severity=Severity.ERROR,
        summary="A scanned file could not be decoded or parsed; it was not analysed.",
        template="{subject}",
        door="",
        patchable=False,
        meta=True,
    ),
    Rule(
        id="TL-ALLOW-001",
        name="malformed-allow",
        category="scan",
        severity=Severity.ERROR,
        summary="An inline allow comment without a reason, or naming an unknown rule.",
        template="{subject}",
        door="",
        patchable=False,
        meta=True,
    ),
    Rule(
        id="TL-ALLOW-002",
        name="unused-allow",
        category="scan",
        severity=Severity.WARNING,
        summary="An allowlist entry (config or inline) that suppressed nothing.",
        template="{subject}",
        door="",
        patchable=False,
        meta=True,
    ),
    Rule(
        id="TL-CONF-001",
        name="unmatched-entry-point",
        category="scan",
        severity=Severity.WARNING,
        summary="A configured entry point that matched no function.",
        template="{subject}",
        door="",
        patchable=False,
        meta=True,
    ),
)

RULES_BY_ID: Mapping[str, Rule] = MappingProxyType({r.id: r for r in RULES})

META_RULE_IDS: frozenset[str] = frozenset(r.id for r in RULES if r.meta)

_EXACT: dict[str, tuple[Rule, Target]] = {}
_MODULES: dict[str, tuple[Rule, Target]] = {}
for _rule in RULES:
    for _target in _rule.targets:
        table = _MODULES if _target.kind is TargetKind.MODULE else _EXACT
        if _target.name in table:  # pragma: no cover - guarded by a test
            raise AssertionError(f"target {_target.name} listed twice")
        table[_target.name] = (_rule, _target)

_EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning")
_EXCLUDED: frozenset[str] = frozenset(name for r in RULES for name in r.excludes)


def get_rule(rule_id: str) -> Rule:
    """The rule with id ``rule_id``; ``KeyError`` if there is none."""
    return RULES_BY_ID[rule_id]


def match(qualname: str) -> tuple[Rule, Target] | None:
    """The rule and target covering the fully qualified name ``qualname``, if any.

    An exact target wins over a module target (``socket.gethostname`` is process state,
    other ``socket.*`` calls are network). Module targets do not cover exception classes
    (names ending in ``Error``, ``Exception`` or ``Warning``).
    """
    hit = _EXACT.get(qualname)
    if hit is not None:
        return hit
    last = qualname.rsplit(".", 1)[-1]
    if last.endswith(_EXCEPTION_SUFFIXES) or qualname in _EXCLUDED:
        return None
    prefix = qualname
    while True:
        hit = _MODULES.get(prefix)
        if hit is not None:
            return hit
        if "." not in prefix:
            return None
        prefix = prefix.rsplit(".", 1)[0]


def targets_by_name() -> Mapping[str, tuple[Rule, Target]]:
    """Every target, exact and module, keyed by qualified name."""
    return MappingProxyType({**_EXACT, **_MODULES})


def patchable_targets() -> Iterator[tuple[Rule, Target]]:
    """``(rule, target)`` for every target a runtime guard can intercept, in catalogue order."""
    for rule in RULES:
        if rule.patchable:
            for target in rule.targets:
                yield rule, target
