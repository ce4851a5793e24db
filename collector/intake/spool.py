"""The intake spool: an export is durable once its bytes are in an fsynced segment file.

Turning an export into rows costs far more, mostly under the interpreter lock, than
appending its bytes and calling fdatasync, so an export is acknowledged once it is
here and the extractor stores records in order later; a burst is absorbed here
instead of in exporters' queues. Exports are zstd-compressed in the receiver's thread
(lock released): OTLP repeats itself, so the spool writes, reads and pipes a fraction
of the bytes, and the backlog bound holds that many more exports.

Layout: numbered segments `00000000000000000001.seg`, ...; a record is a 16-byte
little-endian header (payload length, its top bit set when compressed; CRC-32 of the
payload; arrival time in Unix nanoseconds), then the payload: one
ExportTraceServiceRequest, as one zstd frame (older records: plain protobuf). Only
the newest segment is appended to; segments wholly before the extractor's position
are deleted.

Invariants: a record is acknowledged only after fdatasync, readers never look past
the last synced byte, and opening cuts a torn tail (which nobody acknowledged). Every
file is owner-only whatever the umask (collector/private_files.py).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

import zstandard

from collector.private_files import make_private_directory, open_private, tighten

logger = logging.getLogger(__name__)

SEGMENT_BYTES: Final = 64 * 1024 * 1024
SEGMENT_SUFFIX: Final = ".seg"
QUARANTINE_DIR: Final = "quarantine"
_HEADER: Final = struct.Struct("<IIQ")  # payload length | flag, CRC-32 of the payload, arrival ns
# The length's top bit: the payload is a zstd frame (clear in records written before).
_COMPRESSED: Final = 1 << 31
MAX_PAYLOAD_BYTES: Final = _COMPRESSED - 1
# Fast enough to run in every receiver thread; higher levels cost more for little.
COMPRESSION_LEVEL: Final = 1
_IOV_MAX: Final = 1024  # buffers one writev call may take (POSIX minimum limit)


class SpoolError(OSError):
    """The spool could not make an export durable (disk full, I/O error)."""


class Position(NamedTuple):
    """A byte offset in a numbered segment; positions order as tuples."""

    segment: int
    offset: int


START: Final = Position(1, 0)


class Packed(NamedTuple):
    """An export compressed for the spool: `pack` makes it, `Spool.append` writes it."""

    frame: bytes


_compressors = threading.local()


def pack(body: bytes) -> Packed:
    """An export's protobuf bytes as a spool payload; safe from any thread.

    Receivers call it in their own thread, which releases the interpreter lock
    while zstd works, so the spool's one writer thread only writes.
    """
    compressor = getattr(_compressors, "compressor", None)
    if compressor is None:
        compressor = _compressors.compressor = zstandard.ZstdCompressor(
            level=COMPRESSION_LEVEL, write_content_size=True
        )
    return Packed(compressor.compress(body))


# An export request as the spool and the extraction worker pass it on: packed
# (every record written since compression), or its protobuf bytes (older records).
Export = Packed | bytes


def export_bytes(export: Export) -> bytes:
    """The export request's protobuf bytes."""
    if isinstance(export, Packed):
        return zstandard.ZstdDecompressor().decompress(export.frame)
    return export


def payload(export: Export) -> bytes:
    """The export's bytes as a spool record holds them: its frame when packed."""
    return export.frame if isinstance(export, Packed) else export


def export_size(export: Export) -> int:
    """The length of `export_bytes(export)`, without decompressing."""
    if not isinstance(export, Packed):
        return len(export)
    size = zstandard.frame_content_size(export.frame)
    # pack() always records the size; -1 (unknown) could only come from a bug.
    return size if size >= 0 else len(export.frame)


class SpoolRecord(NamedTuple):
    start: Position
    end: Position
    received_unix_nano: int
    export: Export


def unstored_bytes(directory: Path, stored_up_to: Position) -> int:
    """Bytes a spool holds after `stored_up_to`, read from its files without opening it.

    For readers of a stopped server's files (`statetrail executions --db`): what
    was acknowledged but is not in DuckDB until `serve` starts again. A torn
    tail, which nobody acknowledged, would be counted too.
    """
    if not directory.is_dir():
        return 0
    total = 0
    for number in _segment_numbers(directory):
        if number < stored_up_to.segment:
            continue
        size = _segment_path(directory, number).stat().st_size
        total += max(0, size - stored_up_to.offset) if number == stored_up_to.segment else size
    return total


def _segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:020d}{SEGMENT_SUFFIX}"


def _segment_numbers(directory: Path) -> list[int]:
    return sorted(
        int(path.stem)
        for path in directory.glob(f"*{SEGMENT_SUFFIX}")
        # ASCII only: a stray file named in other digits would make int() raise at start-up.
        if path.stem.isascii() and path.stem.isdigit()
    )


class Spool:
    """Append (one writer thread) and read (one reader thread) durable records."""

    def __init__(self, directory: Path, resume_at: Position) -> None:
        self.directory = directory
        make_private_directory(directory)
        _tighten_contents(directory)
        self._lock = threading.Lock()
        numbers = _segment_numbers(directory)
        for number in numbers:
            if number < resume_at.segment:
                self._path(number).unlink()
        numbers = [n for n in numbers if n >= resume_at.segment]
        # Sizes of segments no longer appended to, for reading and the backlog.
        self._sealed: dict[int, int] = {}
        for number in numbers[:-1]:
            self._sealed[number] = self._path(number).stat().st_size
        if numbers:
            active = numbers[-1]
            size = _cut_torn_tail(self._path(active))
        else:
            active, size = resume_at.segment, 0
        if (active, size) < resume_at:
            # The position says more was processed than the files hold (the
            # spool was deleted or replaced): start afresh after it.
            logger.warning(
                "spool %s ends before the processed position %s; starting a new segment",
                directory, tuple(resume_at),
            )
            if numbers:
                self._sealed[active] = size
            active, size = resume_at.segment + 1, 0
        self._active = active
        self._file = open(self._path(active), "ab", buffering=0, opener=open_private)  # noqa: SIM115
        self._sync_directory()
        self._durable_end = Position(active, size)

    # -- writing (one thread) ------------------------------------------------

    def append(self, exports: Sequence[Export], received_unix_nano: int) -> list[Position]:
        """Write records and fdatasync them; return each record's end position.

        Each export is packed already (`pack`, in the receiver's thread) or its
        protobuf bytes, packed here. On failure nothing of this call stays in
        the file, and SpoolError says why.
        """
        start = self._durable_end
        pieces: list[bytes] = []
        ends: list[Position] = []
        offset = start.offset
        for export in exports:
            frame = (export if isinstance(export, Packed) else pack(export)).frame
            if len(frame) > MAX_PAYLOAD_BYTES:
                raise SpoolError(f"an export of {len(frame)} bytes is too large for the spool")
            pieces.append(
                _HEADER.pack(len(frame) | _COMPRESSED, zlib.crc32(frame), received_unix_nano)
            )
            pieces.append(frame)
            offset += _HEADER.size + len(frame)
            ends.append(Position(start.segment, offset))
        try:
            write_all(self._file.fileno(), pieces)
            os.fdatasync(self._file.fileno())
        except OSError as exc:
            self._undo(start)
            raise SpoolError(f"could not write the spool {self.directory}: {exc}") from exc
        with self._lock:
            self._durable_end = ends[-1]
        if offset >= SEGMENT_BYTES:
            self._start_next_segment()
        return ends

    def _undo(self, start: Position) -> None:
        try:
            os.ftruncate(self._file.fileno(), start.offset)
        except OSError:
            # Readers never pass the durable end, and the next open cuts a torn tail.
            logger.exception("could not cut a failed append from the spool")

    def _start_next_segment(self) -> None:
        number = self._active + 1
        try:
            following = open(  # noqa: SIM115
                self._path(number), "ab", buffering=0, opener=open_private
            )
            self._sync_directory()
        except OSError:
            # Keep appending to the current segment; rotation is tried again later.
            logger.exception("could not start spool segment %d", number)
            return
        previous = self._file
        with self._lock:
            self._sealed[self._active] = self._durable_end.offset
            self._active = number
            self._file = following
            self._durable_end = Position(number, 0)
        previous.close()

    def close(self) -> None:
        self._file.close()

    # -- reading (one thread) --------------------------------------------------

    @property
    def durable_end(self) -> Position:
        with self._lock:
            return self._durable_end

    def read(self, position: Position, max_bytes: int) -> tuple[list[SpoolRecord], Position]:
        """Records from `position` (at least one if any is durable, then up to
        `max_bytes` decompressed), and the position after them. A record failing its
        CRC is logged and the rest of its segment skipped: it cannot be framed again."""
        records: list[SpoolRecord] = []
        size = 0
        with self._lock:
            end = self._durable_end
            sealed = dict(self._sealed)
        while position < end and (not records or size < max_bytes):
            limit = sealed.get(position.segment, end.offset)
            if position.offset >= limit:
                position = Position(position.segment + 1, 0)
                continue
            batch, position, batch_size = self._read_segment(position, limit, max_bytes - size)
            records.extend(batch)
            size += batch_size
        return records, position

    def _read_segment(
        self, position: Position, limit: int, max_bytes: int
    ) -> tuple[list[SpoolRecord], Position, int]:
        """Records of one segment, the position after them, and their exports' size."""
        records: list[SpoolRecord] = []
        size = 0
        with open(self._path(position.segment), "rb") as segment:
            segment.seek(position.offset)
            offset = position.offset
            while offset < limit and (not records or size < max_bytes):
                header = segment.read(_HEADER.size)
                word, crc, received = _HEADER.unpack(header)
                length = word & ~_COMPRESSED
                payload = segment.read(length)
                end = offset + _HEADER.size + length
                if end > limit or zlib.crc32(payload) != crc:
                    logger.error(
                        "spool segment %d is corrupt at byte %d; skipping the rest of it",
                        position.segment, offset,
                    )
                    return records, Position(position.segment, limit), size
                record = SpoolRecord(
                    Position(position.segment, offset),
                    Position(position.segment, end),
                    received,
                    Packed(payload) if word & _COMPRESSED else payload,
                )
                records.append(record)
                size += export_size(record.export)
                offset = end
        return records, Position(position.segment, offset), size

    def backlog_bytes(self, position: Position) -> int:
        """Bytes of records after `position` (headers included)."""
        with self._lock:
            end = self._durable_end
            sealed = dict(self._sealed)
        if position >= end:
            return 0
        if position.segment == end.segment:
            return end.offset - position.offset
        total = sealed.get(position.segment, 0) - position.offset + end.offset
        for number in range(position.segment + 1, end.segment):
            total += sealed.get(number, 0)
        return total

    def release(self, position: Position) -> None:
        """Delete the segments wholly before `position`: their records are processed."""
        with self._lock:
            done = [number for number in self._sealed if number < position.segment]
            for number in done:
                del self._sealed[number]
        for number in done:
            try:
                self._path(number).unlink()
            except OSError:
                logger.exception("could not delete processed spool segment %d", number)

    def quarantine(self, record: SpoolRecord, reason: str) -> Path:
        """Keep a record that could not be processed, for a person to look at."""
        folder = self.directory / QUARANTINE_DIR
        make_private_directory(folder)
        name = f"{record.start.segment:020d}-{record.start.offset:012d}"
        try:
            body = export_bytes(record.export)
        except zstandard.ZstdError as exc:
            # Kept as written: the frame itself is then what a person must look at.
            body = payload(record.export)
            reason = f"{reason} (the record does not decompress: {exc})"
        with open(folder / f"{name}.pb", "wb", opener=open_private) as kept:
            kept.write(body)
        with open(folder / f"{name}.txt", "w", encoding="utf-8", opener=open_private) as note:
            note.write(reason + "\n")
        return folder / f"{name}.pb"

    # -- files -------------------------------------------------------------------

    def _path(self, number: int) -> Path:
        return _segment_path(self.directory, number)

    def _sync_directory(self) -> None:
        # A new file's directory entry must be durable too, or a crash could
        # lose a whole acknowledged segment.
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _tighten_contents(directory: Path) -> None:
    """Make the segments and the quarantine an older version left owner-only."""
    tighten(directory / QUARANTINE_DIR)
    for path in [*directory.glob(f"*{SEGMENT_SUFFIX}"), *directory.glob(f"{QUARANTINE_DIR}/*")]:
        tighten(path)


def write_all(descriptor: int, pieces: list[bytes]) -> None:
    """Write every piece, in order, with as few writev calls as the kernel allows."""
    views = [memoryview(piece) for piece in pieces if piece]
    while views:
        written = os.writev(descriptor, views[:_IOV_MAX])
        while written and views:
            if written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][written:]
                written = 0


def _cut_torn_tail(path: Path) -> int:
    """Truncate a segment after its last whole record; return its size."""
    with open(path, "r+b") as segment:
        total = segment.seek(0, os.SEEK_END)
        segment.seek(0)
        offset = 0
        while offset + _HEADER.size <= total:
            word, crc, _ = _HEADER.unpack(segment.read(_HEADER.size))
            length = word & ~_COMPRESSED
            if offset + _HEADER.size + length > total:
                break
            if zlib.crc32(segment.read(length)) != crc:
                break
            offset += _HEADER.size + length
        if offset < total:
            logger.warning(
                "spool segment %s: cutting %d bytes of a record a crash left unfinished",
                path.name, total - offset,
            )
            segment.truncate(offset)
            segment.flush()
            os.fsync(segment.fileno())
    return offset
