"""The journal under storage faults, on a simulated disk (``_simdisk``): power cuts that
lose, tear or reorder the writes after the last sync, and syncs that fail.

After any power cut the store opens, verifies, keeps every acknowledged entry, and
recovery never runs an irreversible effect twice. Damage that a power cut cannot produce
(in bytes the store recorded as synced, or followed by a record that continues the
chain) is refused, whether the index exists or not.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage._simdisk import MODES, PowerCut, SimDisk
from tests.storage.storage_helpers import TickClock, record_run
from tracelock.core.entry import Entry
from tracelock.runtime.records import load_run
from tracelock.runtime.runtime import Runtime
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.storage.backend import NewEntry
from tracelock.storage.directory import DirectoryStore
from tracelock.storage.directory.synced_mark import MARK_FILE, SyncedMark, encode_mark
from tracelock.storage.errors import DurabilityError, JournalCorruptError, StoreClosedError
from tracelock.storage.verify import verify_store

POLICY = {"version": 1, "tools": [{"name": "lookup"}, {"name": "pay"}]}


class AckedStore(DirectoryStore):
    """A directory store that remembers what it acknowledged: an append returned durable,
    or a sync returned (entries become durable in seq order, so a prefix)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.appended: list[Entry] = []
        self.acked = 0
        super().__init__(*args, **kwargs)

    def append(self, run: str, kind: str, *, durable: bool = True, **kwargs: Any) -> Entry:
        entry = super().append(run, kind, durable=durable, **kwargs)
        self.appended.append(entry)
        if durable:
            self.acked = entry.seq + 1
        return entry

    def append_many(self, items: Sequence[NewEntry], *, durable: bool = True) -> list[Entry]:
        entries = super().append_many(items, durable=durable)
        self.appended += entries
        if durable and entries:
            self.acked = entries[-1].seq + 1
        return entries

    def sync(self) -> None:
        super().sync()
        if self.appended:
            self.acked = self.appended[-1].seq + 1

    def close_quietly(self) -> None:
        """Let go of the files after a power cut (nothing reaches the simulated disk)."""
        with contextlib.suppress(PowerCut):
            self.close()


class World:
    """The outside world the tools act on: it survives every power cut of the machine."""

    def __init__(self) -> None:
        self.payments: Counter[tuple[str, int]] = Counter()
        self.kit = Toolkit()
        self.runs = 0

        @self.kit.tool(timeout=None)
        def lookup(key: str) -> str:
            return key.upper() * 400  # spans sectors: a power cut can tear it

        @self.kit.tool(side_effect="irreversible", timeout=None)
        def pay(order: str, amount: int) -> str:
            self.payments[(order, amount)] += 1  # looked up at call time: tests swap the ledger
            return f"paid {order}"

        @self.kit.agent("payer")
        def agent(ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
            found = ctx.call("lookup", key=task["order"])
            paid = ctx.call("pay", order=task["order"], amount=task["amount"])
            return {"found": found, "paid": paid}

        self.agent = agent

    def new_id(self) -> str:
        self.runs += 1
        return f"run-{self.runs}"


def _runtime(store: DirectoryStore, world: World) -> Runtime:
    return Runtime(store, POLICY, toolkits=(world.kit,), clock=TickClock(), ids=world.new_id, strict=False)


def _workload(store: DirectoryStore, world: World, runs: int, first: int = 0) -> None:
    with _runtime(store, world) as runtime:  # the store is not the runtime's to close
        for number in range(first, first + runs):
            runtime.run(world.agent, {"order": f"o{number}", "amount": number + 1})


def _check_crash_image(store_dir: Path, acked: list[Entry], world: World, *, recover: bool) -> Counter[str]:
    """Open a crash image and check it; returns what happened (``repaired``, and with
    ``recover`` the runs' statuses after recovery)."""
    seen: Counter[str] = Counter()
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        seen["repaired"] += bool(store.repairs)
        for repair in store.repairs:
            assert repair.offset >= 0 and repair.saved_to and Path(repair.saved_to).exists()
        present = {entry.seq: entry.hash for entry in store.iter_entries()}
        for entry in acked:
            assert present.get(entry.seq) == entry.hash, f"acknowledged entry {entry.seq} lost"
        report = verify_store(store)
        assert report.ok, report.issue
        if recover:
            before = dict(world.payments)
            with _runtime(store, world) as runtime:
                runtime.recover()
            for key, count in world.payments.items():
                assert count <= 1, f"irreversible effect {key} ran {count} times"
                # Recovery may run a payment the crash interrupted before its intent was
                # durable, never one that had already run.
                assert count == before.get(key, 0) or before.get(key, 0) == 0
            assert verify_store(store).ok
            for info in store.runs():
                record = load_run(store, info.run)
                assert record.status in ("completed", "blocked"), (info.run, record.status)
                seen[record.status] += 1
    return seen


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory when the machine has one: a crash image's store creates an
    index file, which costs far more than the check itself on a real disk."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="tracelock-faults-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _cut_and_check(
    tmp: Path, runs: int, cut: int, images: int, seed: int, recover_every: int, seen: Counter[str] | None = None
) -> int:
    """Run the workload on a simulated disk, cut the power before disk operation ``cut``,
    then check ``images`` crash images. Returns how many distinct images were checked
    (and adds what happened to them to ``seen``)."""
    disk = SimDisk()
    world = World()
    source = tmp / "live"
    store = AckedStore(source, files=disk, clock=TickClock())
    disk.cut_at = cut
    with contextlib.suppress(PowerCut):
        _workload(store, world, runs)
    acked = store.appended[: store.acked]
    paid = Counter(world.payments)
    rng = random.Random(seed)
    distinct: set[bytes] = set()
    for number in range(images):
        target = tmp / f"image-{number}"
        mode = MODES[number % len(MODES)]
        keep_index = number % 2 == 0
        image = disk.crash_copy(source, target, rng, mode, keep_index=keep_index)
        key = bytes([keep_index]) + image
        if key in distinct:
            shutil.rmtree(target)
            continue
        distinct.add(key)
        world.payments = Counter(paid)  # each image is its own world after the cut
        outcome = _check_crash_image(target, acked, world, recover=len(distinct) % recover_every == 1)
        if seen is not None:
            seen.update(outcome)
        shutil.rmtree(target)
    store.close_quietly()
    return len(distinct)


def _operations(tmp: Path, runs: int) -> int:
    disk = SimDisk()
    with AckedStore(tmp / "uncut", files=disk, clock=TickClock()) as store:
        _workload(store, World(), runs)
    return disk.operations


def _sweep(tmp: Path, runs: int, images: int) -> int:
    """Cut the power before every disk operation of a workload in turn; returns how many
    distinct crash images were checked."""
    operations = _operations(tmp, runs)
    assert operations > 5 * runs
    checked = 0
    seen: Counter[str] = Counter()
    for cut in range(1, operations + 2):
        checked += _cut_and_check(tmp / f"cut-{cut}", runs, cut, images=images, seed=cut, recover_every=4, seen=seen)
    # The sweep reached the cases that matter: unfinished writes cut, runs completed by
    # recovery, and runs blocked on a payment whose result the cut lost.
    assert seen["repaired"] and seen["completed"] and seen["blocked"], seen
    return checked


def test_power_cuts_keep_every_acknowledged_entry_and_never_repeat_a_payment(fast_tmp: Path) -> None:
    assert _sweep(fast_tmp, runs=8, images=60) > 1000


@pytest.mark.slow
def test_power_cuts_many_more_images(fast_tmp: Path) -> None:
    assert _sweep(fast_tmp, runs=12, images=300) > 4000


_OPERATIONS: dict[int, int] = {}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.integers(1, 5), position=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_property_any_power_cut_is_survived(fast_tmp: Path, runs: int, position: float, seed: int) -> None:
    if runs not in _OPERATIONS:
        _OPERATIONS[runs] = _operations(fast_tmp / f"count-{runs}", runs)
    cut = 1 + int(position * _OPERATIONS[runs])
    tmp = fast_tmp / f"cut-{runs}-{cut}-{seed}"
    assert _cut_and_check(tmp, runs, cut, images=60, seed=seed, recover_every=4) >= 1


def test_an_index_that_covers_a_lost_write_is_not_trusted(fast_tmp: Path) -> None:
    # The index is never synced: after a power cut it can describe records written after
    # the last sync that did not all reach the disk. The hole must still be found and cut.
    disk = SimDisk()
    source = fast_tmp / "live"
    store = AckedStore(source, files=disk, clock=TickClock())
    record_run(store, "r0")
    for number in range(6):
        kind = "run.start" if number == 0 else "effect"
        store.append("r1", kind, payload={"n": number, "text": "z" * 700}, durable=False)
    store.flush()  # written and indexed, not synced
    acked = store.appended[: store.acked]
    rng = random.Random(3)
    holes = 0
    for number in range(30):
        target = fast_tmp / f"image-{number}"
        image = disk.crash_copy(source, target, rng, "out_of_order", keep_index=True)
        holes += b"\0" in image.split(b"\0/")[0].rstrip(b"\0")
        _check_crash_image(target, acked, World(), recover=False)
    assert holes > 5
    store.close()


# -- fsync failure --------------------------------------------------------------------------


def test_a_failed_sync_is_fatal_never_retried_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    disk = SimDisk()
    source = tmp_path / "live"
    store = AckedStore(source, files=disk, clock=TickClock())
    record_run(store, "r0")
    disk.fail_sync_at = disk.syncs + 2
    with pytest.raises(DurabilityError):
        for number in range(1, 10):
            record_run(store, f"r{number}")
    attempts = disk.syncs
    assert disk.failed_syncs == 1
    for call in (
        lambda: store.append("r9", "run.start", payload={"input": "x"}),
        lambda: store.append("late", "run.start", payload={"input": "x"}, durable=False),
        store.sync,
    ):
        with pytest.raises((DurabilityError, StoreClosedError)):
            call()
    assert disk.syncs == attempts, "a failed sync was retried"
    acked = store.appended[: store.acked]
    assert len(acked) == 5  # r0, and the start of r1 (its end needed the failed sync)
    rng = random.Random(5)
    for number, mode in enumerate(MODES * 4):
        target = tmp_path / f"image-{number}"
        disk.crash_copy(source, target, rng, mode, keep_index=number % 2 == 0)
        _check_crash_image(target, acked, World(), recover=False)


@pytest.mark.parametrize(("failing", "paid"), [(1, 0), (2, 1)])  # the intent's sync, the result's
def test_a_failed_sync_fails_a_runtime_run_and_its_payment_is_not_repeated(tmp_path: Path, failing: int, paid: int) -> None:
    disk = SimDisk()
    world = World()
    source = tmp_path / "live"
    store = AckedStore(source, files=disk, clock=TickClock())
    _workload(store, world, 1)
    disk.fail_sync_at = disk.syncs + failing
    with pytest.raises(DurabilityError):
        _workload(store, world, 2, first=1)
    assert disk.failed_syncs == 1
    assert world.payments[("o1", 2)] == paid
    acked = store.appended[: store.acked]
    for number, mode in enumerate(MODES):
        image_world = World()
        image_world.payments = Counter(world.payments)
        disk.crash_copy(source, tmp_path / f"image-{number}", random.Random(number), mode, keep_index=False)
        _check_crash_image(tmp_path / f"image-{number}", acked, image_world, recover=True)


# -- damage a power cut cannot produce --------------------------------------------------------


def _synced_store(store_dir: Path, runs: int = 4) -> bytes:
    with DirectoryStore(store_dir, clock=TickClock()) as store:
        for number in range(runs):
            record_run(store, f"r{number}")
    return (store_dir / "journal.log").read_bytes()


@pytest.mark.parametrize("index", [True, False])
def test_one_nul_byte_in_the_middle_is_refused_with_or_without_the_index(store_dir: Path, index: bool) -> None:
    data = bytearray(_synced_store(store_dir))
    data[len(data) // 2] = 0
    (store_dir / "journal.log").write_bytes(bytes(data))
    if not index:
        (store_dir / "index.sqlite").unlink()
    if index:
        with DirectoryStore(store_dir) as store:  # the index covers it: reads find it
            assert store.repairs == []
            assert not verify_store(store).ok
    else:
        with pytest.raises(JournalCorruptError) as caught:
            DirectoryStore(store_dir)
        assert caught.value.details["offset"] <= len(data) // 2
    assert (store_dir / "journal.log").read_bytes() == bytes(data)
    assert not (store_dir / "quarantine").exists()


def test_damage_past_the_mark_followed_by_a_chained_record_is_refused(store_dir: Path) -> None:
    # The mark lags (a power cut lost its last updates), but the line with NUL bytes is
    # followed by records that continue the chain: not something a crash can leave.
    data = _synced_store(store_dir)
    lines = data.splitlines(keepends=True)
    target = len(lines) - 4
    start = sum(map(len, lines[:target]))
    (store_dir / MARK_FILE).write_bytes(encode_mark(start - 10))
    (store_dir / "journal.log").write_bytes(b"".join(lines[:target] + [b"\0\0junk\n"] + lines[target:]))
    (store_dir / "index.sqlite").unlink()
    with pytest.raises(JournalCorruptError) as caught:
        DirectoryStore(store_dir)
    assert "continues the chain" in caught.value.message
    assert not (store_dir / "quarantine").exists()


def test_a_complete_bad_line_without_nul_bytes_is_never_a_torn_write(store_dir: Path) -> None:
    data = _synced_store(store_dir)
    (store_dir / "journal.log").write_bytes(data + b'{"not":"an entry"}\n')  # past the mark
    with pytest.raises(JournalCorruptError) as caught:
        DirectoryStore(store_dir)
    assert "not a torn write" in caught.value.message
    assert (store_dir / "journal.log").read_bytes() == data + b'{"not":"an entry"}\n'


def test_a_store_without_a_mark_refuses_a_hole_followed_by_valid_entries(store_dir: Path) -> None:
    data = bytearray(_synced_store(store_dir))
    data[len(data) // 2] = 0
    (store_dir / "journal.log").write_bytes(bytes(data))
    (store_dir / MARK_FILE).unlink()
    (store_dir / "index.sqlite").unlink()
    with pytest.raises(JournalCorruptError) as caught:
        DirectoryStore(store_dir)
    assert "no synced mark" in caught.value.message


def test_a_store_without_a_mark_gets_one_when_a_writer_opens_it(store_dir: Path) -> None:
    data = _synced_store(store_dir)
    (store_dir / MARK_FILE).unlink()
    with DirectoryStore(store_dir) as store:
        assert store.repairs == []
    assert (store_dir / MARK_FILE).read_bytes() == encode_mark(len(data))


def test_a_truncated_journal_is_refused(store_dir: Path) -> None:
    data = _synced_store(store_dir)
    (store_dir / "journal.log").write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    with pytest.raises(JournalCorruptError) as caught:
        DirectoryStore(store_dir)
    assert "acknowledged records are missing" in caught.value.message


def test_the_mark_follows_every_sync_and_survives_a_torn_slot(store_dir: Path) -> None:
    disk = SimDisk()
    with DirectoryStore(store_dir, files=disk, clock=TickClock()) as store:
        record_run(store, "r0")
        mark = disk.files[(store_dir / MARK_FILE).resolve()]
        journal = disk.files[(store_dir / "journal.log").resolve()]
        assert bytes(mark.volatile) != bytes(mark.durable)  # recorded, never synced
        durable_end = len(bytes(journal.durable).rstrip(b"\0"))
        assert SyncedMark(disk.open(store_dir / MARK_FILE, write=False)).read() == durable_end
        # Tear the slot that holds it: the other one still holds an earlier, smaller value.
        latest = 0 if bytes(mark.volatile[:16]) == encode_mark(durable_end)[:16] else 16
        mark.volatile[latest + 3] ^= 0xFF
        value = SyncedMark(disk.open(store_dir / MARK_FILE, write=False)).read()
        assert value is not None and value < durable_end
        mark.volatile[(latest + 16) % 32 + 5] ^= 0xFF  # both torn: the mark is unknown
        assert SyncedMark(disk.open(store_dir / MARK_FILE, write=False)).read() is None
        mark.volatile[:] = mark.durable


@settings(max_examples=200, deadline=None)
@given(old=st.integers(0, 2**63), new=st.integers(0, 2**63), torn=st.integers(0, 16))
def test_a_torn_mark_slot_reads_as_the_old_value_the_new_one_or_nothing(old: int, new: int, torn: int) -> None:
    class Bytes:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def pread(self, length: int, offset: int) -> bytes:
            return self.data[offset : offset + length]

    slot = encode_mark(new)[:torn] + encode_mark(old)[torn:16]
    value = SyncedMark(Bytes(slot + slot)).read()  # type: ignore[arg-type]
    assert value in (old, new, None)
