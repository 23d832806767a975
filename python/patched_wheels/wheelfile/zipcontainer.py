"""The zip container under a wheel, at the level of raw members: what :mod:`zipfile` does not offer.

:mod:`zipfile` cannot hand out a member's compressed bytes to copy them elsewhere unchanged,
nor stop inflating at the size the directory declares.  So this module checks the records
:mod:`~patched_wheels.wheelfile.zipdirectory` reads, locates members' data itself (checking
each local header against the central directory, since raw copies keep it), streams and
inflates it with positional reads, and encodes the headers and end records
:class:`~patched_wheels.wheelfile.WheelWriter` writes.  Nothing here knows what a wheel is.
"""

from __future__ import annotations

import os
import stat
import struct
import types
import zlib
from operator import attrgetter
from pathlib import Path
from typing import Collection, Generator, Iterator, NamedTuple, Sequence

from patched_wheels.errors import InvalidWheelError
from patched_wheels.wheelfile.zipdirectory import (
    CENTRAL_HEADER,
    CENTRAL_SIG,
    END,
    END64,
    END64_LOCATOR,
    END64_LOCATOR_SIG,
    END64_SIG,
    END_SIG,
    FLAG_UTF8,
    ZIP64_EXTRA_ID,
    ZipMember,
)

_inflate_zlib: types.ModuleType  # one of two modules with the same interface
try:  # Inflating is the cost floor of --verify and of the ELF scan; ISA-L does it ~2-3x faster than zlib.
    from isal import isal_zlib as _inflate_zlib
except ImportError:  # pragma: no cover - depends on the optional "fast" extra
    _inflate_zlib = zlib

INFLATER_NAME = "isal" if _inflate_zlib is not zlib else "zlib"
"""Which inflater members are read with, for benchmarks to report."""
crc32 = _inflate_zlib.crc32
"""The zip's CRC-32, ISA-L's where installed (several times zlib's speed: every member --verify reads pays it)."""

CHUNK_SIZE = 1 << 20
"""Bytes per read/inflate step: large enough to amortise syscalls, small enough for RSS."""
_FIRST_PIECE = 1 << 16
"""A member's first read and inflate step; each next one is 4x larger, up to CHUNK_SIZE.  A reader that
wants only a member's head (the ELF magic of each cached library checked against its wheel, ELF headers)
stops after it: a first step of CHUNK_SIZE inflated a megabyte of each to look at 4 bytes."""

__all__ = [
    "CHUNK_SIZE",
    "DEFLATED",
    "FLAG_DATA_DESCRIPTOR",
    "FLAG_DEFLATE_OPTIONS",
    "INFLATER_NAME",
    "LOCAL_HEADER_SIZE",
    "LOCAL_TIMESTAMP_OFFSET",
    "RawMember",
    "ReadAhead",
    "STORED",
    "UNIX",
    "ZIP64_LIMIT",
    "bound_members",
    "central_directory",
    "central_header",
    "crc32",
    "data_offset",
    "encode_name",
    "end_records",
    "inflated_chunks",
    "local_header",
    "member_content",
    "member_problem",
    "unix_mode",
]

STORED, DEFLATED = 0, 8  # compression methods
_FLAG_ENCRYPTED = 0x1
FLAG_DATA_DESCRIPTOR = 0x8
FLAG_DEFLATE_OPTIONS = 0x6  # informational "compression level" bits, kept on raw copies
# Flags whose meaning is known and harmless; others (strong encryption, patched data, masked
# headers) make readers refuse the member, and a raw copy would carry them into the output.
_FLAGS_UNDERSTOOD = FLAG_DEFLATE_OPTIONS | FLAG_DATA_DESCRIPTOR | FLAG_UTF8
UNIX = 3  # "version made by" host system whose external_attr carries st_mode
_S_IFMT = 0o170000  # the file type bits of st_mode
_PLAIN_KINDS = frozenset((0, stat.S_IFREG, stat.S_IFDIR))  # unknown, regular file, directory

# Conservative like zipfile: some readers treat 32-bit fields as signed.
ZIP64_LIMIT = (1 << 31) - 1
_ZIP_COUNT_LIMIT = 0xFFFF  # this value itself is the "see ZIP64 record" sentinel
_VERSION_DEFAULT, _VERSION_ZIP64 = 20, 45

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50
LOCAL_HEADER_SIZE = _LOCAL_HEADER.size  # then the name and the extra field
LOCAL_TIMESTAMP_OFFSET = 10  # (time, date) inside a local header


# --------------------------------------------------------------------------- the central directory's records


def unix_mode(info: ZipMember) -> int:
    """The member's ``st_mode`` (type and permission bits), or 0 when the archiver recorded none."""
    return info.external_attr >> 16 if info.create_system == UNIX else 0


def member_problem(info: ZipMember, archive_size: int) -> str | None:
    """Why a central directory record's member cannot be read, or copied raw, as a plain file (None: it can).

    Checked without reading the data: encryption, flags and methods other readers would
    treat differently, sizes that disagree or run past the archive's ``archive_size`` bytes,
    and links or special files.
    """
    flags, method = info.flag_bits, info.compress_type
    if flags & _FLAG_ENCRYPTED:
        return "encrypted members are not supported"
    if flags & ~_FLAGS_UNDERSTOOD:
        return f"zip flags {flags:#06x} are not supported"
    if method != DEFLATED and method != STORED:
        return f"compression method {method} is not supported"
    if method == STORED and info.compress_size != info.file_size:
        return f"stored with {info.compress_size} bytes but {info.file_size} declared"
    if info.header_offset < 0 or info.header_offset + _LOCAL_HEADER.size + info.compress_size > archive_size:
        return "data extends past the end of the file (truncated?)"
    if info.create_system == UNIX and (info.external_attr >> 16) & _S_IFMT not in _PLAIN_KINDS:
        return "not a regular file (a symbolic link or special file)"  # archivers disagree on directories' bits
    return None


def bound_members(members: Sequence[ZipMember], directory_offset: int) -> tuple[ZipMember, ZipMember | None] | None:
    """Set each member's ``end_offset`` (the next member's local header, the last one's the central
    directory at ``directory_offset``), and return the first member that already runs past it with the
    smallest local header possible, beside the member it runs into (None: the central directory), or None.

    A zip bomb's trick (entries nested in another's data, or sharing it), refused by zipfile since
    Python 3.11.8 and 3.12.2: each member would be copied out whole.  The local extra field, whose
    length only the local header tells, is counted where that header is read (:func:`data_offset`).
    """
    ordered = sorted(members, key=attrgetter("header_offset"))
    fixed = _LOCAL_HEADER.size
    for member, following in zip(ordered, [*ordered[1:], None]):
        member.end_offset = directory_offset if following is None else following.header_offset
        if member.header_offset + fixed + len(member.raw_name) + member.compress_size > member.end_offset:
            return member, following
    return None


# --------------------------------------------------------------------------- member data


def data_offset(header: bytes | memoryview, info: ZipMember, archive: str) -> int:
    """Where ``info``'s compressed bytes start, once ``header`` (the bytes at its local header, at least
    through the name) is checked: it names the same file and agrees with the central directory, since a
    small member's local header is copied verbatim into patched wheels, and with its extra field the data
    ends by ``info.end_offset`` (:func:`bound_members`).  ``archive`` names the archive in errors."""
    name = info.raw_name
    fixed = _LOCAL_HEADER.size
    if len(header) < fixed:
        raise InvalidWheelError(f"{archive}: {info.filename}: bad local file header")
    signature, _, flags, method, _, _, crc, compress_size, file_size, name_length, extra_length = (
        _LOCAL_HEADER.unpack_from(header)
    )
    if signature != _LOCAL_SIG:
        raise InvalidWheelError(f"{archive}: {info.filename}: bad local file header")
    if name_length != len(name) or header[fixed : fixed + len(name)] != name:  # not a longer name it starts
        raise InvalidWheelError(f"{archive}: {info.filename}: local header names another file")
    # Flags that change how the member reads must be the central record's: a data descriptor flag promises
    # a descriptor after the data, and zipfile decodes a local name that is not ASCII by its own UTF-8 flag.
    differ = flags ^ info.flag_bits
    if differ & FLAG_DATA_DESCRIPTOR or (differ & FLAG_UTF8 and not name.isascii()):
        raise InvalidWheelError(f"{archive}: {info.filename}: local header disagrees with the central directory")
    if flags & ~_FLAGS_UNDERSTOOD or method != info.compress_type:
        raise InvalidWheelError(f"{archive}: {info.filename}: local header disagrees with the central directory")
    if not info.flag_bits & FLAG_DATA_DESCRIPTOR and (
        crc != info.CRC
        or (compress_size != 0xFFFFFFFF and compress_size != info.compress_size)
        or (file_size != 0xFFFFFFFF and file_size != info.file_size)
    ):
        raise InvalidWheelError(f"{archive}: {info.filename}: local header disagrees with the central directory")
    start = info.header_offset + fixed + name_length + extra_length
    if start + info.compress_size > info.end_offset:  # a lying extra length: the copy would take what follows
        raise InvalidWheelError(
            f"{archive}: {info.filename}: local header and data run into the next member or the central directory"
        )
    return start


class RawMember(NamedTuple):
    """Where one member's compressed bytes lie in an open archive: all a copy without inflating needs.

    ``fd`` is the archive's descriptor, owned by whoever opened it and valid while it stays
    open.  Read it only with positional reads (``os.pread``, ``os.copy_file_range`` with an
    offset): threads share it without a file position.  The local header at
    ``info.header_offset`` agrees with the central directory, so it may be copied verbatim.
    """

    info: ZipMember
    fd: int
    data_offset: int
    """Where the compressed bytes start: after the local header, whose own name/extra lengths count."""
    archive: str
    """The archive's name, as errors name it."""

    @classmethod
    def locate(cls, fd: int, info: ZipMember, *, archive: str) -> RawMember:
        """Read and check the local header of ``info`` in the archive open as ``fd`` (:func:`data_offset`)."""
        header = os.pread(fd, _LOCAL_HEADER.size + len(info.raw_name), info.header_offset)
        return cls(info, fd, data_offset(header, info, archive), archive)

    @property
    def data_end(self) -> int:
        """Where the compressed bytes end (a data descriptor, if any, follows and is not copied)."""
        return self.data_offset + self.info.compress_size

    def chunks(self) -> Iterator[bytes]:
        """The compressed bytes, in pieces of at most CHUNK_SIZE (smaller first: :data:`_FIRST_PIECE`)."""
        offset, remaining, size = self.data_offset, self.info.compress_size, _FIRST_PIECE
        while remaining:
            chunk = os.pread(self.fd, min(size, remaining), offset)
            size = min(4 * size, CHUNK_SIZE)
            if not chunk:
                raise InvalidWheelError(f"{self.archive}: {self.info.filename}: truncated member data")
            offset += len(chunk)
            remaining -= len(chunk)
            yield chunk


class ReadAhead:
    """Positional reads of one archive through a window of at least CHUNK_SIZE bytes.

    A writer copies members in the order they lie in the input: read through this, the local
    headers and data of torch's 10,600 members (all but 8 of them under 1 MiB) cost a ``pread``
    per window, not one per member.  It holds a window, so each sequential reader (not threads
    sharing one) has its own; valid while the archive's descriptor ``fd`` stays open.
    """

    __slots__ = ("fd", "_start", "_window")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._start = 0
        self._window = memoryview(b"")

    def read(self, offset: int, length: int) -> memoryview:
        """``length`` bytes at ``offset``, or fewer where the file ends (callers check the length): a view of
        the window, not a copy (the writer copies a small member's bytes once, into its buffer)."""
        start = offset - self._start
        if start < 0 or start + length > len(self._window):
            self._window = memoryview(os.pread(self.fd, max(length, CHUNK_SIZE), offset))
            self._start, start = offset, 0
        return self._window[start : start + length]


def member_content(raw: RawMember) -> Iterator[bytes]:
    """A stored or deflated member's content in pieces of at most CHUNK_SIZE (smaller first: :data:`_FIRST_PIECE`).

    Inflating stops one byte past the size the zip declares (a small archive can inflate to
    gigabytes); whether the result is complete is up to the caller.
    """
    info, archive = raw.info, raw.archive
    if info.compress_type == STORED:
        yield from raw.chunks()
        return
    inflater = _inflate_zlib.decompressobj(wbits=-15)
    allowed = info.file_size  # bytes still expected
    size = _FIRST_PIECE

    def bounded(out: bytes) -> bytes:
        nonlocal allowed
        allowed -= len(out)
        if allowed < 0:
            raise InvalidWheelError(
                f"{archive}: {info.filename}: inflates past the {info.file_size} bytes the zip declares"
            )
        return out

    try:
        for chunk in raw.chunks():
            while chunk:
                out = inflater.decompress(chunk, min(size, allowed + 1))
                size = min(4 * size, CHUNK_SIZE)
                chunk = inflater.unconsumed_tail
                if out:
                    yield bounded(out)
        tail = inflater.flush()
    except _inflate_zlib.error as error:
        raise InvalidWheelError(f"{archive}: {info.filename}: corrupt deflate data ({error})") from None
    if tail:
        yield bounded(tail)
    if not inflater.eof:
        raise InvalidWheelError(f"{archive}: {info.filename}: truncated deflate data")


def inflated_chunks(path: Path, info: ZipMember) -> Generator[bytes, None, None]:
    """One member of the archive at ``path``, in pieces, checked against the zip directory's size and CRC-32.

    For readers that want a few members fast, with ``info`` from :meth:`WheelReader.info` (so the
    wheel passed its checks): this does not hash, and the CRC costs a fraction of the inflating.
    """
    where = f"{path.name}: {info.filename}"
    size = crc = 0
    with open(path, "rb") as handle:
        for chunk in member_content(RawMember.locate(handle.fileno(), info, archive=path.name)):
            size += len(chunk)
            crc = crc32(chunk, crc)
            yield chunk
    if size != info.file_size or crc != info.CRC:
        raise InvalidWheelError(f"{where}: inflated data does not match the zip directory")


# --------------------------------------------------------------------------- encoding


def encode_name(arcname: str) -> tuple[bytes, int]:
    """A new member's name as headers spell it, and the flag that says it is UTF-8 (if it is not ASCII)."""
    try:
        return arcname.encode("ascii"), 0
    except UnicodeEncodeError:
        return arcname.encode("utf-8"), FLAG_UTF8


#: Android's zipalign extra field (an unsigned 16-bit alignment, then zero bytes): readers skip an extra
#: field they do not know, so it can pad a local header without changing what the member holds.
ALIGNMENT_EXTRA_ID = 0xD935
_ALIGNMENT_EXTRA = struct.Struct("<HHH")
PAGE_SIZE = 4096
_COPY_BLOCK = 1 << 16


def kernel_copied(compress_size: int) -> bool:
    """Whether a raw copy of a member this large goes out in kernel copies (WheelWriter.copy_raw_members),
    after a local header padded for them (:func:`local_header`'s ``data_like``)."""
    return compress_size >= CHUNK_SIZE


#: The most a padded local header grows by (:func:`_alignment_padding`), for estimates of a wheel's size.
MAX_ALIGNMENT_PADDING = _COPY_BLOCK + _ALIGNMENT_EXTRA.size - 1


def _alignment_padding(start: int, source: int, room: int) -> int:
    """Bytes of extra field that move data written at ``start`` to where a kernel copy from ``source`` is
    cheapest, within ``room``: 0, or at least an empty alignment field.

    Measured on Linux 6.x/ext4 (copy_file_range of 459 MB from a page cache, system time): 0.17-0.19 s
    when the destination lies at the source's offset within a page *and* in the first page of a 64 KiB
    block, 0.24-0.28 s at the same offset within a page but another page of the block, or at another
    offset within the page.  The same place within a page is what any page cache copy needs; a padding
    the first choice cannot get (it would overflow the extra field) falls back to it."""
    for block in (_COPY_BLOCK, PAGE_SIZE):
        padding = (source % PAGE_SIZE - start) % block
        if padding and padding < _ALIGNMENT_EXTRA.size:
            padding += block
        if padding <= room:
            return padding
    raise AssertionError("a page of padding always fits in an extra field")


def local_header(
    member: ZipMember, zip64: bool, dos_date: int, dos_time: int, *, data_like: int | None = None
) -> bytes:
    """Local file header of a written ``member``; ``zip64`` puts both sizes in the extra field (a requirement
    of the spec when either may pass :data:`ZIP64_LIMIT`).

    ``data_like``: the offset the member's data had in the input, for a member whose data is then copied
    by the kernel: an alignment extra field pads the header to put the data where that copy is cheapest
    (:func:`_alignment_padding`).
    """
    if zip64:
        extra = struct.pack("<HHQQ", ZIP64_EXTRA_ID, 16, member.file_size, member.compress_size)
        sizes = (0xFFFFFFFF, 0xFFFFFFFF)
    else:
        extra = b""
        sizes = (member.compress_size, member.file_size)
    version = _VERSION_ZIP64 if zip64 else _VERSION_DEFAULT
    name = member.raw_name
    if data_like is not None:
        start = member.header_offset + _LOCAL_HEADER.size + len(name) + len(extra)
        padding = _alignment_padding(start, data_like, 0xFFFF - len(extra))
        if padding:
            extra += _ALIGNMENT_EXTRA.pack(ALIGNMENT_EXTRA_ID, padding - 4, PAGE_SIZE) + bytes(
                padding - _ALIGNMENT_EXTRA.size
            )
    header = _LOCAL_HEADER.pack(_LOCAL_SIG, *_shared_fields(member, version, dos_date, dos_time, sizes, extra))
    return header + name + extra


def central_header(member: ZipMember, local_zip64: bool, dos_date: int, dos_time: int) -> bytes:
    """Central directory record of a written ``member`` (``local_zip64``: its local header has the ZIP64
    extra); only fields that overflow go to the ZIP64 extra, in spec order, which becomes ``member.extra``:
    the member is then the record a reader parses back."""
    compress_size, file_size, offset, extra = member.compress_size, member.file_size, member.header_offset, b""
    if max(compress_size, file_size, offset) > ZIP64_LIMIT:  # rare: the plain record is one pack
        values: list[int] = []
        if file_size > ZIP64_LIMIT or compress_size > ZIP64_LIMIT:
            values += [file_size, compress_size]
            compress_size = file_size = 0xFFFFFFFF
        if offset > ZIP64_LIMIT:
            values.append(offset)
            offset = 0xFFFFFFFF
        extra = member.extra = struct.pack(f"<HH{len(values)}Q", ZIP64_EXTRA_ID, 8 * len(values), *values)
    version = _VERSION_ZIP64 if extra or local_zip64 else _VERSION_DEFAULT
    name = member.raw_name
    header = CENTRAL_HEADER.pack(
        CENTRAL_SIG,
        member.create_system << 8 | version,
        *_shared_fields(member, version, dos_date, dos_time, (compress_size, file_size), extra),
        0,  # comment length
        0,  # disk number
        0,  # internal attributes
        member.external_attr,
        offset,
    )
    return header + name + extra


def central_directory(
    members: Sequence[ZipMember], local_zip64: Collection[str], dos_date: int, dos_time: int
) -> bytes:
    """The central directory of written ``members``: :func:`central_header` of each (``local_zip64``: the names of
    those whose local header has the ZIP64 extra), the common record (no field past :data:`ZIP64_LIMIT`) packed
    here in one call with the same fields in the same order, since a patch writes 10,600 of torch's."""
    pack, signature = CENTRAL_HEADER.pack, CENTRAL_SIG
    parts: list[bytes] = []
    for member in members:
        name, compress_size, file_size, offset = (
            member.raw_name,
            member.compress_size,
            member.file_size,
            member.header_offset,
        )
        if compress_size > ZIP64_LIMIT or file_size > ZIP64_LIMIT or offset > ZIP64_LIMIT:
            parts.append(central_header(member, member.filename in local_zip64, dos_date, dos_time))
            continue
        version = _VERSION_ZIP64 if member.filename in local_zip64 else _VERSION_DEFAULT
        # As central_header writes it: signature, made by, then _shared_fields, then the fields after them.
        parts.append(
            pack(
                signature,
                member.create_system << 8 | version,
                version,
                member.flag_bits,
                member.compress_type,
                dos_time,
                dos_date,
                member.CRC,
                compress_size,
                file_size,
                len(name),
                0,  # extra length: nothing overflows
                0,  # comment length
                0,  # disk number
                0,  # internal attributes
                member.external_attr,
                offset,
            )
        )
        parts.append(name)
    return b"".join(parts)


def _shared_fields(
    member: ZipMember, version: int, dos_date: int, dos_time: int, sizes: tuple[int, int], extra: bytes
) -> tuple[int, ...]:
    """The run of fields a local header and its central record both write, in the same order (APPNOTE 4.3.7,
    4.3.12): version needed, flags, method, DOS time and date, CRC-32, the two sizes as that record writes them,
    and the lengths of the name and of that record's ``extra``."""
    return (
        version,
        member.flag_bits,
        member.compress_type,
        dos_time,
        dos_date,
        member.CRC,
        *sizes,
        len(member.raw_name),
        len(extra),
    )


def end_records(count: int, directory_offset: int, directory_size: int) -> bytes:
    """End of central directory, preceded by the ZIP64 record and locator when anything overflows."""
    needs_zip64 = count >= _ZIP_COUNT_LIMIT or directory_offset > ZIP64_LIMIT or directory_size > ZIP64_LIMIT
    records = b""
    if needs_zip64:
        end64_offset = directory_offset + directory_size
        records += END64.pack(
            END64_SIG,
            END64.size - 12,
            UNIX << 8 | _VERSION_ZIP64,
            _VERSION_ZIP64,
            0,
            0,
            count,
            count,
            directory_size,
            directory_offset,
        )
        records += END64_LOCATOR.pack(END64_LOCATOR_SIG, 0, end64_offset, 1)
        count = min(count, 0xFFFF)
        directory_offset = min(directory_offset, 0xFFFFFFFF)
        directory_size = min(directory_size, 0xFFFFFFFF)
    return records + END.pack(END_SIG, 0, 0, count, count, directory_size, directory_offset, 0)
