"""The golden sealed segments in conformance/sealed, decoded by a reader written here from
docs/spec.md section 3.8 alone (``struct``, ``hashlib``, ``zstandard``), then by the module's
reader; the module's encoder checked against the reader written here."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tracelock.storage.directory.sealed import decode_segment, encode_segment, open_journal
from tracelock.storage.errors import JournalCorruptError

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
GOLDEN = CONFORMANCE / "sealed"

# -- a reader written from the specification -------------------------------------------

HEADER_FORMAT = "<8sQQII32s"
HEADER_SIZE = 64
MAGIC = b"TLSEG\x00\x00\x01"
TRAILER = 32


class SegmentDefect(Exception):
    """A segment fails one of the checks of section 3.8 (``check`` names which)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check


@dataclass(frozen=True)
class Decoded:
    start: int
    end: int
    frame_bytes: int
    frame_lengths: tuple[int, ...]
    frames_at: int
    digest: bytes
    data: bytes


def _decode_frame(frame: bytes, expected: int, index: int) -> bytes:
    """One complete Zstandard frame, nothing after it, giving exactly ``expected`` bytes."""
    try:
        declared = zstandard.get_frame_parameters(frame).content_size
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        raw = decompressor.decompress(frame)
    except zstandard.ZstdError as exc:
        raise SegmentDefect("frame", f"frame {index} does not decode: {exc}") from None
    if not decompressor.eof or decompressor.unused_data:
        raise SegmentDefect("frame", f"frame {index} is not exactly one complete frame")
    if len(raw) != expected or declared not in (expected, zstandard.CONTENTSIZE_UNKNOWN):
        raise SegmentDefect("frame", f"frame {index} holds {len(raw)} bytes, not {expected}")
    return raw


def decode(name: str, blob: bytes) -> Decoded:
    """Decode a segment file named ``name`` whole, or raise :class:`SegmentDefect`."""
    if len(blob) < HEADER_SIZE + TRAILER:
        raise SegmentDefect("layout", "shorter than a header and a trailer")
    if hashlib.sha256(blob[:-TRAILER]).digest() != blob[-TRAILER:]:
        raise SegmentDefect("file-sha256", "the trailing SHA-256 is not that of the bytes before it")
    magic, start, end, frame_bytes, count, digest = struct.unpack_from(HEADER_FORMAT, blob)
    if magic != MAGIC:
        raise SegmentDefect("layout", f"magic {magic!r}")
    if name != f"{start:016x}.seg":
        raise SegmentDefect("name", f"{name} does not name a segment starting at {start}")
    if end <= start or frame_bytes == 0 or count != (end - start + frame_bytes - 1) // frame_bytes:
        raise SegmentDefect("layout", f"[{start}, {end}) in {count} frames of {frame_bytes}")
    lengths = struct.unpack_from(f"<{count}I", blob, HEADER_SIZE)
    frames_at = HEADER_SIZE + 4 * count
    if frames_at + sum(lengths) + TRAILER != len(blob):
        raise SegmentDefect("layout", "the frame table does not add up to the file")
    parts = []
    at = frames_at
    for index, length in enumerate(lengths):
        expected = min(frame_bytes, end - start - index * frame_bytes)
        parts.append(_decode_frame(blob[at : at + length], expected, index))
        at += length
    data = b"".join(parts)
    if hashlib.sha256(data).digest() != digest:
        raise SegmentDefect("journal-sha256", "the decoded bytes do not match the header's digest")
    return Decoded(start, end, frame_bytes, lengths, frames_at, digest, data)


def frame_span(decoded: Decoded, index: int) -> range:
    """Byte positions of frame ``index`` in its segment file."""
    at = decoded.frames_at + sum(decoded.frame_lengths[:index])
    return range(at, at + decoded.frame_lengths[index])


# -- the golden files ---------------------------------------------------------------------


def vectors() -> dict[str, Any]:
    path = GOLDEN / "vectors.json"
    assert path.is_file(), f"{path} is missing: run conformance/generate_sealed.py"
    loaded: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return loaded


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_header_format_is_the_specified_size() -> None:
    assert struct.calcsize(HEADER_FORMAT) == HEADER_SIZE


def test_golden_segments_decode_to_their_journal_bytes() -> None:
    cases = vectors()["segments"]
    assert len(cases) >= 2
    for case in cases:
        blob = (GOLDEN / case["file"]).read_bytes()
        journal = (GOLDEN / case["journal"]).read_bytes()
        assert sha(blob) == case["segment_sha256"], case["file"]
        assert sha(journal) == case["journal_sha256"], case["journal"]
        decoded = decode(case["file"], blob)
        assert decoded.data == journal, case["file"]
        assert (decoded.start, decoded.end) == (case["start"], case["end"])
        assert decoded.end - decoded.start == len(journal)
        assert decoded.frame_bytes == case["frame_bytes"]
        assert len(decoded.frame_lengths) == case["frame_count"]
        assert decoded.digest.hex() == case["journal_sha256"]


def test_golden_segments_are_the_whole_journal_cut_at_record_boundaries() -> None:
    loaded = vectors()
    cases = loaded["segments"]
    assert cases[0]["start"] == 0
    for before, after in pairwise(cases):
        assert after["start"] == before["end"]
    journal = b"".join((GOLDEN / case["journal"]).read_bytes() for case in cases)
    assert sha(journal) == loaded["journal_sha256"]
    for case in cases:
        data = (GOLDEN / case["journal"]).read_bytes()
        assert data.endswith(b"\n") and b"\0" not in data
    # the cases the vectors are there for: several frames, a short last frame, a single
    # frame, a segment that does not start at 0, and a redacted record inside a segment
    counts = [case["frame_count"] for case in cases]
    assert max(counts) > 2 and 1 in counts
    assert any((case["end"] - case["start"]) % case["frame_bytes"] for case in cases if case["frame_count"] > 1)
    assert any(line.startswith(b"-") for line in journal.split(b"\n"))


def test_golden_frames_carry_their_content_size_and_checksum() -> None:
    for case in vectors()["segments"]:
        blob = (GOLDEN / case["file"]).read_bytes()
        decoded = decode(case["file"], blob)
        for index in range(len(decoded.frame_lengths)):
            span = frame_span(decoded, index)
            parameters = zstandard.get_frame_parameters(blob[span.start : span.stop])
            expected = min(decoded.frame_bytes, decoded.end - decoded.start - index * decoded.frame_bytes)
            assert parameters.content_size == expected
            assert parameters.has_checksum


def test_the_module_reads_the_golden_segments_as_written_here() -> None:
    for case in vectors()["segments"]:
        path = GOLDEN / case["file"]
        segment, data = decode_segment(path, path.read_bytes())
        assert data == (GOLDEN / case["journal"]).read_bytes()
        assert (segment.start, segment.end, segment.frame_bytes) == (case["start"], case["end"], case["frame_bytes"])
        assert len(segment.frames) == case["frame_count"]
        assert segment.digest.hex() == case["journal_sha256"]


def _differences(one: bytes, other: bytes) -> list[int]:
    assert len(one) == len(other)
    return [at for at, (a, b) in enumerate(zip(one, other, strict=True)) if a != b]


#: How each kind of damage must show in the module's reason.
MODULE_REASONS: dict[str, Callable[[str], bool]] = {
    "file-sha256": lambda reason: "trailing SHA-256" in reason,
    "frame": lambda reason: reason.startswith("frame 1 "),
    "journal-sha256": lambda reason: "SHA-256 in its header" in reason,
}


def test_damaged_segments_are_refused_for_the_named_check() -> None:
    loaded = vectors()
    cases = loaded["bad"]
    assert {case["check"] for case in cases} == set(MODULE_REASONS)
    for case in cases:
        path = GOLDEN / case["file"]
        name = path.name
        blob = path.read_bytes()
        good = (GOLDEN / case["from"]).read_bytes()
        changed = _differences(good, blob)
        trailer = set(range(len(blob) - TRAILER, len(blob)))
        original = decode(case["from"], good)
        if case["check"] == "file-sha256":
            assert len(changed) == 1 and changed[0] in frame_span(original, 1)
        elif case["check"] == "frame":
            inside = [at for at in changed if at not in trailer]
            assert len(inside) == 1 and inside[0] in frame_span(original, 1)
        else:
            assert set(changed) - trailer <= set(range(HEADER_SIZE - 32, HEADER_SIZE))
        with pytest.raises(SegmentDefect) as defect:
            decode(name, blob)
        assert defect.value.check == case["check"], case["file"]
        with pytest.raises(JournalCorruptError) as refused:
            decode_segment(path, blob)
        assert refused.value.details["segment"] == name
        assert MODULE_REASONS[case["check"]](str(refused.value.details["reason"])), refused.value


def test_a_segment_under_another_name_is_refused(tmp_path: Path) -> None:
    case = vectors()["segments"][1]
    blob = (GOLDEN / case["file"]).read_bytes()
    wrong = tmp_path / f"{case['start'] + 1:016x}.seg"
    wrong.write_bytes(blob)
    with pytest.raises(SegmentDefect) as defect:
        decode(wrong.name, blob)
    assert defect.value.check == "name"
    with pytest.raises(JournalCorruptError):
        decode_segment(wrong, blob)


def _generated_files() -> dict[str, bytes]:
    sys.path.insert(0, str(CONFORMANCE))
    try:
        from generate_sealed import all_files
    finally:
        sys.path.remove(str(CONFORMANCE))
    files: dict[str, bytes] = all_files()
    return files


def test_regenerated_segments_decode_to_the_golden_journal_bytes() -> None:
    # The compressed bytes may differ with the zstandard version: the decoded bytes may not.
    files = _generated_files()
    loaded = vectors()
    regenerated = json.loads(files["sealed/vectors.json"])
    assert regenerated["journal_sha256"] == loaded["journal_sha256"]
    assert [case["check"] for case in regenerated["bad"]] == [case["check"] for case in loaded["bad"]]
    for case in loaded["segments"]:
        journal = (GOLDEN / case["journal"]).read_bytes()
        assert files[f"sealed/{case['journal']}"] == journal
        decoded = decode(case["file"], files[f"sealed/{case['file']}"])
        assert decoded.data == journal
        assert (decoded.start, decoded.end, len(decoded.frame_lengths)) == (
            case["start"], case["end"], case["frame_count"]
        )


@pytest.mark.parametrize("frame_bytes", [1, 4096, 1 << 16])
def test_the_module_encoder_round_trips_through_the_reader_written_here(frame_bytes: int) -> None:
    for case in vectors()["segments"]:
        journal = (GOLDEN / case["journal"]).read_bytes()
        decoded = decode(case["file"], encode_segment(case["start"], journal, frame_bytes=frame_bytes))
        assert decoded.data == journal
        assert decoded.frame_bytes == frame_bytes
        assert len(decoded.frame_lengths) == -(-len(journal) // frame_bytes)


def test_a_journal_punched_to_holes_is_read_from_the_golden_segments(tmp_path: Path) -> None:
    cases = vectors()["segments"]
    journal = b"".join((GOLDEN / case["journal"]).read_bytes() for case in cases)
    (tmp_path / "sealed").mkdir()
    for case in cases:
        shutil.copyfile(GOLDEN / case["file"], tmp_path / "sealed" / case["file"])
    with (tmp_path / "journal.log").open("wb") as file:
        file.truncate(len(journal))  # every block a hole, as sealing leaves it
    reader = open_journal(tmp_path)
    try:
        assert reader.sealed_end == len(journal)
        assert reader.pread(len(journal), 0) == journal
        across = cases[1]["start"] - 100
        assert reader.pread(300, across) == journal[across : across + 300]
        inside = cases[0]["frame_bytes"] + 17
        assert reader.pread(5000, inside) == journal[inside : inside + 5000]
    finally:
        reader.close()
