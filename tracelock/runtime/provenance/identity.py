"""The engine and environment a run is recorded under: the tracelock version, the Python
version and implementation, the platform, and a digest of the installed distributions.

Read from the real interpreter once per process (:func:`current_engine`) and injected into
the runtime (``Runtime(provenance=Provenance(engine=...))``), so that a test can simulate
an upgrade with another version string. None of it enters the fingerprint: fingerprints
stay comparable across upgrades, and ``replay``/``diff`` report the difference instead.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import re
import sys
from collections.abc import Iterable
from typing import Any

from tracelock.core.fingerprint import value_hash

__all__ = ["ENGINE_FIELDS", "current_engine", "distributions_digest", "engine_differences", "engine_identity"]

#: The members of an engine identity, in the order reports name them.
ENGINE_FIELDS = ("tracelock", "python", "implementation", "platform", "distributions")

_NAME_SEPARATORS = re.compile(r"[-_.]+")


def distributions_digest(pairs: Iterable[tuple[str, str]]) -> str:
    """``H([[name, version], ...])`` over the distinct (normalized name, version) pairs,
    sorted: the same set of installed distributions gives the same digest whatever the
    order the interpreter lists them in."""
    normalized = sorted({(_NAME_SEPARATORS.sub("-", name).lower(), version) for name, version in pairs})
    return value_hash([list(pair) for pair in normalized])


def engine_identity(
    *, tracelock: str, python: str, implementation: str, platform: str, distributions: str
) -> dict[str, str]:
    """An engine identity document (the ``engine`` member of a run's provenance)."""
    return {
        "tracelock": tracelock,
        "python": python,
        "implementation": implementation,
        "platform": platform,
        "distributions": distributions,
    }


def _installed() -> list[tuple[str, str]]:
    pairs = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if isinstance(name, str) and name:
            pairs.append((name, dist.version or ""))
    return pairs


def _tracelock_version() -> str:
    try:
        return importlib.metadata.version("tracelock")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def current_engine() -> dict[str, str]:
    """The identity of this process's engine and environment, read once (scanning the
    installed distributions takes a few tens of milliseconds)."""
    return engine_identity(
        tracelock=_tracelock_version(),
        python=platform.python_version(),
        implementation=sys.implementation.name,
        platform=f"{platform.system().lower()}-{platform.machine().lower()}",
        distributions=distributions_digest(_installed()),
    )


def engine_differences(recorded: Any, current: Any) -> list[dict[str, Any]]:
    """The members of two engine identities that differ (``field``, ``recorded``,
    ``current``); a recording without an identity is reported as such."""
    if not isinstance(recorded, dict):
        return [{"field": "engine", "recorded": None, "current": current}] if isinstance(current, dict) else []
    if not isinstance(current, dict):
        return []
    return [
        {"field": name, "recorded": recorded.get(name), "current": current.get(name)}
        for name in ENGINE_FIELDS
        if recorded.get(name) != current.get(name)
    ]
