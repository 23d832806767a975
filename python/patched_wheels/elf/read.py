"""The one ELF reader: the dynamic section of a shared library, streamed from its wheel member.

Everything that reads a library goes through :func:`read_dynamic`: the graph (:func:`read_library`:
SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH as an :class:`ElfLibrary`), and the edits of
:mod:`patched_wheels.elf.edit`, :mod:`patched_wheels.elf.grow` and :mod:`patched_wheels.patch.split`
(:class:`DynamicLayout`: where each table lies, to rewrite it).  It reads the ELF and program
headers, the dynamic section and the strings its entries name, with :mod:`struct`: a few kilobytes.

Why the members are streamed, not opened: ``.dynamic`` sits at ~97 % of these files and deflate has
no random access, so the member has to be inflated up to there anyway.  :class:`ForwardReader`
follows :func:`patched_wheels.wheelfile.inflated_chunks` (python-isal's faster inflater when it is
installed; each step releases the GIL, so a thread per core really runs in parallel), keeping one
chunk, the file's first megabyte (where a plain linker puts the dynamic string table: read after
``.dynamic``, it costs no second pass), the ranges a caller said it would read later (the dynamic string
table where patchelf moved it past ``.dynamic``, the section headers: :meth:`ForwardReader.keep`) and what was
asked for; memory stays bounded whatever the member's size and layout, and a read behind the stream's
position starts another pass, a few at most.  The graph (:mod:`patched_wheels.elf.graph`) opens wheels as
:class:`~patched_wheels.wheelfile.WheelReader` first: only a wheel we accept is analysed.
"""

from __future__ import annotations

import os
import posixpath
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Protocol

from patched_wheels.errors import ElfError
from patched_wheels.wheelfile import ZipMember, inflated_chunks
from patched_wheels.wheelfile.schemes import data_scheme

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
STRING_TAGS = (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)
"""The entries whose strings are read: what an :class:`ElfLibrary` holds, and what an edit rewrites."""
SHT_PROGBITS, SHT_STRTAB, SHT_DYNAMIC, SHT_NOBITS, SHT_DYNSYM = 1, 3, 6, 8, 11
SHF_ALLOC, SHF_TLS = 0x2, 0x400
SECTION_FIELDS = ("name", "type", "flags", "addr", "offset", "size", "link", "info", "addralign", "entsize")
"""The fields of :attr:`ElfFormat.section`, in order."""
MAX_TABLE = 1 << 20  # program headers, dynamic section: a few kilobytes in any real library
_MAX_SECTION_TABLE = 8 << 20  # 65535 section headers of 64 bytes, and room
_MAX_STRING = 1 << 16  # a search path or SONAME longer than this is not one a linker wrote
# What one library's names may make us hold (torch's libtorch_cuda.so: a few hundred DT_NEEDED entries, some
# kilobytes of strings, a RUNPATH of a few hundred bytes): without a bound, a tiny member whose entries point at
# many offsets of a compressible string table, or repeat one long search path, would hold gigabytes.
_MAX_NAMES = 1 << 12  # DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH entries; and, split, search path entries
_MAX_NAME_BYTES = 1 << 18  # the distinct strings those entries name, their NULs counted
_MAX_PASSES = 4  # headers, PT_DYNAMIC, strings: in file order that is one or two passes; hostile layouts get no more
_HEAD_SIZE = 1 << 20  # kept from the first pass: the ELF and program headers, and a plain linker's .dynstr
# What else one stream may keep as it passes (ForwardReader.keep): torch's largest .dynstr is 10 MB.  Per library
# read, so a thread per core holds at most this much more each; a larger table is read by another pass instead.
_MAX_KEPT = 16 << 20
# libfoo.so, libfoo.so.12, libfoo.so.12.1.105, _C.cpython-311-x86_64-linux-gnu.so
_SHARED_LIBRARY_NAME = re.compile(r"\.so(\.\d+)*$")

OpenChunks = Callable[[], Iterator[bytes]]
"""Starts a new pass over a member's bytes, from its first byte, in chunks."""


@dataclass(frozen=True)
class ElfLibrary:
    """One shared library of a wheel, as the dynamic loader sees it."""

    wheel: str
    """File name of the wheel that ships it."""
    path: str
    """Path relative to site-packages once installed, e.g. ``nvidia/cusparse/lib/libcusparse.so.12``; for a
    data-scheme library its archive path, ``<dist>.data/data/...`` (see :func:`patched_wheels.wheelfile.schemes.install_path`)."""
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]

    @property
    def filename(self) -> str:
        return posixpath.basename(self.path)

    @property
    def search_path(self) -> tuple[str, ...]:
        """Directories the loader searches for this library's own DT_NEEDED: DT_RUNPATH wins over DT_RPATH."""
        return self.runpath or self.rpath

    def __str__(self) -> str:
        return f"{self.path} ({self.wheel})"

    def __hash__(self) -> int:
        # Its wheel and path name a library: a hash of every field cost a pass over thousands of DT_NEEDED names
        # at each dict or set lookup (the graph's and doctor's are keyed by library).  Equality still compares all.
        return hash((self.wheel, self.path))


def is_shared_library_name(path: str) -> bool:
    return bool(_SHARED_LIBRARY_NAME.search(path))  # the pattern holds no "/": it matches in the file name


def starts_as_elf(wheel: Path, info: ZipMember) -> bool:
    """Whether a member begins with the ELF magic, inflating only its first piece (not the member)."""
    pieces = inflated_chunks(wheel, info)
    head = b""
    try:
        for piece in pieces:
            head += piece
            if len(head) >= len(ELF_MAGIC):
                break
    finally:
        pieces.close()
    return head.startswith(ELF_MAGIC)


@dataclass(frozen=True)
class ElfFormat:
    """The class (32/64-bit) and byte order of one ELF file: the layout of each header it has."""

    wide: bool
    order: str
    """``<`` or ``>``, for :mod:`struct`."""

    @property
    def word(self) -> int:
        """The alignment of an address-sized field (and of a dynamic entry)."""
        return 8 if self.wide else 4

    @property
    def program(self) -> struct.Struct:
        """A program header, fields in :attr:`program_fields` order."""
        return struct.Struct(self.order + ("IIQQQQQQ" if self.wide else "IIIIIIII"))

    @property
    def program_fields(self) -> tuple[str, ...]:
        if self.wide:
            return ("type", "flags", "offset", "vaddr", "paddr", "filesz", "memsz", "align")
        return ("type", "offset", "vaddr", "paddr", "filesz", "memsz", "flags", "align")

    @property
    def section(self) -> struct.Struct:
        """A section header, fields in :data:`SECTION_FIELDS` order."""
        return struct.Struct(self.order + ("IIQQQQIIQQ" if self.wide else "IIIIIIIIII"))

    @property
    def dynamic(self) -> struct.Struct:
        """A dynamic entry: (d_tag, d_val)."""
        return struct.Struct(self.order + ("qQ" if self.wide else "iI"))

    @property
    def header_tables(self) -> struct.Struct:
        """From the ELF header: e_phoff, e_shoff, then e_phentsize, e_phnum, e_shentsize, e_shnum."""
        return struct.Struct(self.order + ("32xQQ6xHHHH" if self.wide else "28xII6xHHHH"))

    @property
    def shoff_field(self) -> tuple[int, struct.Struct]:
        """Where e_shoff lies in the ELF header, and its format."""
        return (40, struct.Struct(self.order + "Q")) if self.wide else (32, struct.Struct(self.order + "I"))


@dataclass(frozen=True)
class DynamicLayout:
    """What a dynamic-section edit needs to know of a library, read from its stream."""

    format: ElfFormat
    phoff: int
    phentsize: int
    programs: tuple[dict[str, int], ...]
    """Program headers, as field name -> value (:attr:`ElfFormat.program_fields`)."""
    shoff: int
    shentsize: int
    shnum: int
    dynamic_index: int
    """Which program header is PT_DYNAMIC."""
    entries: tuple[tuple[int, int], ...]
    """The dynamic entries before the first DT_NULL."""
    nulls: int
    """How many DT_NULL entries follow the live ones in a row (1, or more where a tool left spare slots)."""
    strtab: int
    """DT_STRTAB, an address."""
    strtab_offset: int
    """Its file offset."""
    strsz: int
    strings: Mapping[int, bytes]
    """The string of each :data:`STRING_TAGS` entry, by its offset in the table."""

    @property
    def dynamic(self) -> dict[str, int]:
        return self.programs[self.dynamic_index]

    def values(self, tag: int) -> list[int]:
        return [value for entry_tag, value in self.entries if entry_tag == tag]

    def string(self, tag: int) -> bytes | None:
        """The string of the first ``tag`` entry, if any."""
        offsets = self.values(tag)
        return self.strings[offsets[0]] if offsets else None

    def search_path_tags(self) -> tuple[int, ...]:
        """The tags a new search path is written to: those the library has (its kind is kept: DT_RPATH is
        also searched for what the libraries it loads need, and a library may rely on that), else DT_RUNPATH."""
        return tuple(tag for tag in (DT_RPATH, DT_RUNPATH) if self.values(tag)) or (DT_RUNPATH,)

    def search_path(self) -> str:
        """The search path the loader uses for this library's own DT_NEEDED (DT_RUNPATH wins), ``""`` if none."""
        found = self.string(DT_RUNPATH) or self.string(DT_RPATH) or b""
        return found.decode("utf-8", "surrogateescape")


class ByteSource(Protocol):
    """Where the reader's bytes come from: a member streamed from a wheel, or a file on disk."""

    def read(self, offset: int, size: int, what: str, *, exact: bool = True) -> bytes: ...

    def keep(self, offset: int, size: int) -> None:
        """Bytes that will be read, perhaps after the stream is past them: held once streamed (:class:`ForwardReader`)."""


class FileReader:
    """:class:`ByteSource` over a file on disk (an installed library), read where asked."""

    def __init__(self, fd: int, where: str) -> None:
        self._fd = fd
        self._where = where
        self._size = os.fstat(fd).st_size

    def read(self, offset: int, size: int, what: str, *, exact: bool = True) -> bytes:
        """``size`` bytes at ``offset``; when the file ends first, an ElfError naming ``what`` (or, not
        ``exact``, the bytes there are: never more than the file holds, whatever a header claims)."""
        # Nothing asked of os.pread past the end: an offset a header claims can be past what an off_t holds.
        data = os.pread(self._fd, min(size, self._size - offset), offset) if 0 <= offset < self._size else b""
        if exact and len(data) < size:
            raise ElfError(
                f"{self._where}: truncated or corrupt ELF file ({what} at offset {offset} runs past its end)"
            )
        return data

    def keep(self, offset: int, size: int) -> None:
        """Nothing to do: a file on disk is read where asked."""

    def finish(self) -> int:
        """The file's size (as :meth:`ForwardReader.finish`; a file on disk needs no stream to its end)."""
        return self._size


class ForwardReader:
    """Reads byte ranges of a member that can only be streamed from its start: a range behind the
    stream's position starts another pass, unless it lies in the first megabyte, kept from the first
    pass, or in a range the caller said it would read (:meth:`keep`), kept once streamed.  Holds those, one
    chunk and what was asked for, nothing more."""

    def __init__(self, open_chunks: OpenChunks, where: str) -> None:
        self._open = open_chunks
        self._where = where
        self._chunks: Iterator[bytes] = iter(())
        self._start = 0  # file offset of self._chunk
        self._chunk = b""
        self._head = bytearray()  # the file's first bytes, up to _HEAD_SIZE
        self._kept: list[tuple[int, int, bytearray]] = []  # (offset, size, the bytes streamed so far from offset)
        self._passes = 0

    def keep(self, offset: int, size: int) -> None:
        """Hold the ``size`` bytes at ``offset`` as the stream passes them, to be read later without another pass
        (a library's section headers and dynamic strings, which can lie before what is read first): ahead of the
        stream, within :data:`_MAX_KEPT` in all; otherwise nothing is held, and reading them may take a pass."""
        held = sum(kept_size for _, kept_size, _ in self._kept)
        ahead = self._passes == 0 or offset >= self._start + len(self._chunk)
        if ahead and 0 < size and held + size <= _MAX_KEPT and offset >= len(self._head):
            self._kept.append((offset, size, bytearray()))

    def read(self, offset: int, size: int, what: str, *, exact: bool = True) -> bytes:
        """``size`` bytes at ``offset``; when the file ends first, an ElfError naming ``what`` (or, not
        ``exact``, the bytes there are)."""
        if offset + size <= len(self._head):
            return bytes(self._head[offset : offset + size])
        for start, _, data in self._kept:
            if start <= offset and offset + size <= start + len(data):
                return bytes(data[offset - start : offset - start + size])
        if offset < self._start or self._passes == 0:
            if self._passes == _MAX_PASSES:
                raise ElfError(f"{self._where}: {what} is out of file order too often to be read as a stream")
            self._passes += 1
            self._chunks, self._start, self._chunk = self._open(), 0, b""
        out = bytearray()
        while len(out) < size:
            end = self._start + len(self._chunk)
            if offset + len(out) < end:
                begin = offset + len(out) - self._start
                out += self._chunk[begin : begin + size - len(out)]
                continue
            self._start, self._chunk = end, next(self._chunks, b"")
            self._hold()
            if not self._chunk and not exact:
                break
            if not self._chunk:
                raise ElfError(
                    f"{self._where}: truncated or corrupt ELF file ({what} at offset {offset} runs past its end)"
                )
        return bytes(out)

    def _hold(self) -> None:
        """Take what the head and the kept ranges need of the chunk just streamed (each filled in file order)."""
        start, chunk = self._start, self._chunk
        if start == len(self._head) < _HEAD_SIZE:
            self._head += chunk[: _HEAD_SIZE - len(self._head)]
        for offset, size, data in self._kept:
            at = offset + len(data)  # the next byte the range lacks
            if len(data) < size and start <= at < start + len(chunk):
                data += chunk[at - start : at - start + size - len(data)]

    def finish(self) -> int:
        """Stream the current pass to its end and return the file's size: :func:`~patched_wheels.wheelfile.inflated_chunks`
        checks the member's size and CRC-32 there, so what was read is known to be the member's bytes."""
        for chunk in self._chunks:
            self._start, self._chunk = self._start + len(self._chunk), chunk
            self._hold()
        return self._start + len(self._chunk)


def read_dynamic(open_chunks: OpenChunks, where: str) -> DynamicLayout:
    """The dynamic section of the ELF file ``open_chunks()`` streams, for an edit; anything this reader cannot
    follow (a cut or lying header, no PT_DYNAMIC, no DT_NULL, tables of absurd size) is an ElfError naming ``where``."""
    _, layout = _read_layout(ForwardReader(open_chunks, where), where)
    if layout is None:
        raise ElfError(f"{where}: expected one PT_DYNAMIC program header, found 0")
    return layout


def _read_header(reader: ByteSource, where: str) -> tuple[ElfFormat, tuple[int, int, int, int, int, int]]:
    """The file's class and byte order, and its header's e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize,
    e_shnum; an ElfError for a file that is no ELF file or whose header tables are of no size a linker writes."""
    magic = reader.read(0, len(ELF_MAGIC), "the ELF magic", exact=False)
    if magic != ELF_MAGIC:
        raise ElfError(f"{where}: not an ELF file (starts with {magic!r})")
    ident = reader.read(0, 16, "the ELF header")
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ElfError(f"{where}: not an ELF file of a known class and byte order")
    elf = ElfFormat(wide=ident[4] == 2, order="<" if ident[5] == 1 else ">")
    header = reader.read(0, 64 if elf.wide else 52, "the ELF header")
    phoff, shoff, phentsize, phnum, shentsize, shnum = tables = elf.header_tables.unpack_from(header)
    if phentsize < elf.program.size or phnum * phentsize > MAX_TABLE or phnum == 0xFFFF:
        raise ElfError(f"{where}: unsupported program header table ({phnum} entries of {phentsize} bytes)")
    if shnum and shentsize < elf.section.size or shnum == 0 and shoff or shnum * shentsize > _MAX_SECTION_TABLE:
        raise ElfError(f"{where}: unsupported section header table ({shnum} entries of {shentsize} bytes)")
    return elf, tables


def read_sections(reader: ByteSource, where: str) -> tuple[ElfFormat, list[dict[str, int]]]:
    """The file's class and byte order, and its section headers as field name -> value (:data:`SECTION_FIELDS`)."""
    elf, (_, shoff, _, _, shentsize, shnum) = _read_header(reader, where)
    return elf, section_headers(reader, elf, shoff, shnum, shentsize)


def section_headers(reader: ByteSource, elf: ElfFormat, shoff: int, shnum: int, shentsize: int) -> list[dict[str, int]]:
    """The ``shnum`` section headers at ``shoff``, as field name -> value (:data:`SECTION_FIELDS`)."""
    table = reader.read(shoff, shnum * shentsize, "the section headers")
    return [dict(zip(SECTION_FIELDS, elf.section.unpack_from(table, index * shentsize))) for index in range(shnum)]


def _read_layout(reader: ByteSource, where: str, *, keep_sections: bool = False) -> tuple[int, DynamicLayout | None]:
    """Where the section header table ends, and :func:`read_dynamic` on ``reader`` (None for an ELF file
    with no PT_DYNAMIC: nothing it loads, no name).  ``keep_sections``: the section header table is kept as the
    stream passes it (:meth:`ForwardReader.keep`), to be read after (torch's lie between ``.dynamic`` and its
    strings)."""
    elf, (phoff, shoff, phentsize, phnum, shentsize, shnum) = _read_header(reader, where)
    if keep_sections:
        reader.keep(shoff, shnum * shentsize)
    table = reader.read(phoff, phnum * phentsize, "the program headers")
    names = elf.program_fields
    programs = tuple(dict(zip(names, elf.program.unpack_from(table, index * phentsize))) for index in range(phnum))
    dynamic_indices = [index for index, program in enumerate(programs) if program["type"] == PT_DYNAMIC]
    if not dynamic_indices:
        return shoff + shnum * shentsize, None
    if len(dynamic_indices) != 1:
        raise ElfError(f"{where}: expected one PT_DYNAMIC program header, found {len(dynamic_indices)}")
    dynamic = programs[dynamic_indices[0]]
    entry = elf.dynamic
    if dynamic["filesz"] > MAX_TABLE or dynamic["filesz"] < entry.size:
        raise ElfError(f"{where}: PT_DYNAMIC of {dynamic['filesz']} bytes")
    if _file_offset(programs, dynamic["vaddr"], dynamic["filesz"]) != dynamic["offset"]:  # the loader reads p_vaddr
        raise ElfError(f"{where}: PT_DYNAMIC's file offset is not where a PT_LOAD maps its address")
    section = reader.read(dynamic["offset"], dynamic["filesz"], "the dynamic section")
    slots = len(section) // entry.size
    all_entries = [entry.unpack_from(section, index * entry.size) for index in range(slots)]
    end = next((index for index, (tag, _) in enumerate(all_entries) if tag == DT_NULL), None)
    if end is None:
        raise ElfError(f"{where}: the dynamic section has no DT_NULL entry")
    entries = tuple(all_entries[:end])
    nulls = next((index for index in range(end, slots) if all_entries[index][0] != DT_NULL), slots) - end
    found = {tag: [value for entry_tag, value in entries if entry_tag == tag] for tag in (DT_STRTAB, DT_STRSZ)}
    if len(found[DT_STRTAB]) != 1 or len(found[DT_STRSZ]) != 1:
        raise ElfError(f"{where}: expected one DT_STRTAB and one DT_STRSZ in the dynamic section")
    strtab, strsz = found[DT_STRTAB][0], found[DT_STRSZ][0]
    strtab_offset = _file_offset(programs, strtab, strsz)
    if strtab_offset is None:
        raise ElfError(
            f"{where}: the dynamic string table (DT_STRTAB, DT_STRSZ) lies outside every PT_LOAD's file bytes"
        )
    # Kept whole as it streams by, when it lies ahead (a table patchelf moved past .dynamic, as torch's): its strings
    # are read in offset order, each up to _MAX_STRING bytes, and one whose read crossed into the next chunk made the
    # next string lie behind the stream (a pass more over libtorch_cpu.so's 470 MB); the symbol table's names too.
    reader.keep(strtab_offset, strsz)
    named = [value for tag, value in entries if tag in STRING_TAGS]
    if len(named) > _MAX_NAMES:
        raise ElfError(
            f"{where}: unsupported dynamic section ({len(named)} DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH "
            f"entries, more than {_MAX_NAMES})"
        )
    strings: dict[int, bytes] = {}
    held = 0
    for offset in sorted(set(named)):
        if offset >= strsz:
            raise ElfError(f"{where}: a dynamic string offset ({offset}) past the string table's end ({strsz})")
        text = reader.read(strtab_offset + offset, min(_MAX_STRING, strsz - offset), "a dynamic string")
        end = text.find(b"\0")
        if end < 0:
            raise ElfError(f"{where}: a dynamic string at {offset} has no NUL within {len(text)} bytes")
        held += end + 1
        if held > _MAX_NAME_BYTES:
            raise ElfError(
                f"{where}: unsupported dynamic section (its DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH strings "
                f"hold more than {_MAX_NAME_BYTES} bytes)"
            )
        strings[offset] = text[:end]
    return shoff + shnum * shentsize, DynamicLayout(
        elf,
        phoff,
        phentsize,
        programs,
        shoff,
        shentsize,
        shnum,
        dynamic_indices[0],
        entries,
        nulls,
        strtab,
        strtab_offset,
        strsz,
        strings,
    )


def _file_offset(programs: tuple[dict[str, int], ...], address: int, size: int) -> int | None:
    """The file offset of ``size`` bytes at ``address``, if one PT_LOAD maps them all from the file."""
    for program in programs:
        if (
            program["type"] == PT_LOAD
            and program["vaddr"] <= address
            and address + size <= program["vaddr"] + program["filesz"]
        ):
            return program["offset"] + address - program["vaddr"]
    return None


SectionTable = tuple[ElfFormat, list[dict[str, int]]]
"""A file's class and byte order, and its section headers (:func:`read_sections`)."""


def read_library(wheel: Path, info: ZipMember, path: str) -> ElfLibrary | None:
    """The dynamic section of one archive member, streamed, in bounded memory; None for a data-scheme
    member that is not an ELF file (a ``.so``-named file outside site-packages need not be a library)."""
    return library_of(member_reader(wheel, info, path), wheel=wheel.name, path=path)[0]


def member_reader(wheel: Path, info: ZipMember, path: str) -> ForwardReader:
    """A :class:`ForwardReader` over the member ``info`` of ``wheel``, installed at ``path``."""
    return ForwardReader(lambda: inflated_chunks(wheel, info), f"{wheel.name}: {path}")


def read_installed_library(file: Path, *, wheel: str, path: str) -> ElfLibrary | None:
    """:func:`read_library` on the member's copy installed at ``file`` (checked against RECORD when it was
    written): the same library, read where its headers point instead of inflating the member again."""
    with open(file, "rb") as opened:
        return library_of(FileReader(opened.fileno(), f"{wheel}: {path}"), wheel=wheel, path=path)[0]


def parse_elf(data: bytes, *, wheel: str, path: str) -> ElfLibrary:
    """:func:`read_library` on a library's bytes."""
    return _library(ForwardReader(lambda: iter([data]), f"{wheel}: {path}"), wheel=wheel, path=path)[0]


def library_of(
    reader: ForwardReader | FileReader, *, wheel: str, path: str, sections: bool = False
) -> tuple[ElfLibrary | None, SectionTable | None]:
    """The :class:`ElfLibrary` ``reader`` streams (None for a data-scheme file that is not an ELF file), its member
    read to the end (checked whole); with ``sections``, also its section headers, read in the same pass (they lie
    after ``.dynamic``, at the file's end): None where there are none to read so (no PT_DYNAMIC, a table this reader
    cannot follow in that pass), which decides nothing about the library."""
    if data_scheme(path) and reader.read(0, len(ELF_MAGIC), "the ELF magic", exact=False) != ELF_MAGIC:
        return None, None
    return _library(reader, wheel=wheel, path=path, sections=sections)


def _library(
    reader: ForwardReader | FileReader, *, wheel: str, path: str, sections: bool = False
) -> tuple[ElfLibrary, SectionTable | None]:
    """:func:`library_of` of a file known to be meant as a library."""
    where = f"{wheel}: {path}"
    section_table_end, layout = _read_layout(reader, where, keep_sections=sections)
    table = None
    if sections and layout is not None:
        try:
            table = layout.format, section_headers(reader, layout.format, layout.shoff, layout.shnum, layout.shentsize)
        except ElfError:  # cut, or out of file order too often: what needs it reads the file again on its own
            pass
    if section_table_end > reader.finish():  # nothing here reads it, but a cut file is one to refuse
        raise ElfError(f"{where}: truncated or corrupt ELF file (its sh table ends past its end)")
    if layout is None:
        return ElfLibrary(wheel, path, None, (), (), ()), None

    # Latin-1, as pyelftools decoded them (the graph's names before this reader): any bytes round-trip.  Each
    # string decoded (and a search path split) once, however many entries name it, and equal names are one object:
    # a library repeating a name (or a search path entry) thousands of times holds a pointer per repeat, not a copy.
    canonical: dict[str, str] = {}

    def one(name: str) -> str:
        return canonical.setdefault(name, name)

    decoded = {offset: one(string.decode("latin-1")) for offset, string in layout.strings.items()}
    split: dict[int, list[str]] = {}
    held = 0
    for tag in (DT_RPATH, DT_RUNPATH):
        for value in layout.values(tag):
            if value not in split:
                split[value] = [one(entry) for entry in decoded[value].split(":") if entry]
            held += len(split[value])
            if held > _MAX_NAMES:
                raise ElfError(
                    f"{where}: unsupported dynamic section (its DT_RPATH and DT_RUNPATH hold more than {_MAX_NAMES} "
                    "search path entries)"
                )

    def search_path(tag: int) -> tuple[str, ...]:
        return tuple(entry for value in layout.values(tag) for entry in split[value])

    sonames = layout.values(DT_SONAME)
    needed = tuple(decoded[value] for value in layout.values(DT_NEEDED))
    soname = decoded[sonames[-1]] if sonames else None
    return ElfLibrary(wheel, path, soname, needed, search_path(DT_RPATH), search_path(DT_RUNPATH)), table
