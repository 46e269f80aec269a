"""Generate the golden sealed-segment vectors in ``conformance/sealed/``.

    python conformance/generate_sealed.py           # (re)write conformance/sealed
    python conformance/generate_sealed.py --check   # exit 1 if the files are not up to date

A small store is recorded in a temporary directory with a fixed clock and a fixed store id
(four runs, one ``run.start`` payload redacted, so one segment holds a redacted record); its
journal is cut at record boundaries into three stretches, and each stretch is written as the
segment file ``<start as 16 hex digits>.seg`` (docs/spec.md 3.8) by
``tracelock.storage.directory.sealed.encode_segment``, with frames of 4096 bytes so that a segment has
several, beside ``<start>.journal``, the journal's bytes of that range. ``bad/<case>/`` holds
segments damaged on purpose, each with the check a reader must fail it on.

The journal bytes are deterministic. The compressed frames are what the installed
``zstandard`` produces and may change with its version (any conforming encoder may be used):
``--check`` then reports the ``.seg`` files out of date although they decode to the same
bytes. ``tests/storage/test_sealed_conformance.py`` decodes the files with its own code.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fingerprint_cases import FixedClock  # noqa: E402
from generated_files import generator_main  # noqa: E402

from tracelock.evidence.redaction import redact  # noqa: E402
from tracelock.storage.directory import DirectoryStore  # noqa: E402
from tracelock.storage.directory.sealed import encode_segment, segment_name  # noqa: E402

#: Journal bytes per frame in the golden segments (the store's default is 64 KiB).
FRAME_BYTES = 4096
#: Where the stretches end, roughly: each is cut at the first record boundary at or after
#: the mark (the last stretch, the rest of the journal, is under one frame).
CUT_AFTER = (3 * FRAME_BYTES + 500, 5 * FRAME_BYTES + 500)
RUNS = 4
EFFECTS_PER_RUN = 5
REDACTED_RUN = "run-sealed-1"
#: Header of a segment: magic, start, end, frame bytes, frame count, SHA-256 of the journal
#: bytes (little-endian), as docs/spec.md 3.8 states; used here only to damage one on purpose.
HEADER = struct.Struct("<8sQQII32s")


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _effect_payload(run: int, step: int) -> dict[str, Any]:
    lines = [f"line {k} of the answer to question {run}.{step}: {'abcdefgh'[(run + k) % 8] * (k + 3)}" for k in range(12)]
    return {"step": step, "tool": "lookup", "args": {"key": f"k{run}{step}"}, "result": lines}


def record_journal(directory: Path) -> bytes:
    """Record the runs in a new store at ``directory`` and return its journal's bytes."""
    store = DirectoryStore(directory, clock=FixedClock(), store_id=lambda: "conformance")
    try:
        for run in range(1, RUNS + 1):
            name = f"run-sealed-{run}"
            store.append(name, "run.start", payload={"agent": "sealed", "input": f"question {run}"},
                         meta={"agent": "sealed", "status": "running"})
            for step in range(EFFECTS_PER_RUN):
                store.append(name, "effect", payload=_effect_payload(run, step), durable=False)
            store.append(name, "run.end", payload={"outcome": "SUCCESS", "output": run},
                         meta={"status": "completed"})
        redact(store, REDACTED_RUN, "start", by="dpo@example.com", reason="the input names a person")
    finally:
        store.close()
    journal = (directory / "journal.log").read_bytes()
    assert b"\0" not in journal, "a cleanly closed journal has no free space left"
    return journal


def stretches(journal: bytes) -> list[tuple[int, int]]:
    """The ranges of the journal the golden segments hold: contiguous from 0 to its end,
    each ending at a record boundary."""
    ends = [journal.index(b"\n", mark) + 1 for mark in CUT_AFTER] + [len(journal)]
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends, strict=True))


def _frame_lengths(segment: bytes, count: int) -> list[int]:
    return [int.from_bytes(segment[HEADER.size + 4 * i : HEADER.size + 4 * i + 4], "little") for i in range(count)]


def _rehash(body: bytes) -> bytes:
    """A segment whose trailing SHA-256 is right for ``body`` (its other checks are not)."""
    return body + hashlib.sha256(body).digest()


def bad_segments(segment: bytes) -> dict[str, tuple[bytes, str, str]]:
    """Segments damaged on purpose: case -> (file, the check that fails, what it shows)."""
    count = HEADER.unpack_from(segment)[4]
    lengths = _frame_lengths(segment, count)
    frame_one = HEADER.size + 4 * count + lengths[0]
    flip_at = frame_one + lengths[1] // 2
    flipped = bytearray(segment)
    flipped[flip_at] ^= 0x01
    header = list(HEADER.unpack_from(segment))
    header[5] = bytes(32)
    wrong_digest = HEADER.pack(*header) + segment[HEADER.size : -32]
    return {
        "frame-byte-flipped": (
            bytes(flipped),
            "file-sha256",
            f"byte {flip_at} (inside frame 1) has one bit flipped; the trailing SHA-256 no longer "
            "matches the file",
        ),
        "frame-byte-flipped-rehashed": (
            _rehash(bytes(flipped[:-32])),
            "frame",
            f"byte {flip_at} (inside frame 1) has one bit flipped and the trailing SHA-256 was "
            "recomputed: frame 1 does not decode to its bytes (its Zstandard checksum fails)",
        ),
        "header-digest-wrong": (
            _rehash(wrong_digest),
            "journal-sha256",
            "the header's SHA-256 of the journal bytes is all zeros and the trailing SHA-256 was "
            "recomputed: the decoded bytes do not match the header's digest",
        ),
    }


def all_files() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        journal = record_journal(Path(tmp) / "store")
    files: dict[str, bytes] = {}
    segments = []
    for start, end in stretches(journal):
        data = journal[start:end]
        segment = encode_segment(start, data, frame_bytes=FRAME_BYTES)
        name = segment_name(start)
        stem = name.removesuffix(".seg")
        files[f"sealed/{name}"] = segment
        files[f"sealed/{stem}.journal"] = data
        segments.append({
            "file": name,
            "journal": f"{stem}.journal",
            "start": start,
            "end": end,
            "frame_bytes": FRAME_BYTES,
            "frame_count": -(-len(data) // FRAME_BYTES),
            "journal_sha256": _sha(data),
            "segment_sha256": _sha(segment),
        })
    first = segments[0]
    bad = []
    for case, (blob, check, defect) in bad_segments(files[f"sealed/{first['file']}"]).items():
        path = f"bad/{case}/{first['file']}"
        files[f"sealed/{path}"] = blob
        bad.append({"file": path, "from": first["file"], "check": check, "defect": defect})
    vectors = {
        "description": (
            "Sealed segments (docs/spec.md 3.8) of the journal of a small store: three contiguous "
            "segments from offset 0 to the journal's end, each beside the journal bytes it holds, "
            "in frames of 4096 bytes; and segments damaged on purpose, which a reader must refuse "
            "for the check named (file-sha256: the trailing SHA-256; frame: a frame that does not "
            "decode to its bytes; journal-sha256: the header's digest of the journal bytes)."
        ),
        "journal_sha256": _sha(journal),
        "segments": segments,
        "bad": bad,
    }
    files["sealed/vectors.json"] = _json(vectors)
    return files


def main(argv: list[str] | None = None) -> int:
    return generator_main(__doc__.splitlines()[0] if __doc__ else None, HERE, "sealed", all_files, argv)


if __name__ == "__main__":
    sys.exit(main())
