"""ECMAScript number formatting against the published ES6 test-file digests.

``../shared/vectors/jcs/README.md`` describes a deterministic generator of IEEE-754 doubles
(a static list, 2000 serial values, then SHA-256 chained blocks read as little-endian
float64 values, skipping zero and non-finite ones) and publishes the SHA-256 of its output
``hex,expected\\n`` lines. This is a port of that description; the static list is read from
the README itself and ``expected`` is :func:`format_number`.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pytest

from tracelock.core.canonical import format_number

# Published in ../shared/vectors/jcs/README.md: line count -> (SHA-256 of the first lines, size).
PUBLISHED = {
    1_000: ("be18b62b6f69cdab33a7e0dae0d9cfa869fda80ddc712221570f9f40a5878687", 37_967),
    10_000: ("b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892", 399_022),
    100_000: ("22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7", 4_031_728),
    1_000_000: ("49415fee2c56c77864931bd3624faad425c3c577d6d74e89a83bc725506dad16", 40_357_417),
    10_000_000: ("b9f8a44a91d46813b21b9602e72f112613c91408db0b8341fb94603d9db135e0", 403_630_048),
    100_000_000: (
        "0f7dda6b0837dde083c5d6b896f7d62340c8a2415b0c7121d83145e08a755272",
        4_036_326_174,
    ),
}

SERIAL_COUNT = 2000
SERIAL_BASE = 0x0010000000000000  # the smallest normal double
_ONE_U64 = struct.Struct("<Q")
_ONE_F64 = struct.Struct("<d")


def static_u64s(vectors_dir: Path) -> list[int]:
    """The ``staticU64s`` list, as written in the README's generator description."""
    readme = (vectors_dir / "jcs" / "README.md").read_text(encoding="utf-8")
    block = re.search(r"staticU64s = new BigUint64Array\(\[(.*?)\]\)", readme, re.DOTALL)
    assert block is not None, "the README no longer describes staticU64s"
    values = [int(text, 16) for text in re.findall(r"0x([0-9a-f]{16})n", block.group(1))]
    assert len(values) == 168, f"expected 168 static values, found {len(values)}"
    return values


def doubles(static: list[int]) -> Iterator[tuple[int, float]]:
    """The generated doubles, with their bit patterns, in order (an endless sequence)."""
    head = static + list(range(SERIAL_BASE, SERIAL_BASE + SERIAL_COUNT))
    yield from _pairs(struct.pack(f"<{len(head)}Q", *head))
    block = bytes(32)
    while True:
        blocks = []
        for _ in range(1024):
            block = hashlib.sha256(block).digest()
            blocks.append(block)
        # Skip 0.0 and -0.0 (value == 0) and the non-finite (value - value != 0).
        yield from (
            pair for pair in _pairs(b"".join(blocks)) if pair[1] != 0 and pair[1] - pair[1] == 0
        )


def _pairs(data: bytes) -> Iterator[tuple[int, float]]:
    """(bits, value) for each little-endian 64-bit word of ``data``."""
    count = len(data) // 8
    return zip(struct.unpack(f"<{count}Q", data), struct.unpack(f"<{count}d", data), strict=True)


def line(bits: int) -> str:
    value = _ONE_F64.unpack(_ONE_U64.pack(bits))[0]
    return f"{bits:x},{format_number(value)}\n"


def digests(static: list[int], counts: list[int]) -> dict[int, tuple[str, int]]:
    """SHA-256 and byte size of the first ``count`` lines, for each count, in one pass."""
    hasher = hashlib.sha256()
    size = 0
    found: dict[int, tuple[str, int]] = {}
    produced = 0
    sequence = doubles(static)
    for count in sorted(counts):
        while produced < count:
            chunk = list(islice(sequence, min(count - produced, 65_536)))
            text = "".join([f"{bits:x},{format_number(value)}\n" for bits, value in chunk])
            data = text.encode("ascii")
            hasher.update(data)
            size += len(data)
            produced += len(chunk)
        found[count] = (hasher.hexdigest(), size)
    return found


def test_sample_lines_from_the_readme() -> None:
    # The README's sample lines, formatted by format_number.
    samples = {
        "4340000000000001": "9007199254740994",
        "4340000000000002": "9007199254740996",
        "444b1ae4d6e2ef50": "1e+21",
        "3eb0c6f7a0b5ed8d": "0.000001",
        "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
        "8000000000000000": "0",
        "0": "0",
    }
    for hex_bits, expected in samples.items():
        assert line(int(hex_bits, 16)) == f"{hex_bits},{expected}\n"


def test_generator_start(vectors_dir: Path) -> None:
    static = static_u64s(vectors_dir)
    head = [bits for bits, _ in islice(doubles(static), len(static) + SERIAL_COUNT + 8)]
    assert head[:2] == [0, 0x8000000000000000]
    assert head[len(static)] == SERIAL_BASE
    assert head[len(static) + SERIAL_COUNT - 1] == SERIAL_BASE + SERIAL_COUNT - 1
    # The chained part never yields a zero or a non-finite double.
    for bits in head[len(static) + SERIAL_COUNT :]:
        assert bits & 0x7FFFFFFFFFFFFFFF != 0
        assert (bits >> 52) & 0x7FF != 0x7FF


def test_published_digests_up_to_one_million(vectors_dir: Path) -> None:
    counts = [1_000, 10_000, 100_000, 1_000_000]
    found = digests(static_u64s(vectors_dir), counts)
    for count in counts:
        assert found[count] == PUBLISHED[count], f"first {count} lines"


@pytest.mark.slow
@pytest.mark.parametrize("count", [10_000_000, 100_000_000])
def test_published_digests_slow(vectors_dir: Path, count: int) -> None:
    assert digests(static_u64s(vectors_dir), [count])[count] == PUBLISHED[count]
