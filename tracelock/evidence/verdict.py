"""The one result type of every verification, whichever door asks (the ``tracelock`` command,
the web UI, the MCP server).

A verification parses what it checks first, then runs its checks; its :class:`Verdict`
says whether everything holds and names every failed check (a :class:`Failure`: the check,
what was wrong, and where), beside the JSON document ``--json`` prints and the lines the
command prints as text. The verifications are :mod:`tracelock.evidence.bundle_verdict` (a
bundle, offline) and :mod:`tracelock.evidence.store_verdict` (a store, a run of it, the
inclusion and consistency proofs of ``tracelock prove``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracelock.evidence.verify import Failure

__all__ = ["Failure", "Verdict"]


@dataclass
class Verdict:
    """What one verification found: ``ok``, every failed check, the document and the text."""

    ok: bool
    document: dict[str, Any]
    lines: list[str]
    failures: list[Failure] = field(default_factory=list)

    def checks_failed(self) -> list[str]:
        """The names of the failed checks, each once, sorted."""
        return sorted({failure.check for failure in self.failures})

    def text(self) -> str:
        return "\n".join(self.lines)
