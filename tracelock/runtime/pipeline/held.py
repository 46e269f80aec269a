"""LLM answers held fixed: a live run whose LLM steps are answered from another run's
record (``tracelock drift --hold-llm``), so that what still differs between attempts is
the code's doing, not the model's.

Only the LLM step's EXECUTE is replaced: the request still passes PARSE, VALIDATE and
AUTHORIZE, and the step is journaled as a live one. A request is answered with the
recorded result of the first unused recorded LLM step that had the same canonical
request; a request no recorded step made goes to the provider (and shows as drift).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from tracelock.core.canonical import CanonicalError, dumps

__all__ = ["HeldAnswers", "answered_model"]


def answered_model(result: Any) -> str | None:
    """The model an LLM step's result says answered (a provider's ``model``, or a
    captured call's ``llm.model``), or None when it names none."""
    if not isinstance(result, dict):
        return None
    model = result.get("model")
    if not isinstance(model, str):
        llm = result.get("llm")
        model = llm.get("model") if isinstance(llm, dict) else None
    return model if isinstance(model, str) and model else None


class HeldAnswers:
    """Recorded LLM results by canonical request, each used once, in step order."""

    def __init__(self, effects: Iterable[Mapping[str, Any]]) -> None:
        self._lock = threading.Lock()
        self._answers: dict[bytes, list[Any]] = {}
        for effect in sorted(effects, key=lambda doc: int(doc.get("step", 0))):
            if effect.get("kind") != "llm" or effect.get("outcome") != "SUCCESS":
                continue
            try:
                key = dumps(effect.get("args"))
            except CanonicalError:
                continue
            self._answers.setdefault(key, []).append(effect.get("result"))
        self.used = 0

    def take(self, canonical: bytes | None) -> tuple[bool, Any]:
        """``(True, result)`` for the next held answer to this request, else ``(False, None)``."""
        if canonical is None:
            return False, None
        with self._lock:
            queue = self._answers.get(canonical)
            if not queue:
                return False, None
            self.used += 1
            return True, queue.pop(0)
