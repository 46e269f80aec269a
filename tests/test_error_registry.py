"""Every error and step code the package can produce is documented in docs/errors.md."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import tracelock
from tracelock.errors import TracelockError
from tracelock.runtime.outcomes import all_codes

DOC = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
DOCUMENTED = set(re.findall(r"^\|\s*`([A-Z0-9_]+)`", DOC, flags=re.MULTILINE))


def _import_everything() -> None:
    for module in pkgutil.walk_packages(tracelock.__path__, "tracelock."):
        importlib.import_module(module.name)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found.add(sub)
        found |= _subclasses(sub)
    return found


def test_every_exception_code_is_documented() -> None:
    _import_everything()
    missing = sorted(
        {cls.code for cls in _subclasses(TracelockError) | {TracelockError} if cls.code not in DOCUMENTED}
    )
    assert not missing, f"undocumented exception codes: {missing}"


def test_every_step_code_is_documented_with_its_outcome() -> None:
    _import_everything()
    rows = dict(re.findall(r"^\|\s*`([A-Z0-9_]+)`\s*\|\s*`?([A-Z_]+)`?\s*\|", DOC, flags=re.MULTILINE))
    problems = []
    for step_code in all_codes():
        if step_code.code not in rows:
            problems.append(f"{step_code.code} undocumented")
        elif rows[step_code.code] != step_code.outcome.value:
            problems.append(f"{step_code.code} documented as {rows[step_code.code]}, is {step_code.outcome.value}")
    assert not problems, problems


def test_step_codes_are_unique_and_not_success() -> None:
    _import_everything()
    codes = [c.code for c in all_codes()]
    assert len(codes) == len(set(codes))
    assert all(c.outcome.value != "SUCCESS" for c in all_codes())
