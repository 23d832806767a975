"""Write a wheel member by member, copying unchanged members' compressed bytes from the input.

Patching a 670 MB torch wheel touches a few kilobytes, so :meth:`WheelWriter.copy_raw`
copies a member's *compressed* bytes straight from the input (CRC and sizes kept, RECORD
row reused), a large member's in kernel copies in a thread of their own while the writer goes
on with the rest (:class:`~patched_wheels.wheelfile.copier.Copier`), and only what was rewritten is deflated.
What is written must pass :class:`WheelReader`'s checks before it is renamed into place.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import time
import zlib
from pathlib import Path
from typing import Iterable, Sequence

from patched_wheels.base.fsutil import create_temp_file, current_umask
from patched_wheels.errors import InvalidWheelError, UsageError
from patched_wheels.wheelfile.copier import Copier, Copy
from patched_wheels.wheelfile.filename import is_safe_member_path
from patched_wheels.wheelfile.reader import WheelReader, WrittenArchive
from patched_wheels.wheelfile.record import RecordEntry, record_hash, serialize_record
from patched_wheels.wheelfile.zipcontainer import (
    CHUNK_SIZE,
    DEFLATED,
    FLAG_DATA_DESCRIPTOR,
    FLAG_DEFLATE_OPTIONS,
    LOCAL_HEADER_SIZE,
    LOCAL_TIMESTAMP_OFFSET,
    UNIX,
    ZIP64_LIMIT,
    ReadAhead,
    central_directory,
    data_offset,
    encode_name,
    end_records,
    kernel_copied,
    local_header,
)
from patched_wheels.wheelfile.zipdirectory import ZipMember

__all__ = ["WheelWriter"]

_DOS_FIRST = (1980, 1, 1, 0, 0, 0)
_DOS_LAST = (2107, 12, 31, 23, 59, 58)


def _dos_timestamp() -> tuple[int, int]:
    """(date, time) of every member: SOURCE_DATE_EPOCH, else 1980-01-01, for reproducible output.

    Times the zip format cannot hold are clamped to its range; a value that is not a
    number of seconds is an error, as the reproducible-builds specification asks.
    """
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch and not (epoch.isascii() and epoch.isdigit()):  # str.isdigit() alone accepts "²"
        raise UsageError(f"SOURCE_DATE_EPOCH={epoch!r}: not a number of seconds since 1970")
    try:
        moment = tuple(time.gmtime(int(epoch))[:6]) if epoch else _DOS_FIRST
    except (OverflowError, OSError, ValueError):  # beyond what the C library can represent
        moment = _DOS_LAST
    year, month, day, hour, minute, second = max(_DOS_FIRST, min(moment, _DOS_LAST))
    return (year - 1980) << 9 | month << 5 | day, hour << 11 | minute << 5 | second // 2


def _deflate_bound(size: int) -> int:
    """zlib's compressBound: the most deflate can expand ``size`` bytes."""
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 13


def _is_zip64(info: ZipMember) -> bool:
    """Whether a raw copy of ``info`` needs ZIP64 sizes in its headers."""
    return info.file_size > ZIP64_LIMIT or info.compress_size > ZIP64_LIMIT


def _raw_entry(info: ZipMember, arcname: str, verbatim: bool, offset: int) -> ZipMember:
    """The central directory record of a raw copy of ``info`` as ``arcname`` whose local header goes at ``offset``
    (``verbatim``: the input's name bytes and flags kept, as its local header is)."""
    if verbatim:
        encoded, flags = info.raw_name, info.flag_bits
    else:
        encoded, utf8_flag = encode_name(arcname)
        flags = (info.flag_bits & FLAG_DEFLATE_OPTIONS) | utf8_flag
    return ZipMember(
        arcname,
        encoded,
        info.create_system,
        flags,
        info.compress_type,
        info.CRC,
        info.compress_size,
        info.file_size,
        offset,
        info.external_attr,
        b"",
    )


class WheelWriter:
    """Writes a wheel to ``<dest>`` atomically: a temp file in the same directory, renamed on success.

    RECORD is generated from what was written and appended last.  Every member gets the
    same timestamp, and central directory records no extra field but ZIP64 (a raw copy
    that keeps its name keeps the input's local header, extra fields included), so the
    output depends only on the input bytes and the order of calls.  Before the rename the
    file is opened as a :class:`WheelReader` under its final name, given the records and
    RECORD rows just encoded (:class:`WrittenArchive`): what we write passes the checks of
    what we read that this class does not make true by itself (one ``.dist-info`` with
    METADATA and WHEEL, names and versions that agree, no file where a directory is,
    RECORD listing every member).
    """

    def __init__(self, dest: Path | str, *, dist_info: str) -> None:
        self.dest = Path(dest)
        self.dist_info = dist_info
        self._record_name = f"{dist_info}/RECORD"
        self._dos_date, self._dos_time = _dos_timestamp()
        self._timestamp = struct.pack("<HH", self._dos_time, self._dos_date)  # as local headers hold it
        self._source: tuple[WheelReader, ReadAhead] | None = None  # the reader copy_raw reads, and its window
        fd, self._temp = create_temp_file(self.dest.parent, self.dest.name)
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._buffer = bytearray()
        self._offset = 0
        """Where the next byte goes: the buffer holds the bytes just before it (every write is positional)."""
        self._entries: list[ZipMember] = []
        """Each member written, as a reader will parse it from the central directory."""
        self._zip64_local: set[str] = set()
        """Members whose local header has the ZIP64 extra: the central record says so in its version."""
        self._record: list[RecordEntry] = []
        self._names: set[str] = set()
        self._copier = Copier(fd, str(self.dest))

    def __enter__(self) -> WheelWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- members

    def copy_raw(self, reader: WheelReader, name: str, *, arcname: str | None = None) -> None:
        """Copy one member's compressed bytes unchanged (:meth:`copy_raw_members`), under ``arcname`` if given."""
        self.copy_raw_members(reader, ((name, name if arcname is None else arcname),))

    def copy_raw_members(self, reader: WheelReader, members: Iterable[tuple[str, str]]) -> None:
        """Copy members' compressed bytes unchanged, each ``(name in the input, arcname)``, in that order;
        their RECORD rows are reused under the new names.

        A small member (all but a few) that keeps its name keeps its local header too, with the
        writer's timestamp in it: small members are read with their header in one window of the
        input (:class:`ReadAhead`) and go out through the buffer.  The data of large ones goes out
        in kernel copies, like ``cp``, after a header of ours padded so that the data keeps its
        place within a page (:func:`local_header`), in the copier's thread, started before this loop
        begins (:meth:`_start_kernel_copies`, :class:`~patched_wheels.wheelfile.copier.Copier`).  One call for a run of members,
        with what every member needs looked up once: a patch copies 10,600 of torch's.
        """
        source = self._source
        if source is None or source[0] is not reader:
            source = self._source = (reader, reader.read_ahead())
        window = source[1]
        read, info_of, row_of, archive = window.read, reader.info, reader.record_entry, reader.name
        claim, write, entries, record, timestamp = (
            self._claim,
            self._write,
            self._entries,
            self._record,
            self._timestamp,
        )
        members = list(members)
        infos = [info_of(name) for name, _ in members]  # looked up once: the copies started ahead need them too
        started = self._start_kernel_copies(reader, members, infos)
        for index, ((name, arcname), info) in enumerate(zip(members, infos)):
            renamed = arcname != name
            claim(arcname, checked=not renamed)  # the reader checked its names
            compress_size = info.compress_size
            zip64 = _is_zip64(info)  # noted for the central record's version
            if zip64:
                self._zip64_local.add(arcname)
            ahead = started.pop(index, None) if started else None
            if ahead is not None and ahead[0].header_offset != self._offset:  # the input had unused bytes before it
                self._copier.wait()  # the copies started at the places foreseen end before anything is written there
                started, ahead = {}, None
            if ahead is not None:  # its header checked and its data on its way since the run began
                entry, header = ahead
                write(header)
                self._flush()
                self._offset += compress_size
            else:
                header_offset = info.header_offset
                # The local header checked in the window (RawMember.locate's check, without a RawMember per member).
                data_start = data_offset(read(header_offset, LOCAL_HEADER_SIZE + len(info.raw_name)), info, archive)
                verbatim = not renamed and not info.flag_bits & FLAG_DATA_DESCRIPTOR
                entry = _raw_entry(info, arcname, verbatim, self._offset)
                if not kernel_copied(compress_size):
                    start = header_offset if verbatim else data_start  # the input header, if kept, then the data
                    length = data_start + compress_size - start
                    copied = read(start, length)
                    if len(copied) != length:
                        raise InvalidWheelError(f"{archive}: {name}: truncated member data")
                    if not verbatim:
                        write(local_header(entry, zip64, self._dos_date, self._dos_time))
                    # Straight into the buffer (one copy of the window's bytes), the timestamp set there.
                    buffer = self._buffer  # not kept across a flush, which hands it over
                    at = len(buffer)
                    buffer += copied
                    if verbatim:
                        buffer[at + LOCAL_TIMESTAMP_OFFSET : at + LOCAL_TIMESTAMP_OFFSET + 4] = timestamp
                    self._offset += length
                    if len(buffer) >= CHUNK_SIZE:
                        self._flush()
                else:  # a kernel copy, its data at the same place within a page as in the input
                    write(local_header(entry, zip64, self._dos_date, self._dos_time, data_like=data_start))
                    self._copy_range(window.fd, data_start, compress_size, f"{archive}: {name}")
            entries.append(entry)
            row = row_of(name)
            if row is not None:
                record.append(RecordEntry(arcname, row.hash, row.size) if renamed else row)

    def _start_kernel_copies(
        self, reader: WheelReader, members: Sequence[tuple[str, str]], infos: Sequence[ZipMember]
    ) -> dict[int, tuple[ZipMember, bytes]]:
        """Start the kernel copies of the large members of a run of raw copies now, each to the place the
        members before it will leave it, so that they run beside the whole loop over the small ones: torch's
        large libraries lie near the end of the wheel, and copied when the loop reaches them they would
        follow nearly all of it instead.  Returns each started member's entry and local header (its input
        header checked, as the loop checks the others), by its index in ``members`` (``infos``: their records).

        The places are foreseen from the central directory: a small member that keeps its local header
        takes the input's bytes from that header to the next member's (``end_offset``), which are exactly
        its header and data unless the input leaves bytes unused after them.  Then a large member after
        it is not where it was foreseen when the loop reaches it: the loop waits for these copies (the
        bytes they put in the wrong places are written over, and :meth:`close` cuts off any past the end)
        and copies the rest of the large members as it reaches them.
        """
        large = [index for index, info in enumerate(infos) if kernel_copied(info.compress_size)]
        if not large:
            return {}
        started: dict[int, tuple[ZipMember, bytes]] = {}
        date, time_ = self._dos_date, self._dos_time
        offset = self._offset
        for index, ((name, arcname), info) in enumerate(zip(members[: large[-1] + 1], infos)):
            verbatim = arcname == name and not info.flag_bits & FLAG_DATA_DESCRIPTOR
            if kernel_copied(info.compress_size):
                raw = reader.raw_member(name)
                entry = _raw_entry(info, arcname, verbatim, offset)
                header = local_header(entry, _is_zip64(info), date, time_, data_like=raw.data_offset)
                self._copier.submit(
                    Copy(raw.fd, raw.data_offset, info.compress_size, offset + len(header), f"{reader.name}: {name}")
                )
                started[index] = entry, header
                offset += len(header) + info.compress_size
            elif verbatim:
                offset += info.end_offset - info.header_offset
            else:
                header = local_header(_raw_entry(info, arcname, verbatim, offset), _is_zip64(info), date, time_)
                offset += len(header) + info.compress_size
        return started

    def write_bytes(self, arcname: str, data: bytes, *, mode: int = 0o644) -> None:
        self._write_deflated(arcname, (data,), len(data), mode)

    def write_file(self, arcname: str, source: Path | str, *, mode: int | None = None) -> None:
        """Deflate a file from disk in chunks (:meth:`write_stream`); ``mode`` defaults to the file's."""
        with open(source, "rb") as handle:
            stats = os.fstat(handle.fileno())
            chunks = iter(lambda: handle.read(CHUNK_SIZE), b"")
            self.write_stream(
                arcname, chunks, size=stats.st_size, mode=stat.S_IMODE(stats.st_mode) if mode is None else mode
            )

    def write_stream(self, arcname: str, chunks: Iterable[bytes], *, size: int, mode: int) -> None:
        """Deflate ``size`` bytes arriving in ``chunks``: never the whole member in memory.

        The members written this way are the big ones (libraries whose dynamic section an
        RPATH edit or a split's SONAME rewrote, hundreds of MB), so they are deflated at zlib's
        fastest level: on torch 2.1.0's libtorch_cuda.so that is 2.3x less CPU than the default
        level for 5 % more bytes.  Storing
        it instead was measured too (inflate + store 3.1 s CPU against 20.8 s), but the member
        grows from 456 to 705 MiB: wheels are split because of their size, so it stays deflated.
        """
        self._write_deflated(arcname, chunks, size, mode, level=zlib.Z_BEST_SPEED)

    # -- finishing

    def close(self) -> None:
        """Append RECORD and the central directory, then move the file into place."""
        if self._file.closed:
            return
        try:
            rows = [*self._record, RecordEntry(self._record_name, "", None)]
            # Fastest level: torch's 1 MB RECORD deflates in a third of the default level's time, 20 % larger.
            self._write_deflated(
                self._record_name, (serialize_record(rows),), None, 0o644, level=zlib.Z_BEST_SPEED, reserved_ok=True
            )
            directory_offset = self._offset
            # Each record also becomes the member as a reader parses it back (its ZIP64 extra, if any, set).
            self._write(central_directory(self._entries, self._zip64_local, self._dos_date, self._dos_time))
            self._write(end_records(len(self._entries), directory_offset, self._offset - directory_offset))
            self._flush()  # the buffer's tail
            written = WrittenArchive(self._entries, rows, directory_offset)
            read_back = {f"{self.dist_info}/{name}" for name in ("METADATA", "WHEEL")}  # all the check reads
            if any(kernel_copied(entry.compress_size) for entry in self._entries if entry.filename in read_back):
                self._copier.wait()  # a large METADATA or WHEEL copied raw: read back once its copy is done
            else:  # checked while the large members' kernel copies finish (torch's: the last 130 ms of a patch)
                self._copier.wait_for_writes()
            os.ftruncate(self._file.fileno(), self._offset)  # a copy started ahead to a place foreseen past the end
            os.fchmod(self._file.fileno(), 0o666 & ~current_umask())
            WheelReader(self._temp, filename=self.dest.name, written=written).close()
            del written, rows  # with what only the check needed, freed while the copies finish
            self._entries, self._record, self._names = [], [], set()
            self._copier.wait()
            self._file.close()
            os.replace(self._temp, self.dest)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop everything written so far: a failed patch leaves no output behind."""
        try:
            self._copier.wait()  # before the descriptor closes (and its number is reused)
        except BaseException:  # ignored: the failure being handled is the one that counts
            pass
        self._file.close()
        self._temp.unlink(missing_ok=True)

    # -- internals

    def _claim(self, arcname: str, *, checked: bool = False) -> None:
        """Reserve ``arcname``, once it is known to be safe (``checked``: already) and new."""
        if not checked and not is_safe_member_path(arcname):
            raise InvalidWheelError(f"{self.dest.name}: unsafe member path {arcname!r}")
        if arcname in self._names:
            raise InvalidWheelError(f"{self.dest.name}: member {arcname} written twice")
        self._names.add(arcname)

    def _write_deflated(
        self,
        arcname: str,
        chunks: Iterable[bytes],
        size_hint: int | None,
        mode: int,
        *,
        level: int = zlib.Z_DEFAULT_COMPRESSION,
        reserved_ok: bool = False,
    ) -> None:
        """Deflate ``chunks`` into a new member, then rewrite its local header with the real CRC and sizes."""
        if arcname == self._record_name and not reserved_ok:
            raise InvalidWheelError(f"{self.dest.name}: {arcname} is generated, it cannot be written directly")
        self._claim(arcname)
        encoded, utf8_flag = encode_name(arcname)
        entry = ZipMember(
            arcname, encoded, UNIX, utf8_flag, DEFLATED, 0, 0, 0, self._offset, (stat.S_IFREG | mode) << 16, b""
        )
        zip64 = size_hint is not None and _deflate_bound(size_hint) > ZIP64_LIMIT
        if zip64:
            self._zip64_local.add(arcname)
        header_length = len(local_header(entry, zip64, self._dos_date, self._dos_time))
        self._write(b"\0" * header_length)
        deflater = zlib.compressobj(level, zlib.DEFLATED, -15)
        hasher = hashlib.sha256()
        for chunk in chunks:
            hasher.update(chunk)
            entry.CRC = zlib.crc32(chunk, entry.CRC)
            entry.file_size += len(chunk)
            compressed = deflater.compress(chunk)
            entry.compress_size += len(compressed)
            self._write(compressed)
        tail = deflater.flush()
        entry.compress_size += len(tail)
        self._write(tail)
        if not zip64 and max(entry.file_size, entry.compress_size) > ZIP64_LIMIT:
            raise InvalidWheelError(f"{self.dest.name}: {arcname} grew past 2 GiB while being written")
        self._flush()  # before the header is written over its placeholder
        self._copier.write(local_header(entry, zip64, self._dos_date, self._dos_time), entry.header_offset)
        self._entries.append(entry)
        if arcname != self._record_name:
            self._record.append(RecordEntry(arcname, record_hash(hasher.digest()), entry.file_size))

    def _write(self, data: bytes) -> None:
        self._offset += len(data)
        self._buffer += data
        if len(self._buffer) >= CHUNK_SIZE:
            self._flush()

    def _copy_range(self, source_fd: int, offset: int, count: int, member: str) -> None:
        """Leave room for ``count`` input bytes at ``offset`` (the data of ``member``, as errors name it, a
        large one), which the copier's thread copies there while the writer goes on after them."""
        self._flush()
        self._copier.submit(Copy(source_fd, offset, count, self._offset, member))
        self._offset += count

    def _flush(self) -> None:
        if self._buffer:  # handed over whole (the copier's thread may write it later): a new buffer follows
            self._copier.write(self._buffer, self._offset - len(self._buffer))
            self._buffer = bytearray()
