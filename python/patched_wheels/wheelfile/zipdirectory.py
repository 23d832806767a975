"""The central directory of a zip archive, read as :mod:`zipfile` reads it, but at copy speed.

Every command opens at least one wheel, and torch's has 10,600 members: zipfile builds a
ZipInfo object per member (decoding its extra field, its date) in twice the time this takes
with one ``struct`` unpack per record.  The record layouts here are also what
:mod:`~patched_wheels.wheelfile.zipcontainer` encodes.  Nothing here knows what a wheel is.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from patched_wheels.errors import InvalidWheelError

__all__ = [
    "CENTRAL_HEADER",
    "CENTRAL_SIG",
    "END",
    "END64",
    "END64_LOCATOR",
    "END64_LOCATOR_SIG",
    "END64_SIG",
    "END_SIG",
    "FLAG_UTF8",
    "ZIP64_EXTRA_ID",
    "ZipMember",
    "read_directory",
]

FLAG_UTF8 = 0x800  # the name is UTF-8 (else cp437)
CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")
CENTRAL_SIG = 0x02014B50
# CENTRAL_HEADER as the parser reads it: the fields it does not use (time, date, disk, internal attributes)
# skipped as padding, a smaller tuple per record.
_CENTRAL_READ = struct.Struct("<IHHHH4xIIIHHH4xII")
END = struct.Struct("<IHHHHIIH")
END_SIG = 0x06054B50
_END_SIG_BYTES = struct.pack("<I", END_SIG)
END64 = struct.Struct("<IQHHIIQQQQ")
END64_SIG = 0x06064B50
END64_LOCATOR = struct.Struct("<IIQI")
END64_LOCATOR_SIG = 0x07064B50
ZIP64_EXTRA_ID = 0x0001
_VERSION_MAX = 63  # the newest format version zipfile reads (6.3)
_EXTRA_BLOCK = struct.Struct("<HH")


class ZipMember:
    """One central directory record: what checking, reading and raw-copying a member needs.

    Attributes are named like :class:`zipfile.ZipInfo`'s; ``raw_name`` is the name as the headers
    spell it (a local header copied verbatim must repeat it byte for byte).  A plain class with
    slots, filled from one ``struct`` unpack per record: torch's wheel has 10,600 of them, and
    every command parses a wheel's directory (zipfile's ZipInfo cost 3x as much).

    ``end_offset``, where the member's local header and data must end (the next member's local
    header, or the central directory), is not a record's field: ``zipcontainer.bound_members``
    sets it once the whole directory is known, before any member is read.
    """

    __slots__ = (
        "filename",
        "raw_name",
        "create_system",
        "flag_bits",
        "compress_type",
        "CRC",
        "compress_size",
        "file_size",
        "header_offset",
        "external_attr",
        "extra",
        "end_offset",
    )
    end_offset: int  # declared for the type checker only: set by bound_members, not here

    def __init__(  # noqa: PLR0913 - one parameter per field of a central directory record, filled from one unpack
        self,
        filename: str,
        raw_name: bytes,
        create_system: int,
        flag_bits: int,
        compress_type: int,
        crc: int,
        compress_size: int,
        file_size: int,
        header_offset: int,
        external_attr: int,
        extra: bytes,
    ) -> None:
        self.filename = filename
        self.raw_name = raw_name
        self.create_system = create_system
        self.flag_bits = flag_bits
        self.compress_type = compress_type
        self.CRC = crc
        self.compress_size = compress_size
        self.file_size = file_size
        self.header_offset = header_offset
        self.external_attr = external_attr
        self.extra = extra

    def __repr__(self) -> str:
        return f"<ZipMember {self.filename!r} at {self.header_offset}>"


class _NotZip(Exception):
    """The bytes are not a zip archive we can read (the message says where they stop being one)."""


class _Unsupported(Exception):
    """A zip feature :mod:`zipfile` refuses too (a format version newer than it reads)."""


def read_directory(fd: int, *, path: Path) -> tuple[list[ZipMember], int]:
    """The central directory of the archive open as ``fd``, read with positional reads: its records,
    and where it starts in the file (where the last member's bytes must end).

    Read as :mod:`zipfile` reads it (what pip and installer use): the end record at the end or
    before a comment, the ZIP64 records when present, data prepended to the archive allowed
    (offsets shift by its length), ZIP64 extra fields decoded, names UTF-8 when flagged, else
    cp437; and refused where it refuses (no end record, a record without its signature or cut
    by the directory's end, a corrupt extra field, a version above 6.3, several disks).
    ``path`` names the archive in errors.
    """
    try:
        file_size = os.fstat(fd).st_size
        start, size, shift = _directory_extent(fd, file_size)
        # Never more than the file holds: a lying size must not allocate gigabytes.
        data = os.pread(fd, min(size, file_size - start), start) if start < file_size else b""
        return _parse_directory(data, size, shift), start
    except OSError as error:
        raise InvalidWheelError(f"{path}: cannot read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:  # a name flagged UTF-8 that is not: error.object is the name
        raise InvalidWheelError(
            f"{path}: member {error.object!r}: flagged UTF-8, not UTF-8 (byte {error.start})"
        ) from None
    except _NotZip as error:
        raise InvalidWheelError(f"{path}: not a zip archive or truncated ({error})") from None
    except _Unsupported as error:
        raise InvalidWheelError(f"{path}: unsupported zip archive ({error})") from None


def _directory_extent(fd: int, file_size: int) -> tuple[int, int, int]:
    """(offset, size) of the central directory, and how far data prepended to the archive shifts offsets."""
    if file_size < END.size:
        raise _NotZip("File is not a zip file")
    tail_start = max(file_size - (1 << 16) - END.size, 0)  # the end record, then a comment of up to 64 KiB
    tail = os.pread(fd, file_size - tail_start, tail_start)
    if tail[-END.size : -END.size + 4] == _END_SIG_BYTES and tail[-2:] == b"\0\0":
        position = len(tail) - END.size  # no comment: the common case
    else:
        position = tail.rfind(_END_SIG_BYTES)
        if position < 0 or position + END.size > len(tail):
            raise _NotZip("File is not a zip file")
    size, offset = END.unpack_from(tail, position)[5:7]
    end_offset = tail_start + position
    shift = end_offset - size - offset
    locator_offset = end_offset - END64_LOCATOR.size
    locator = os.pread(fd, END64_LOCATOR.size, locator_offset) if locator_offset >= 0 else b""
    if len(locator) == END64_LOCATOR.size:
        signature, disk, _, disks = END64_LOCATOR.unpack(locator)
        if signature == END64_LOCATOR_SIG:
            if disk != 0 or disks > 1:
                raise _NotZip("zipfiles that span multiple disks are not supported")
            record_offset = locator_offset - END64.size
            record = os.pread(fd, END64.size, record_offset) if record_offset >= 0 else b""
            if len(record) == END64.size and END64.unpack(record)[0] == END64_SIG:
                size, offset = END64.unpack(record)[8:10]
                shift = end_offset - size - offset - END64.size - END64_LOCATOR.size
    if offset + shift < 0:
        raise _NotZip("Bad offset for central directory")
    return offset + shift, size, shift


def _parse_directory(data: bytes, size: int, shift: int) -> list[ZipMember]:
    """The records of a central directory of ``size`` bytes (``data``: those the file holds)."""
    members = []
    unpack = _CENTRAL_READ.unpack_from
    header_size = _CENTRAL_READ.size
    position = 0
    walked: set[bytes] = set()  # extra fields already decoded that hold no ZIP64 block: nothing in them to read
    while position < size:
        if position + header_size > len(data):
            raise _NotZip("Truncated central directory")
        (
            signature,
            made_by,
            version,
            flags,
            method,
            crc,
            compress_size,
            file_size,
            name_length,
            extra_length,
            comment_length,
            external_attr,
            offset,
        ) = unpack(data, position)
        if signature != CENTRAL_SIG:
            raise _NotZip("Bad magic number for central directory")
        if version & 0xFF > _VERSION_MAX:
            raise _Unsupported(f"zip file version {(version & 0xFF) / 10:.1f}")
        name_start = position + header_size
        extra_start = name_start + name_length
        position = extra_start + extra_length + comment_length
        if position > len(data):
            raise _NotZip("Truncated central directory")
        raw_name = data[name_start:extra_start]
        if flags & FLAG_UTF8:
            name = raw_name.decode("utf-8")
        else:
            name = raw_name.decode("ascii" if raw_name.isascii() else "cp437")
        extra = data[extra_start : extra_start + extra_length]
        # Archivers repeat the same extra field (torch's 10,600 members have 35): one without a ZIP64 block
        # decodes to nothing, once it passed _decode_extra's checks.
        if extra and extra not in walked:
            file_size, compress_size, offset, zip64 = _decode_extra(extra, file_size, compress_size, offset)
            if not zip64:
                walked.add(extra)
        members.append(
            ZipMember(
                name,
                raw_name,
                made_by >> 8,
                flags,
                method,
                crc,
                compress_size,
                file_size,
                offset + shift,
                external_attr,
                extra,
            )
        )
    return members


def _decode_extra(extra: bytes, file_size: int, compress_size: int, offset: int) -> tuple[int, int, int, bool]:
    """The sizes and offset a ZIP64 extra field holds in place of the 0xFFFFFFFF placeholders, and whether
    ``extra`` has a ZIP64 block at all.

    As :mod:`zipfile` decodes it: every block must fit, each ZIP64 block read in turn.
    """
    zip64 = False
    position, end = 0, len(extra)
    while end - position >= 4:
        kind, length = _EXTRA_BLOCK.unpack_from(extra, position)
        block_end = position + 4 + length
        if block_end > end:
            raise _NotZip(f"Corrupt extra field {kind:04x} (size={length})")
        if kind == ZIP64_EXTRA_ID:
            zip64 = True
            values = extra[position + 4 : block_end]
            field = "File size"
            try:
                if file_size in (0xFFFF_FFFF_FFFF_FFFF, 0xFFFF_FFFF):
                    (file_size,), values = struct.unpack_from("<Q", values), values[8:]
                field = "Compress size"
                if compress_size == 0xFFFF_FFFF:
                    (compress_size,), values = struct.unpack_from("<Q", values), values[8:]
                field = "Header offset"
                if offset == 0xFFFF_FFFF:
                    (offset,) = struct.unpack_from("<Q", values)
            except struct.error:
                raise _NotZip(f"Corrupt zip64 extra field. {field} not found.") from None
        position = block_end
    return file_size, compress_size, offset, zip64
