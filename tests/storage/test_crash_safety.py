"""Nothing acknowledged is lost: SIGKILL a writer at random instants, reopen, verify.

Also: a torn or damaged tail is cut on open (and kept aside), damage anywhere else is
reported and never repaired; every kind of tampering makes verification fail.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.storage.storage_helpers import record_run
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.errors import JournalCorruptError
from tracelock.storage.verify import verify_store

REPO = Path(__file__).resolve().parents[2]


def _kill_trial(store_dir: Path, rng: random.Random, trial: int) -> tuple[int, int]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage._appender", str(store_dir), str(trial)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    acked: dict[int, str] = {}
    fd = child.stdout.fileno()
    os.set_blocking(fd, False)
    buffer = b""
    ready_by = time.monotonic() + 60
    while b"READY" not in buffer and time.monotonic() < ready_by and child.poll() is None:
        try:
            buffer += os.read(fd, 1 << 16)
        except BlockingIOError:
            time.sleep(0.005)
    assert b"READY" in buffer, "the appender did not start"
    deadline = time.monotonic() + rng.uniform(0.01, 0.4)
    while time.monotonic() < deadline and child.poll() is None:
        try:
            buffer += os.read(fd, 1 << 16)
        except BlockingIOError:
            time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.wait()
    os.set_blocking(fd, True)
    buffer += child.stdout.read()
    for line in buffer.decode().splitlines():
        if line.startswith("ACK ") and line.count(" ") == 2 and len(line) > 70:
            _, seq, digest = line.split(" ")
            acked[int(seq)] = digest
    stderr = child.stderr.read().decode() if child.stderr else ""
    assert "Traceback" not in stderr, stderr
    with DirectoryStore(store_dir) as store:
        for repair in store.repairs:
            assert repair.saved_to is not None and Path(repair.saved_to).exists()
        entries = {entry.seq: entry.hash for entry in store.iter_entries()}
        for seq, digest in acked.items():
            assert entries.get(seq) == digest, f"acknowledged entry {seq} lost in trial {trial}"
        report = verify_store(store)
        assert report.ok, report.issue
        return len(acked), len(store.repairs)


def _run_trials(store_dir: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    total = 0
    for trial in range(count):
        acked, _ = _kill_trial(store_dir, rng, trial)
        total += acked
    assert total > 0


def test_kill_minus_nine_loses_nothing_acknowledged(tmp_path: Path) -> None:
    _run_trials(tmp_path / "store", count=20, seed=7)


@pytest.mark.slow
def test_kill_minus_nine_many_trials(tmp_path: Path) -> None:
    _run_trials(tmp_path / "store", count=300, seed=11)


def _build(store_dir: Path, runs: int = 4) -> list[bytes]:
    with DirectoryStore(store_dir) as store:
        for number in range(runs):
            record_run(store, f"r{number}")
    return (store_dir / "journal.log").read_bytes().splitlines(keepends=True)


def _write(store_dir: Path, lines: list[bytes]) -> None:
    (store_dir / "journal.log").write_bytes(b"".join(lines))


def _verify_fails(store_dir: Path) -> str:
    with DirectoryStore(store_dir, read_only=True) as store:
        report = verify_store(store)
    assert not report.ok, "tampering went undetected"
    assert report.issue is not None
    return report.issue.code


def test_torn_tail_is_cut_and_kept_aside(store_dir: Path) -> None:
    lines = _build(store_dir)
    _write(store_dir, lines + [b'{"i":0,"kind":"run.st'])
    with DirectoryStore(store_dir, read_only=True) as reader:
        report = verify_store(reader)
        assert report.ok and report.notes
    with DirectoryStore(store_dir) as store:
        assert len(store.repairs) == 1
        saved = Path(store.repairs[0].saved_to or "")
        assert saved.read_bytes() == b'{"i":0,"kind":"run.st'
        assert verify_store(store).ok
        record_run(store, "after")
    assert (store_dir / "journal.log").read_bytes().startswith(b"".join(lines))


def test_damaged_last_line_is_reported_by_verify_and_cut_by_a_writer(store_dir: Path) -> None:
    # Garbage in a complete last line written after the last sync (what a power loss can
    # leave) fails verification until a writer opens the store, which cuts it and keeps it
    # aside. (A well-formed rewrite of the very last entry is indistinguishable from a
    # different last entry: only a signed checkpoint can tell, see the evidence layer.)
    lines = _build(store_dir)
    damaged = lines[-1][:40] + b"\x00\x00garbage\n"
    _write(store_dir, lines + [damaged])
    assert _verify_fails(store_dir)
    with DirectoryStore(store_dir) as store:
        assert len(store.repairs) == 1
        assert verify_store(store).ok


def test_damage_to_a_synced_last_line_is_never_repaired(store_dir: Path) -> None:
    lines = _build(store_dir)
    damaged = lines[-1][:40] + b"garbage" + lines[-1][47:]
    _write(store_dir, lines[:-1] + [damaged])
    with pytest.raises(JournalCorruptError) as caught:
        DirectoryStore(store_dir)
    assert "not a torn write" in caught.value.message
    assert (store_dir / "journal.log").read_bytes() == b"".join(lines[:-1] + [damaged])
    assert not (store_dir / "quarantine").exists()


def test_damage_before_the_tail_is_never_repaired(store_dir: Path) -> None:
    lines = _build(store_dir)
    entry_lines = [n for n, line in enumerate(lines) if line.startswith(b"{")]
    middle = entry_lines[len(entry_lines) // 2]
    lines[middle] = lines[middle].replace(b'"kind":"', b'"kind":"x', 1)
    _write(store_dir, lines)
    (store_dir / "index.sqlite").unlink()
    with pytest.raises(JournalCorruptError):
        DirectoryStore(store_dir)
    assert (store_dir / "journal.log").read_bytes() == b"".join(lines)
    assert _verify_fails(store_dir)


def _entry_positions(lines: list[bytes]) -> list[int]:
    return [n for n, line in enumerate(lines) if line.startswith(b"{")]


def test_every_single_byte_flip_in_an_entry_is_detected(store_dir: Path) -> None:
    lines = _build(store_dir, runs=2)
    target = _entry_positions(lines)[2]
    original = lines[target]
    for position in range(len(original) - 1):
        mutated = bytearray(original)
        mutated[position] ^= 0x01
        _write(store_dir, lines[:target] + [bytes(mutated)] + lines[target + 1 :])
        _verify_fails(store_dir)


def test_flipped_payload_byte_is_detected(store_dir: Path) -> None:
    lines = _build(store_dir)
    payload_line = next(n for n, line in enumerate(lines) if line.startswith(b"="))
    mutated = bytearray(lines[payload_line])
    mutated[70] ^= 0x02
    lines[payload_line] = bytes(mutated)
    _write(store_dir, lines)
    assert _verify_fails(store_dir) == "PAYLOAD_HASH_MISMATCH"


@pytest.mark.parametrize("which", ["first", "middle", "last-of-a-run"])
def test_deleted_entry_is_detected(store_dir: Path, which: str) -> None:
    lines = _build(store_dir)
    positions = _entry_positions(lines)
    index = {"first": positions[0], "middle": positions[len(positions) // 2], "last-of-a-run": positions[3]}[which]
    del lines[index]
    _write(store_dir, lines)
    _verify_fails(store_dir)


def test_inserted_entry_is_detected(store_dir: Path) -> None:
    lines = _build(store_dir)
    positions = _entry_positions(lines)
    lines.insert(positions[5], lines[positions[1]])
    _write(store_dir, lines)
    _verify_fails(store_dir)


def test_reordered_entries_are_detected(store_dir: Path) -> None:
    lines = _build(store_dir)
    a, b = _entry_positions(lines)[4:6]
    lines[a], lines[b] = lines[b], lines[a]
    _write(store_dir, lines)
    _verify_fails(store_dir)


def test_duplicated_entry_is_detected(store_dir: Path) -> None:
    lines = _build(store_dir)
    position = _entry_positions(lines)[3]
    lines.insert(position + 1, lines[position])
    _write(store_dir, lines)
    _verify_fails(store_dir)


def test_entry_pointing_at_a_missing_payload_is_detected(store_dir: Path) -> None:
    lines = _build(store_dir)
    payload_line = next(n for n, line in enumerate(lines) if line.startswith(b"="))
    del lines[payload_line]
    _write(store_dir, lines)
    assert _verify_fails(store_dir) == "PAYLOAD_MISSING"


def test_an_index_ahead_of_a_lost_write_does_not_hide_the_hole(tmp_path: Path) -> None:
    # The index is never synced, so after a power cut it can cover records written after
    # the last sync. When one of their sectors never reached the disk, the open must still
    # find the hole and cut it, not skip it because the index says those bytes are fine.
    live = tmp_path / "live"
    store = DirectoryStore(live)
    record_run(store, "r0")
    synced = len((live / "journal.log").read_bytes().rstrip(b"\0"))
    for number in range(6):
        kind = "run.start" if number == 0 else "effect"
        store.append("r1", kind, payload={"n": number, "text": "z" * 700}, durable=False)
    store.flush()  # written and indexed, not synced
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    store.close()
    data = bytearray((crashed / "journal.log").read_bytes())
    hole = (synced // 512 + 1) * 512
    data[hole : hole + 512] = bytes(512)
    (crashed / "journal.log").write_bytes(bytes(data))
    with DirectoryStore(crashed) as reopened:
        assert [repair.offset for repair in reopened.repairs] == [synced]
        assert verify_store(reopened).ok
        assert reopened.size() == 4
