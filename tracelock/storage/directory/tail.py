"""Judging the records past the indexed end of the journal: chain-checking them, and telling a
torn tail (an unfinished write, cut and quarantined by a writer) from damage (refused)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from tracelock.core.entry import ChainChecker, Entry, EntryFormatError, parse_entry
from tracelock.storage.backend import Repair
from tracelock.storage.directory.files import write_durably
from tracelock.storage.directory.journal import ENTRY, PAYLOAD, REDACTED, Record, scan_records
from tracelock.storage.directory.lookup import JournalLookup
from tracelock.storage.directory.shared_end import SharedEnd
from tracelock.storage.directory.state import NUL
from tracelock.storage.directory.synced_mark import MARK_FILE, SyncedMark, encode_mark
from tracelock.storage.errors import JournalCorruptError

__all__ = ["TailJudge"]


class TailJudge(JournalLookup):
    """Checks new journal records and decides what a bad tail is."""

    def _sound_records(
        self, start: int, size: int, checker: ChainChecker, synced: int | None
    ) -> Iterator[tuple[Record, Entry | None]]:
        """The records from byte ``start`` that pass the journal's rules, in order, each with
        its parsed entry (None for a payload record). At the first that does not, it is
        judged (section 3.5: an unfinished write is cut, anything else is corruption and
        raises) and nothing more is yielded."""
        known: set[bytes] = set()
        records = scan_records(self._file, start, size)
        for item in records:
            if isinstance(item, tuple):
                self._judge_tail(item[0], "torn tail: last record has no newline", records, checker, known, synced, size)
                return
            # No record holds a NUL byte, but free space does: blocks of a write that never
            # reached the disk read back as NULs.
            if NUL in item.data:
                self._judge_tail(item.offset, "NUL bytes inside a record", records, checker, known, synced, size)
                return
            problem, entry = self._checked(item, checker, known)
            if problem is not None:
                # A complete line without NUL bytes is exactly what was written to it: no
                # crash leaves one that is wrong.
                self._corrupt(item.offset, f"{problem}, in a complete record without NUL bytes", synced)
                return
            yield item, entry

    def _judge_tail(
        self,
        offset: int,
        reason: str,
        rest: Iterator[Record | tuple[int, bytes]],
        checker: ChainChecker,
        known: set[bytes],
        synced: int | None,
        size: int,
    ) -> None:
        """Decide about the first bad record (at ``offset``), one a crash can leave (the
        last record without its newline, or a record with NUL bytes): cut it with
        everything after it as an unfinished write, or report corruption.

        It is an unfinished write only if both hold: it starts at or after the synced mark
        (every byte before the mark was synced, and a crash never damages synced bytes),
        and no record after it continues the chain (the record a crash interrupts is
        followed only by records written with it, after the last sync, which cannot
        continue the chain across the bytes it lost). Without a mark (a store written before
        marks existed), no entry after it may even parse.
        """
        if synced is not None and offset < synced:
            self._corrupt(
                offset,
                f"{reason}, before byte {synced}, which the store recorded as synced: "
                "a crash cannot damage synced bytes",
                synced,
            )
            return
        follower = self._follower(rest, checker, known, strict=synced is not None)
        if follower is not None:
            self._corrupt(
                offset,
                f"{reason}, and the record at byte {follower} after it "
                + ("continues the chain" if synced is not None else "is a valid entry (the store has no synced mark)"),
                synced,
            )
            return
        tail = self._file.pread(size - offset, offset)
        self._handle_bad_tail(offset, tail, reason, synced)

    def _follower(
        self,
        rest: Iterator[Record | tuple[int, bytes]],
        checker: ChainChecker,
        known: set[bytes],
        *,
        strict: bool,
    ) -> int | None:
        """The offset of the first entry in ``rest`` that continues the chain (``strict``)
        or merely parses, or None."""
        for item in rest:
            if isinstance(item, tuple) or NUL in item.data:
                continue
            if item.kind == ENTRY:
                if not strict:
                    try:
                        parse_entry(item.data)
                    except EntryFormatError:
                        continue
                    return item.offset
                expected = checker.next_seq
                if self._check_record(item, checker, known) is None:
                    return item.offset
                checker.next_seq = expected
            else:
                self._check_record(item, checker, known)  # learns the payloads it holds
        return None

    def _corrupt(self, offset: int, reason: str, synced: int | None) -> None:
        """Report damage: a writer refuses to open; a reader notes it (once) and indexes
        what precedes it, leaving the verdict to verification."""
        error = JournalCorruptError(
            f"journal record at byte {offset} is damaged: {reason} (corruption or tampering, "
            "not a torn write: nothing was repaired; run `tracelock verify --store` for details)",
            details={"offset": offset, "reason": reason, "synced": synced},
        )
        if not self._read_only:
            raise error
        if self.damage is None:
            self.damage = error

    def _record_mark(self, end: int) -> SyncedMark:
        """Make the journal durable up to ``end`` and record that in the mark (at open, so
        that the mark is exact from the start; created if the store had none), and set the
        writers' shared counters to ``end`` (``shared_end``). A writer, under the lock."""
        synced = self._mark.read() if self._mark is not None else None
        if synced != end or self._mark is None:
            self._file.fdatasync()  # what a killed writer left in the page cache, too
            if self._mark is None:
                write_durably(self._path / MARK_FILE, encode_mark(end))
                self._mark = SyncedMark.open(self._files, self._path, write=True)
                assert self._mark is not None
            else:
                self._mark.reset(end)
                self._mark.sync()
        if self._mark.shared is None:
            self._mark.shared = SharedEnd(self._path)
        self._mark.shared.reset(end)
        return self._mark

    def _check_record(self, record: Record, checker: ChainChecker, known: set[bytes]) -> str | None:
        return self._checked(record, checker, known)[0]

    def _checked(self, record: Record, checker: ChainChecker, known: set[bytes]) -> tuple[str | None, Entry | None]:
        """What is wrong with ``record`` (None: nothing), and its entry once parsed."""
        if record.kind == ENTRY:
            try:
                entry = parse_entry(record.data)
            except EntryFormatError as exc:
                return exc.message, None
            issue = checker.check(entry)
            if issue is not None:
                return issue.message, entry
            if entry.payload is not None:
                digest = bytes.fromhex(entry.payload)
                if digest not in known and not self._payload_stored(digest):
                    return f"entry {entry.seq} references payload {entry.payload} that is not stored", entry
            return None, entry
        return self._check_payload_record(record, known), None

    def _check_payload_record(self, record: Record, known: set[bytes]) -> str | None:
        if record.kind == PAYLOAD:
            digest = record.data[1:65]
            if hashlib.sha256(record.data[66:]).hexdigest().encode() != digest:
                return "payload record does not match its hash"
            known.add(bytes.fromhex(digest.decode()))
            return None
        if record.kind == REDACTED:
            if record.data[66:].strip(b" "):
                return "redacted payload record still holds data (interrupted redaction?)"
            known.add(bytes.fromhex(record.data[1:65].decode()))
            return None
        return "unrecognized record"

    def _payload_stored(self, digest: bytes) -> bool:
        """Whether a payload record precedes the records being checked: in the index, or
        one this handle wrote or caught up on whose row is not in the index yet."""
        if digest in self._payloads:
            return True
        with self._index_lock:
            if self._index.payload_location(digest) is not None:
                return True
        return any(row[0] == digest for _, row in self._pending.payloads)

    def _handle_bad_tail(self, offset: int, data: bytes, reason: str, synced: int | None) -> None:
        if self._read_only or not self._writable:
            # Only a writer repairs; a reader (verify, log, show) stops before the bad tail
            # and leaves its judgement to verification.
            self._tail_fragment = (offset, len(data))
            return
        quarantine = self._path / "quarantine"
        quarantine.mkdir(exist_ok=True)
        saved = quarantine / f"tail-{offset}-{len(data)}.bin"
        write_durably(saved, data)
        self._file.truncate(offset)
        self._file.fdatasync()
        self._repairs.append(
            Repair(
                what=reason,
                offset=offset,
                length=len(data),
                saved_to=str(saved),
                details={
                    "synced_mark": synced,
                    "note": "never acknowledged: damage only a crash leaves, past the synced "
                    "mark, and no record after it continues the chain (docs/spec.md 3.5)",
                },
            )
        )
