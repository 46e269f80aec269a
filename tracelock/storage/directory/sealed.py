"""Sealed segments: the synced start of the journal, kept compressed.

Once enough of ``journal.log`` is durable (:data:`SEAL_BYTES` past the last segment), the
writer that commits copies that stretch, which ends at a record boundary, into one segment
file under ``sealed/``: the bytes cut into frames of :data:`FRAME_BYTES`, each frame
compressed on its own (Zstandard, with its content checksum), so that one record is read
back by decompressing one frame. Only after the segment is durable and read back to the
same bytes does it free the stretch's whole blocks in ``journal.log`` (``fallocate`` with
``FALLOC_FL_PUNCH_HOLE``): the file keeps its size and every offset keeps its meaning, so
the index, the synced mark and every rule of the journal are unchanged. The journal is
still one sequence of bytes; :class:`SealedJournal` reads it, serving offsets below the
sealed end from the segments and the rest from the file. ``docs/spec.md`` section 3.8
defines the segment format and the order of the steps; the argument that a crash at any
step loses nothing is there too.

Another process may seal while a handle is open. A hole it punched reads as NUL bytes, which
is what free space and lost writes also read as; so whenever a read returns a NUL byte, the
reader asks the file system whether that byte is a hole (``SEEK_DATA``; free space is
written NUL bytes, never a hole) and, if it is, looks for new segments before answering.
A segment is published (renamed into place, its directory synced) before any block is
punched, so the bytes are always in one place or the other. Decoded frames are cached per
handle; a redaction rewrites a segment and increments ``sealed/generation``, which every
handle maps and compares at the start of each read, dropping its frames when it changed.

Why by hand: Zstandard comes from the ``zstandard`` package; what no library provides is
the mapping of journal offsets onto frames and the crash-safe order of the steps.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import functools
import hashlib
import mmap
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate, pairwise
from pathlib import Path

import zstandard

from tracelock.storage.directory.fileio import JournalFile, OSFile
from tracelock.storage.directory.files import fsync_dir
from tracelock.storage.errors import SegmentCorruptError

__all__ = [
    "FRAME_BYTES",
    "MAX_SEGMENT_BYTES",
    "SEALED_DIR",
    "SEAL_BYTES",
    "Segment",
    "SealedJournal",
    "decode_segment",
    "encode_segment",
    "open_journal",
    "segment_name",
    "wrap",
]

#: The folder of a store that holds its segments.
SEALED_DIR = "sealed"
#: A writer seals once this much of the journal past the last segment is durable.
SEAL_BYTES = 1 << 20
#: The most one seal takes (a record longer than this goes whole, in a segment of its own).
MAX_SEGMENT_BYTES = 8 << 20
#: Bytes of the journal per compressed frame (the last frame of a segment may be shorter).
#: A read of one run decodes one frame: 32 KiB decode in about 10 µs (64 KiB: 18 µs) for
#: 7% more bytes on disk than 64 KiB frames (measured on the README's workload).
FRAME_BYTES = 1 << 15
#: Zstandard level 1: on journal bytes it was both faster than the library's default (3)
#: and a little smaller (5.85x against 5.68x, 0.8 against 1.1 ms per MiB, measured).
_LEVEL = 1

_MAGIC = b"TLSEG\x00\x00\x01"
#: The rewrite count readers map (``sealed/generation``: 8 bytes, little-endian).
_GENERATION = "generation"
_COUNT = struct.Struct("<Q")
# magic, start, end, frame bytes, frame count, SHA-256 of the journal bytes
_HEADER = struct.Struct("<8sQQII32s")
_LENGTH = struct.Struct("<I")
#: What opening a segment reads first: the header and the frame table of any segment up to
#: MAX_SEGMENT_BYTES in frames of FRAME_BYTES (256 frames), in one read.
_HEAD_READ = 4096
_DIGEST = 32
_NUL = b"\0"
#: Decompressed frames kept per handle: a run's records lie in one or two frames.
_CACHED_FRAMES = 8
#: Segment files kept open per handle (closed when the generation count changes).
_OPEN_SEGMENTS = 4

_NO_FRAME: tuple[int, int, bytes] = (0, 0, b"")

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


def segment_name(start: int) -> str:
    """The file name of the segment that starts at journal offset ``start``."""
    return f"{start:016x}.seg"


def encode_segment(start: int, data: bytes, *, frame_bytes: int = FRAME_BYTES) -> bytes:
    """The segment file holding ``data``, the journal's bytes from offset ``start``."""
    compressor = zstandard.ZstdCompressor(level=_LEVEL, write_checksum=True, write_content_size=True)
    frames = [compressor.compress(data[at : at + frame_bytes]) for at in range(0, len(data), frame_bytes)]
    head = _HEADER.pack(
        _MAGIC, start, start + len(data), frame_bytes, len(frames), hashlib.sha256(data).digest()
    )
    body = b"".join([head, *(_LENGTH.pack(len(frame)) for frame in frames), *frames])
    return body + hashlib.sha256(body).digest()


@dataclass(frozen=True)
class Segment:
    """A segment's header: where its bytes lie in the journal and where each frame lies in
    the file."""

    path: Path
    start: int
    end: int
    frame_bytes: int
    #: (offset in the file, compressed length) of each frame
    frames: tuple[tuple[int, int], ...]
    digest: bytes
    #: (inode, modification time) of the file the header was read from
    stamp: tuple[int, int]


def _header(path: Path, head: bytes, size: int, stamp: tuple[int, int]) -> Segment:
    if len(head) < _HEADER.size:
        raise _corrupt(path, "shorter than a segment header")
    magic, start, end, frame_bytes, count, digest = _HEADER.unpack_from(head)
    if magic != _MAGIC:
        raise _corrupt(path, "not a tracelock segment (bad magic)")
    if path.name != segment_name(start) or end <= start or frame_bytes <= 0:
        raise _corrupt(path, f"header names the range [{start}, {end}) in frames of {frame_bytes}")
    if count != -(-(end - start) // frame_bytes):
        raise _corrupt(path, f"{count} frames cannot hold {end - start} bytes in frames of {frame_bytes}")
    table_end = _HEADER.size + _LENGTH.size * count
    if len(head) < table_end:
        raise _corrupt(path, "its frame table is cut short")
    # The whole table in one call: a store opens by reading every segment's header, so
    # a loop of one unpack per frame made opening a store of 100k runs cost 5 ms more.
    lengths = struct.unpack_from(f"<{count}I", head, _HEADER.size)
    offsets = tuple(accumulate(lengths, initial=table_end))
    if offsets[-1] + _DIGEST != size:
        raise _corrupt(path, f"its frames end at byte {offsets[-1]} of a {size}-byte file")
    return Segment(path, start, end, frame_bytes, tuple(zip(offsets[:-1], lengths, strict=True)), digest, stamp)


def _header_of(path: Path, fd: int) -> Segment:
    """The header of the segment file open as ``fd``."""
    status = os.fstat(fd)
    head = os.pread(fd, _HEAD_READ, 0)  # the header and, usually, the whole frame table
    if len(head) >= _HEADER.size and head[:8] == _MAGIC:
        table_end = _HEADER.size + _LENGTH.size * _HEADER.unpack_from(head)[4]
        # A damaged count could ask for gigabytes: past the file's end, _header says so.
        if len(head) < table_end <= status.st_size:
            head += os.pread(fd, table_end - len(head), len(head))
    return _header(path, head, status.st_size, (status.st_ino, status.st_mtime_ns))


#: One decompression context per thread (a context is not safe to share between threads,
#: and making one per frame cost about 7 µs of a 64 KiB frame's 25).
_CONTEXTS = threading.local()


def _decompress(segment: Segment, index: int, compressed: bytes) -> bytes:
    expected = min(segment.frame_bytes, segment.end - segment.start - index * segment.frame_bytes)
    context = getattr(_CONTEXTS, "context", None)
    if context is None:
        context = _CONTEXTS.context = zstandard.ZstdDecompressor()
    decoder = context.decompressobj()
    try:
        raw = decoder.decompress(compressed)
    except zstandard.ZstdError as exc:
        raise _corrupt(segment.path, f"frame {index} does not decompress: {exc}") from None
    if not decoder.eof or decoder.unused_data:
        raise _corrupt(segment.path, f"frame {index} is not exactly one whole Zstandard frame")
    if len(raw) != expected:
        raise _corrupt(segment.path, f"frame {index} holds {len(raw)} bytes, not {expected}")
    return raw


def decode_segment(path: Path, blob: bytes) -> tuple[Segment, bytes]:
    """Check a whole segment file (its trailing hash, every frame, the digest of the
    journal bytes) and return its header and those bytes; :class:`SegmentCorruptError`
    names what is wrong."""
    if len(blob) < _HEADER.size + _DIGEST or hashlib.sha256(blob[:-_DIGEST]).digest() != blob[-_DIGEST:]:
        raise _corrupt(path, "its trailing SHA-256 does not match the file")
    segment = _header(path, blob, len(blob), (0, 0))
    data = _frames_of(segment, blob)
    if hashlib.sha256(data).digest() != segment.digest:
        raise _corrupt(path, "its journal bytes do not match the SHA-256 in its header")
    return segment, data


def _frames_of(segment: Segment, blob: bytes) -> bytes:
    """Every frame of the segment file ``blob``, decoded and joined."""
    return b"".join(
        _decompress(segment, index, blob[at : at + length]) for index, (at, length) in enumerate(segment.frames)
    )


def _corrupt(path: Path, reason: str) -> SegmentCorruptError:
    return SegmentCorruptError(
        f"sealed segment {path.name}: {reason}", details={"segment": path.name, "reason": reason}
    )


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the blocks of ``[offset, offset + length)`` (whole blocks) without changing the
    file's size; False when the file system cannot (the bytes then simply stay)."""
    if length <= 0:
        return True
    libc = _libc()
    if libc is None:
        return False
    done = libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)
    if done != 0:
        code = ctypes.get_errno()
        if code in (errno.EOPNOTSUPP, errno.ENOSYS):
            return False
        raise OSError(code, os.strerror(code))
    return True


@functools.cache
def _libc() -> ctypes.CDLL | None:
    # Python's os module has posix_fallocate, which cannot punch holes; fallocate(2) is
    # called through ctypes (Linux only: elsewhere sealing keeps the journal's bytes).
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
        libc.fallocate.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def _contiguous_end(segments: list[Segment]) -> int:
    """Where the chain of segments that starts at offset 0 ends."""
    end = 0
    for segment in segments:
        if segment.start != end:
            break
        end = segment.end
    return end


class SealedJournal:
    """The journal as one sequence of bytes: segments below the sealed end, ``journal.log``
    from there on. A :class:`~tracelock.storage.directory.fileio.JournalFile`: writes below the sealed
    end (a redaction) rewrite the segment that holds them."""

    def __init__(self, file: OSFile, directory: Path) -> None:
        self.file = file
        self._directory = directory
        self._mutex = threading.Lock()
        self._segments: list[Segment] = []
        self._starts: list[int] = []
        self._top = 0  # where the last segment ends: no read at or past it needs a look-up
        self._sealed_end = 0
        self._frames: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        #: (first offset, end, bytes) of the frame read last: most reads fall in it again.
        self._last = _NO_FRAME
        #: Open segment files: start -> (descriptor, the header read with it).
        self._open: OrderedDict[int, tuple[int, Segment]] = OrderedDict()
        #: ``sealed/generation``, mapped: a count every seal and every rewrite increments.
        self._generation: mmap.mmap | None = None
        self._seen_generation = -1  # none seen yet (frames)
        self._refreshed_generation = -1  # the count when the folder was last listed
        self.refresh()

    # -- the segments --------------------------------------------------------------------
    @property
    def sealed_end(self) -> int:
        """Where the segments' contiguous bytes from offset 0 end (0 without segments)."""
        return self._sealed_end

    def refresh(self) -> bool:
        """Read the segment folder again; True if it now holds segments this handle did not
        know (another process sealed). The generation count is read first: the folder then
        lists at least every segment published before that count was reached."""
        self._map_generation()
        self._refreshed_generation = self._generation_count()
        try:
            names = sorted(
                name for name in os.listdir(self._directory) if name.endswith(".seg")
            )
        except FileNotFoundError:
            names = []
        except NotADirectoryError:
            raise _corrupt(self._directory, "is not a folder of segments") from None
        known = {segment.path.name: segment for segment in self._segments}
        segments = [known.get(name) or self._read_header(self._directory / name) for name in names]
        segments.sort(key=lambda segment: segment.start)
        for before, after in pairwise(segments):
            if after.start < before.end:
                raise _corrupt(after.path, f"overlaps segment {before.path.name}")
        with self._mutex:
            grew = [segment.path for segment in segments] != [segment.path for segment in self._segments]
            self._segments = segments
            self._starts = [segment.start for segment in segments]
            self._top = max((segment.end for segment in segments), default=0)
            self._sealed_end = _contiguous_end(segments)
        return grew

    def _read_header(self, path: Path) -> Segment:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return _header_of(path, fd)
        finally:
            os.close(fd)

    def _segment_at(self, offset: int) -> Segment | None:
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0:
            return None
        segment = self._segments[index]
        return segment if offset < segment.end else None

    def begin_read(self) -> None:
        """A read (or a commit) of the store begins: if a segment was rewritten since the
        last one (a redaction, here or in another process: the generation count changed),
        drop every decoded frame, so that none of a replaced file is served again. Reading
        the mapped count costs no system call; without it, frames are dropped every time."""
        generation = self._generation_count()
        if generation != self._seen_generation or generation < 0:
            with self._mutex:
                self._frames.clear()
                self._last = _NO_FRAME
                self._close_segments()
            self._seen_generation = generation

    def _generation_count(self) -> int:
        """The mapped generation count; -1 when the file is not mapped."""
        return -1 if self._generation is None else int(_COUNT.unpack_from(self._generation)[0])

    def _map_generation(self) -> None:
        if self._generation is not None:
            return
        try:
            fd = os.open(self._directory / _GENERATION, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if os.fstat(fd).st_size >= _COUNT.size:
                self._generation = mmap.mmap(fd, _COUNT.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def _bump_generation(self) -> None:
        """Count one more seal or rewrite (under the writer lock): every handle's next read
        drops its decoded frames, and lists the folder again before it takes a NUL byte of
        ``journal.log`` for one. Created at zero with the folder's first segment."""
        path = self._directory / _GENERATION
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            raw = os.pread(fd, _COUNT.size, 0)
            count = _COUNT.unpack(raw)[0] + 1 if len(raw) == _COUNT.size else 0
            os.pwrite(fd, _COUNT.pack(count), 0)
        finally:
            os.close(fd)
        self._map_generation()

    def _frame(self, segment: Segment, index: int) -> bytes:
        """Frame ``index`` of ``segment``, decoded: from the cache, else from the file (whose
        header is read again if the file was replaced since)."""
        key = (segment.start, index)
        with self._mutex:
            cached = self._frames.get(key)
            if cached is not None:
                self._frames.move_to_end(key)
                self._last = self._frame_span(segment, index, cached)
                return cached
        with self._mutex:  # a descriptor is never closed while it is read
            fd, segment = self._open_segment(segment)
            at, length = segment.frames[index]
            compressed = os.pread(fd, length, at)
        raw = _decompress(segment, index, compressed)
        with self._mutex:
            self._frames[key] = raw
            if len(self._frames) > _CACHED_FRAMES:
                self._frames.popitem(last=False)
            self._last = self._frame_span(segment, index, raw)
        return raw

    def _open_segment(self, segment: Segment) -> tuple[int, Segment]:
        """A descriptor of the segment's file, kept open (a few at a time) until the
        generation count changes, and the header that goes with that file (read again if
        the file was rewritten since ``segment`` was read). Holds ``_mutex``."""
        held = self._open.get(segment.start)
        if held is not None:
            self._open.move_to_end(segment.start)
            return held
        try:
            fd = os.open(segment.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise _corrupt(segment.path, "the segment file is gone") from None
        status = os.fstat(fd)
        if (status.st_ino, status.st_mtime_ns) != segment.stamp:  # rewritten since
            try:
                segment = _header_of(segment.path, fd)
            except BaseException:
                os.close(fd)
                raise
            self._segments = [segment if known.start == segment.start else known for known in self._segments]
        self._open[segment.start] = (fd, segment)
        if len(self._open) > _OPEN_SEGMENTS:
            os.close(self._open.popitem(last=False)[1][0])
        return fd, segment

    def _close_segments(self) -> None:
        """Close every kept descriptor. Holds ``_mutex``."""
        for fd, _ in self._open.values():
            os.close(fd)
        self._open.clear()

    @staticmethod
    def _frame_span(segment: Segment, index: int, raw: bytes) -> tuple[int, int, bytes]:
        low = segment.start + index * segment.frame_bytes
        return low, low + len(raw), raw

    def _read_sealed(self, segment: Segment, length: int, offset: int) -> bytes:
        end = min(offset + length, segment.end)
        index, within = divmod(offset - segment.start, segment.frame_bytes)
        if within + end - offset <= segment.frame_bytes:  # the usual read: inside one frame
            return self._frame(segment, index)[within : within + end - offset]
        parts = []
        while offset < end:
            index, within = divmod(offset - segment.start, segment.frame_bytes)
            frame = self._frame(segment, index)
            part = frame[within : within + end - offset]
            parts.append(part)
            offset += len(part)
        return b"".join(parts)

    # -- JournalFile -----------------------------------------------------------------------
    def size(self) -> int:
        return self.file.size()

    def pread(self, length: int, offset: int) -> bytes:
        low, high, frame = self._last
        if low <= offset and offset + length <= high:  # the usual read: the last frame again
            return frame[offset - low : offset - low + length]
        segment = self._segment_at(offset) if offset < self._top else None
        if segment is not None:
            head = self._read_sealed(segment, length, offset)
            if len(head) == length:
                return head
            return head + self.pread(length - len(head), offset + len(head))
        data = self.file.pread(length, offset)
        nul = data.find(_NUL)
        if nul >= 0 and self.may_be_freed(offset + nul) and self.refresh():
            return self.pread(length, offset)
        return data

    def may_be_freed(self, offset: int) -> bool:
        """Whether the NUL byte just read at ``offset`` may lie in blocks another process
        sealed and freed since this handle last listed the segments. With the generation
        count mapped, no system call: a seal increments the count after it publishes its
        segment and before it frees a block, and the count is read after the data, so an
        unchanged count means no block was freed before the read. Before any segment
        exists, the file system is asked."""
        generation = self._generation
        if generation is None:
            return self._in_hole(offset)
        return bool(_COUNT.unpack_from(generation)[0] != self._refreshed_generation)

    def _in_hole(self, offset: int) -> bool:
        try:
            return os.lseek(self.file.fd, offset, os.SEEK_DATA) != offset
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a hole up to the end of the file
                return True
            raise

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        # Only a redaction writes through here (appends go to the file itself): list the
        # segments first, so that bytes another process sealed since this handle last
        # looked are rewritten in their segment, never in the blocks it freed or kept.
        # (The writer's catch-up under the lock has listed them already whenever anything
        # was sealed since; this keeps the write right on its own.)
        self.refresh()
        segment = self._segment_at(offset) if offset < self._top else None
        if segment is None:
            return self.file.pwrite(data, offset)
        if offset + len(data) > segment.end:
            raise ValueError("a write into a sealed segment must stay inside it")
        self._rewrite(segment, bytes(data), offset - segment.start)
        return len(data)

    def fdatasync(self) -> None:
        self.file.fdatasync()

    def truncate(self, length: int) -> None:
        if length < self.sealed_end:
            raise ValueError(f"cannot cut the journal at {length}, inside its sealed segments")
        self.file.truncate(length)

    def close(self) -> None:
        with self._mutex:
            self._frames.clear()
            self._last = _NO_FRAME
            self._close_segments()
        if self._generation is not None:
            self._generation.close()
        self.file.close()

    # -- sealing (the caller holds the writer lock) -----------------------------------------
    def seal(self, end: int, *, before_freeing: Callable[[], None] | None = None) -> Segment | None:
        """Seal the journal from the sealed end towards ``end``, which must be durable and a
        record boundary: at most :data:`MAX_SEGMENT_BYTES` (cut after the last whole record
        that fits; a longer record goes whole), so that a store with a long unsealed journal
        (one written before segments existed) is sealed a segment per commit, never in one
        stall. None if there is nothing to seal. Call it holding the writer lock.
        ``before_freeing`` runs once the segment is published, before any block is freed
        (the store syncs its synced mark there: docs/spec.md 3.8, step 5)."""
        self.prepare()
        self.refresh()
        start = self.sealed_end
        if end <= start:
            return None
        end = self._segment_end(start, end)
        data = self.file.pread(end - start, start)
        if len(data) != end - start or not data.endswith(b"\n") or _NUL in data:
            raise _corrupt(
                self._directory / segment_name(start), f"journal bytes [{start}, {end}) are not whole records"
            )
        self._clear_leftovers()
        path = self._directory / segment_name(start)
        self._publish(path, encode_segment(start, data), data)
        self._bump_generation()  # before any block is freed: readers look again
        self.refresh()
        if before_freeing is not None:
            before_freeing()
        # Every byte below ``start`` is sealed too (segments are contiguous from 0), so the
        # block that straddles ``start`` is freed with this range.
        block = max(os.fstat(self.file.fd).st_blksize, 512)
        first = start // block * block
        _punch_hole(self.file.fd, first, end // block * block - first)
        return self._segment_at(start)

    def _segment_end(self, start: int, end: int) -> int:
        """Where a segment from ``start`` ends: the last record boundary at most
        :data:`MAX_SEGMENT_BYTES` on, or the end of a longer first record, or ``end``."""
        if end - start <= MAX_SEGMENT_BYTES:
            return end
        cut = self.file.pread(MAX_SEGMENT_BYTES, start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        position = start + MAX_SEGMENT_BYTES  # one record longer than a segment: it goes whole
        while position < end:
            chunk = self.file.pread(min(MAX_SEGMENT_BYTES, end - position), position)
            at = chunk.find(b"\n")
            if at >= 0:
                return position + at + 1
            if not chunk:
                break
            position += len(chunk)
        return end

    def prepare(self) -> None:
        """Create the segment folder and its generation count if the store has none yet
        (a writer, under the writer lock, at open): a handle with the count mapped needs no
        system call to tell free space from a freed block."""
        if not self._directory.is_dir():
            self._directory.mkdir()
            fsync_dir(self._directory.parent)
        if not (self._directory / _GENERATION).exists():
            self._bump_generation()  # created at zero
            self.refresh()  # notes the count (the handle listed the folder when it opened)

    def _publish(self, path: Path, blob: bytes, data: bytes) -> None:
        """Write a segment under a temporary name, sync it, read it back (the same bytes as
        written, and frames that decode to ``data``; ``blob`` was encoded from ``data`` here,
        so its two hashes hold by construction), and only then rename it to ``path`` and sync
        the folder: a segment that failed its read-back is never published."""
        temporary = path.with_name(path.name + ".tmp")
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            written = os.pread(fd, len(blob) + 1, 0)
        finally:
            os.close(fd)
        if written != blob or _frames_of(_header(path, blob, len(blob), (0, 0)), blob) != data:
            raise _corrupt(path, "reads back different bytes than were sealed")
        os.replace(temporary, path)
        fsync_dir(self._directory)

    def _clear_leftovers(self) -> None:
        for name in os.listdir(self._directory):
            if name.endswith(".seg.tmp"):  # a segment a crash left unpublished
                os.unlink(self._directory / name)

    def _rewrite(self, segment: Segment, patch: bytes, at: int) -> None:
        """Rewrite ``segment`` with ``patch`` at ``at`` (a redaction): a new file of the
        same range replaces it whole."""
        _, data = decode_segment(segment.path, segment.path.read_bytes())
        patched = data[:at] + patch + data[at + len(patch) :]
        self._publish(segment.path, encode_segment(segment.start, patched, frame_bytes=segment.frame_bytes), patched)
        self._bump_generation()
        fresh = self._read_header(segment.path)
        with self._mutex:
            self._frames.clear()
            self._last = _NO_FRAME
            self._close_segments()
            self._segments = [fresh if known.start == fresh.start else known for known in self._segments]

    def checked(self) -> Iterator[tuple[Segment, bytes]]:
        """Every segment in journal order, checked whole, with its journal bytes (one
        segment in memory at a time); :class:`SegmentCorruptError` for the first that fails."""
        self.refresh()
        for segment in list(self._segments):
            yield segment, decode_segment(segment.path, segment.path.read_bytes())[1]


def open_journal(store: Path, *, write: bool = False) -> SealedJournal:
    """``journal.log`` of the directory store at ``store``, with its segments."""
    flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_CLOEXEC
    return SealedJournal(OSFile(os.open(store / "journal.log", flags)), store / SEALED_DIR)


def wrap(file: JournalFile, store: Path) -> JournalFile:
    """``file`` (the store's ``journal.log``) read with the store's segments; files of a
    simulated disk are returned as they are (they are never sealed)."""
    return SealedJournal(file, store / SEALED_DIR) if isinstance(file, OSFile) else file
