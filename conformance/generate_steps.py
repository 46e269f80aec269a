"""Generate the golden step-rule vectors in ``conformance/steps/``.

    python conformance/generate_steps.py           # (re)write conformance/steps
    python conformance/generate_steps.py --check   # exit 1 if the files are not up to date

Each vector is the journal of a store holding the run of the ``agent-success`` fingerprint
case (``fingerprint_cases.py``: an LLM call, tools of each class, the idempotent
``store_note`` at step 2 as an ``effect.intent`` and an ``effect.result``), appended again
entry by entry through the store API into a new store (fixed clock, fixed store id), with the
run's entries changed as a writer that breaks the step rule (docs/spec.md 3.9) changes them:

* ``duplicated-step``: a second caller executed the run at the same time, and its intent and
  result of step 2 follow the first caller's;
* ``skipped-step``: the steps from 3 on are numbered one higher, so step 3 is never recorded;
* ``result-without-intent``: the result of step 2 is there, its intent never was.

The chain of every vector is intact (each entry continues its run's chain); the step rule is
what refuses it, at the entry the vector's ``verdict`` names.
``tests/core/test_steps_conformance.py`` checks the verdicts with its own code.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fingerprint_cases import FixedClock, record_case  # noqa: E402
from generated_files import generator_main  # noqa: E402

from tracelock.core.entry import parse_entry  # noqa: E402
from tracelock.storage.backend import NO_PAYLOAD  # noqa: E402
from tracelock.storage.directory import DirectoryStore  # noqa: E402

BASE = "agent-success"
#: The step of the base run recorded as an intent and a result (``store_note``).
STEP = 2
CODE = "JOURNAL_STEP_SEQUENCE_BROKEN"

#: A run entry as a writer appends it: kind, payload document (NO_PAYLOAD: none), meta.
Item = tuple[str, Any, dict[str, Any] | None]


def _step(item: Item) -> Any:
    return item[1].get("step") if isinstance(item[1], dict) else None


def _find(items: list[Item], kind: str, step: int) -> Item:
    return next(item for item in items if item[0] == kind and _step(item) == step)


def duplicated_step(items: list[Item]) -> tuple[list[Item], int, str]:
    intent, result = _find(items, "effect.intent", STEP), _find(items, "effect.result", STEP)
    at = items.index(result) + 1
    return [*items[:at], intent, result, *items[at:]], at, "recorded-twice"


def skipped_step(items: list[Item]) -> tuple[list[Item], int, str]:
    changed = [
        (kind, {**doc, "step": doc["step"] + 1}, meta)
        if kind.startswith("effect") and isinstance(doc, dict) and doc["step"] > STEP
        else (kind, doc, meta)
        for kind, doc, meta in items
    ]
    return changed, len(changed) - 1, "step-skipped"


def result_without_intent(items: list[Item]) -> tuple[list[Item], int, str]:
    intent = _find(items, "effect.intent", STEP)
    changed = [item for item in items if item is not intent]
    return changed, changed.index(_find(changed, "effect.result", STEP)), "result-without-intent"


#: case -> (the change, what the vector shows).
CASES: dict[str, tuple[Callable[[list[Item]], tuple[list[Item], int, str]], str]] = {
    "duplicated-step": (
        duplicated_step,
        "a second caller executed the run at the same time: a second effect.intent and "
        "effect.result of step 2 follow the first ones; refused at the second intent",
    ),
    "skipped-step": (
        skipped_step,
        "the steps from 3 on are numbered one higher: the run ended without step 3; refused at "
        "its run.end",
    ),
    "result-without-intent": (
        result_without_intent,
        "the effect.result of step 2 follows no effect.intent of step 2; refused at the result",
    ),
}


def _document(store: DirectoryStore, payload: str | None) -> Any:
    return NO_PAYLOAD if payload is None else store.get_payload(payload)


def broken_journal(
    source: DirectoryStore, run: str, change: Callable[[list[Item]], tuple[list[Item], int, str]], directory: Path
) -> tuple[list[bytes], int, str]:
    """The journal of a new store at ``directory`` holding ``source``'s entries appended in
    order, ``run``'s changed by ``change``; with the seq the rule refuses, and the rule."""
    items = [(entry.kind, _document(source, entry.payload), entry.meta) for entry in source.entries(run)]
    changed, at, rule = change(items)
    seq = -1
    with DirectoryStore(directory, clock=FixedClock(), store_id=lambda: "conformance") as store:
        for entry in source.iter_entries():
            if entry.run != run:
                store.append(entry.run, entry.kind, payload=_document(source, entry.payload), meta=entry.meta)
            elif entry.i == 0:
                for position, (kind, doc, meta) in enumerate(changed):
                    written = store.append(run, kind, payload=doc, meta=meta, new_run=position == 0)
                    if position == at:
                        seq = written.seq
    return (directory / "journal.log").read_bytes().splitlines(), seq, rule


def all_files() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        _, run = record_case(BASE, Path(tmp) / "recorded")
        with DirectoryStore(Path(tmp) / "recorded", read_only=True) as source:
            for name, (change, shows) in CASES.items():
                lines, seq, rule = broken_journal(source, run, change, Path(tmp) / name)
                entry = parse_entry(next(line for line in lines if line.startswith(b"{") and parse_entry(line).seq == seq))
                vector = {
                    "description": (
                        f"case {name}: the journal of the fingerprint case {BASE}, appended again "
                        f"through the store API, in which {shows}"
                    ),
                    "run": run,
                    "journal": [line.decode("utf-8") for line in lines],
                    "verdict": {"code": CODE, "rule": rule, "seq": seq, "i": entry.i, "kind": entry.kind},
                }
                files[f"steps/{name}.json"] = (json.dumps(vector, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    return files


def main(argv: list[str] | None = None) -> int:
    return generator_main(__doc__.splitlines()[0] if __doc__ else None, HERE, "steps", all_files, argv)


if __name__ == "__main__":
    sys.exit(main())
